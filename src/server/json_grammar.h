// response_format {"type": "json_object"}: grammar-constrained decoding that makes the reply one
// JSON object (RFC 8259), through GenerateOptions::logits_filter / on_accept.
//
// JsonValidator is an incremental pushdown recogniser over bytes: feed() rejects the first byte
// that cannot continue a valid document; complete() says a whole top-level object has been read.
// JsonConstraint applies it over tokens: at each step every vocabulary token whose bytes cannot
// continue the text so far gets -inf (special tokens too), except that end-of-sequence ids are
// allowed exactly when the object is complete — and then they are the only choice.
//
// Cost: one validator copy and up to token-length byte steps per vocabulary entry per step
// (~1 M byte steps for a 151 k vocabulary), negligible beside a forward pass of the models sluice
// serves. Rejected alternative: a precomputed token trie walked with the automaton — faster, but
// more code than this step needs now.
// Threading: one constraint per request, used by the generating thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sluice/tokenizer.h"

namespace sluice::server {

class JsonValidator {
 public:
    bool feed(unsigned char c);
    bool feed(std::string_view bytes);
    bool complete() const { return done_; }
    // Longest run of whitespace between tokens: without a bound a small model can pad forever
    // (every whitespace byte is valid JSON). Enough for pretty-printing at any sane depth.
    static constexpr int kMaxWhitespaceRun = 24;
    static constexpr int kMaxLeadingWhitespace = 2;  // before the opening '{'

 private:
    enum class Mode : uint8_t {
        kValue,        // a value is required (after ':', after ',' in an array, at the top)
        kArrayStart,   // after '[': a value or ']'
        kObjectStart,  // after '{': a key or '}'
        kKey,          // after ',' in an object: a key
        kColon,        // after a key
        kAfterValue,   // after a value: ',' or the closing bracket (or end at top)
        kString,       // inside a string (key or value)
        kEscape,       // after '\' in a string
        kUnicode,      // inside \uXXXX
        kNumber,       // inside a number
        kLiteral,      // inside true/false/null
    };
    bool end_value();
    bool feed_number(unsigned char c);

    std::vector<char> stack_;  // '{' or '['
    Mode mode_ = Mode::kValue;
    bool top_started_ = false;
    bool done_ = false;
    bool string_is_key_ = false;
    int unicode_left_ = 0;
    // Number sub-state: 0 after '-', 1 after a leading 0, 2 in integer digits, 3 after '.',
    // 4 in fraction digits, 5 after 'e', 6 after the exponent sign, 7 in exponent digits.
    int number_state_ = 0;
    const char* literal_ = nullptr;
    int literal_pos_ = 0;
    int ws_run_ = 0;
};

class JsonConstraint {
 public:
    JsonConstraint(std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> eos_ids);
    void filter(std::span<float> logits) const;
    void accept(int32_t token);

 private:
    std::shared_ptr<const Tokenizer> tokenizer_;
    std::vector<int32_t> eos_ids_;
    JsonValidator state_;
};

}  // namespace sluice::server
