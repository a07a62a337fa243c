// JSON-object constrained decoding (see json_grammar.h).
#include "server/json_grammar.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace sluice::server {
namespace {
bool is_ws(unsigned char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
bool is_digit(unsigned char c) {
    return c >= '0' && c <= '9';
}
bool is_hex(unsigned char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
}  // namespace

// A value just ended: back to the enclosing container, or done at the top.
bool JsonValidator::end_value() {
    if (stack_.empty()) {
        done_ = true;
        mode_ = Mode::kAfterValue;
        return true;
    }
    mode_ = Mode::kAfterValue;
    return true;
}

bool JsonValidator::feed_number(unsigned char c) {
    switch (number_state_) {
        case 0:  // after '-'
            if (c == '0')
                number_state_ = 1;
            else if (is_digit(c))
                number_state_ = 2;
            else
                return false;
            return true;
        case 1:
        case 2:
            if (number_state_ == 2 && is_digit(c)) return true;
            if (c == '.') {
                number_state_ = 3;
                return true;
            }
            if (c == 'e' || c == 'E') {
                number_state_ = 5;
                return true;
            }
            break;
        case 3:
            if (!is_digit(c)) return false;
            number_state_ = 4;
            return true;
        case 4:
            if (is_digit(c)) return true;
            if (c == 'e' || c == 'E') {
                number_state_ = 5;
                return true;
            }
            break;
        case 5:
            if (c == '+' || c == '-') {
                number_state_ = 6;
                return true;
            }
            if (!is_digit(c)) return false;
            number_state_ = 7;
            return true;
        case 6:
            if (!is_digit(c)) return false;
            number_state_ = 7;
            return true;
        case 7:
            if (is_digit(c)) return true;
            break;
    }
    // The number ends here (only in a state where it is complete); `c` belongs to what follows.
    if (number_state_ != 1 && number_state_ != 2 && number_state_ != 4 && number_state_ != 7) return false;
    end_value();
    return feed(c);
}

bool JsonValidator::feed(unsigned char c) {
    switch (mode_) {
        case Mode::kString:
            if (c == '"') {
                if (string_is_key_) {
                    mode_ = Mode::kColon;
                    return true;
                }
                return end_value();
            }
            if (c == '\\')
                mode_ = Mode::kEscape;
            else if (c < 0x20)
                return false;
            return true;
        case Mode::kEscape:
            if (c == 'u') {
                mode_ = Mode::kUnicode;
                unicode_left_ = 4;
                return true;
            }
            if (!std::strchr("\"\\/bfnrt", c) || c == 0) return false;
            mode_ = Mode::kString;
            return true;
        case Mode::kUnicode:
            if (!is_hex(c)) return false;
            if (--unicode_left_ == 0) mode_ = Mode::kString;
            return true;
        case Mode::kNumber: return feed_number(c);
        case Mode::kLiteral:
            if (c != static_cast<unsigned char>(literal_[literal_pos_])) return false;
            if (literal_[++literal_pos_] == '\0') return end_value();
            return true;
        default: break;
    }
    if (is_ws(c)) return ++ws_run_ <= (top_started_ ? kMaxWhitespaceRun : kMaxLeadingWhitespace);
    ws_run_ = 0;
    if (done_) return false;  // only whitespace after the top-level object
    switch (mode_) {
        case Mode::kArrayStart:
            if (c == ']') {
                stack_.pop_back();
                return end_value();
            }
            [[fallthrough]];
        case Mode::kValue:
            if (!top_started_) {
                // response_format json_object: the top level must be an object.
                if (c != '{') return false;
                top_started_ = true;
            }
            if (c == '{') {
                stack_.push_back('{');
                mode_ = Mode::kObjectStart;
                return true;
            }
            if (c == '[') {
                stack_.push_back('[');
                mode_ = Mode::kArrayStart;
                return true;
            }
            if (c == '"') {
                mode_ = Mode::kString;
                string_is_key_ = false;
                return true;
            }
            if (c == '-' || is_digit(c)) {
                mode_ = Mode::kNumber;
                number_state_ = c == '-' ? 0 : (c == '0' ? 1 : 2);
                return true;
            }
            if (c == 't' || c == 'f' || c == 'n') {
                literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
                literal_pos_ = 1;
                mode_ = Mode::kLiteral;
                return true;
            }
            return false;
        case Mode::kObjectStart:
            if (c == '}') {
                stack_.pop_back();
                return end_value();
            }
            [[fallthrough]];
        case Mode::kKey:
            if (c != '"') return false;
            mode_ = Mode::kString;
            string_is_key_ = true;
            return true;
        case Mode::kColon:
            if (c != ':') return false;
            mode_ = Mode::kValue;
            return true;
        case Mode::kAfterValue:
            if (stack_.empty()) return false;
            if (c == ',') {
                if (stack_.back() == '{')
                    mode_ = Mode::kKey;
                else
                    mode_ = Mode::kValue;
                return true;
            }
            if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
                stack_.pop_back();
                return end_value();
            }
            return false;
        default: return false;
    }
}

bool JsonValidator::feed(std::string_view bytes) {
    for (char c : bytes)
        if (!feed(static_cast<unsigned char>(c))) return false;
    return true;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> eos_ids)
    : tokenizer_(std::move(tokenizer)), eos_ids_(std::move(eos_ids)) {}

void JsonConstraint::filter(std::span<float> logits) const {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const bool done = state_.complete();
    for (size_t id = 0; id < logits.size(); ++id) {
        const auto tid = static_cast<int32_t>(id);
        const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), tid) != eos_ids_.end();
        if (done) {
            if (!is_eos) logits[id] = kNegInf;
            continue;
        }
        if (is_eos || tokenizer_->is_special(tid)) {
            logits[id] = kNegInf;
            continue;
        }
        std::string_view bytes = tokenizer_->token_bytes(tid);
        if (bytes.empty()) {
            logits[id] = kNegInf;
            continue;
        }
        JsonValidator probe = state_;
        if (!probe.feed(bytes)) logits[id] = kNegInf;
    }
}

void JsonConstraint::accept(int32_t token) {
    state_.feed(tokenizer_->token_bytes(token));
}

}  // namespace sluice::server
