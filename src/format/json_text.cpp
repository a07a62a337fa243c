#include "format/json_text.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace sluice::format {

using nlohmann::json;

namespace {

// The key path of the element being parsed, kept from parser events: one frame per open object
// (its current key) or array (its current index).
class KeyPathTracker {
 public:
    bool on_event(json::parse_event_t event, const json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
            case json::parse_event_t::array_start:
                next_element();
                frames_.push_back({event == json::parse_event_t::array_start, {}, -1});
                break;
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                if (!frames_.empty()) frames_.pop_back();
                break;
            case json::parse_event_t::key:
                if (!frames_.empty() && parsed.is_string()) frames_.back().key = parsed.get<std::string>();
                break;
            case json::parse_event_t::value: next_element(); break;
        }
        return true;
    }
    // The path of the element after the last one parsed: where the text stopped being valid.
    std::string path() const {
        std::string out;
        for (size_t i = 0; i < frames_.size(); ++i) {
            const Frame& f = frames_[i];
            if (f.array) {
                // The innermost frame's failing element is the one after the last parsed; an
                // outer array's is the element still open.
                out += "[" + std::to_string(i + 1 == frames_.size() ? f.index + 1 : f.index) + "]";
            } else if (!f.key.empty()) {
                if (!out.empty()) out += ".";
                out += f.key;
            }
        }
        return out;
    }

 private:
    struct Frame {
        bool array;
        std::string key;
        int64_t index;  // last element parsed (arrays)
    };
    void next_element() {
        if (!frames_.empty() && frames_.back().array) frames_.back().index++;
    }
    std::vector<Frame> frames_;
};

}  // namespace

Expected<json> parse_json_text(std::string_view text, const std::string& path, std::string_view tag,
                               ErrorCode code) {
    auto fail = [&](const std::string& what) {
        return error(code, std::string(tag) + " " + path + ": " + what);
    };
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::exception&) {
        // Fall through: parse again to find where.
    }
    KeyPathTracker tracker;
    try {
        json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
            return tracker.on_event(event, parsed);
        };
        const json again = json::parse(text.begin(), text.end(), cb);
        (void)again;
    } catch (const json::parse_error& e) {
        const std::string at = tracker.path();
        return fail((at.empty() ? std::string() : at + ": ") + "invalid JSON at byte " +
                    std::to_string(e.byte) + ": " + e.what());
    } catch (const json::exception& e) {  // out_of_range.406: a number too large for a double
        const std::string at = tracker.path();
        return fail((at.empty() ? std::string("invalid JSON: ") : at + ": ") + e.what());
    }
    return fail("invalid JSON");  // unreachable: the first parse failed
}

std::string json_type_of(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "a binary value";
}

std::string json_key_path(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
}

void JsonFields::fail(const std::string& where, const std::string& what) {
    if (status_.is_ok())
        status_ =
            error(code_, tag_ + " " + path_ + ": " + (where.empty() ? std::string() : where + ": ") + what);
}

int64_t JsonFields::integer(const json& obj, const char* key, const std::string& where, int64_t lo,
                            int64_t hi, bool required, int64_t fallback) {
    const std::string at = json_key_path(where, key);
    if (!obj.is_object()) {
        fail(where, "expected an object, got " + json_type_of(obj));
        return fallback;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
        if (required) fail(at, "missing");
        return fallback;
    }
    if (!ok()) return fallback;
    const int64_t v = integer_value(*it, at, lo, hi);
    return ok() ? v : fallback;
}

int64_t JsonFields::integer_value(const json& v, const std::string& at, int64_t lo, int64_t hi) {
    auto range = [&] { return "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi); };
    if (!v.is_number_integer()) {
        fail(at, range() + ", got " + json_type_of(v) + " " + v.dump());
        return lo;
    }
    // A number past INT64_MAX is stored unsigned: out of every range here.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        fail(at, range() + ", got " + v.dump());
        return lo;
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) {
        fail(at, range() + ", got " + v.dump());
        return lo;
    }
    return x;
}

uint64_t JsonFields::unsigned_integer(const json& obj, const char* key, const std::string& where,
                                      bool required) {
    const std::string at = json_key_path(where, key);
    if (!obj.is_object()) {
        fail(where, "expected an object, got " + json_type_of(obj));
        return 0;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
        if (required) fail(at, "missing");
        return 0;
    }
    if (!it->is_number_unsigned()) {
        fail(at, "expected a non-negative integer, got " + json_type_of(*it) + " " + it->dump());
        return 0;
    }
    return it->get<uint64_t>();
}

std::string JsonFields::string(const json& obj, const char* key, const std::string& where, bool required,
                               const std::string& fallback) {
    const std::string at = json_key_path(where, key);
    if (!obj.is_object()) {
        fail(where, "expected an object, got " + json_type_of(obj));
        return fallback;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
        if (required) fail(at, "missing");
        return fallback;
    }
    if (!it->is_string()) {
        fail(at, "expected a string, got " + json_type_of(*it) + " " + it->dump());
        return fallback;
    }
    return it->get<std::string>();
}

std::string hex64(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

bool parse_hex64(std::string_view text, uint64_t* out) {
    if (text.empty() || text.size() > 16) return false;
    const std::string s(text);
    char* end = nullptr;
    *out = std::strtoull(s.c_str(), &end, 16);
    return *end == '\0';
}

}  // namespace sluice::format
