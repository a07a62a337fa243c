// JSON text of a model file (config.json, tokenizer.json, layout.json, manifest.json, ...) parsed
// into nlohmann::json with every failure turned into a Status that names the file and the key.
//
// nlohmann reports a syntax error with a byte offset but a number that does not fit a double
// (`1e999`) as out_of_range.406 with neither; `json::parse(..., allow_exceptions = false)` loses
// both. parse_json_text parses once without a callback (the fast path, tokenizer.json is ~10 MB)
// and only on failure parses again with a callback that tracks the key path, so the message reads
// `[tokenizer] DIR/tokenizer.json: added_tokens[3].id: number overflow parsing '1e999'`.
//
// The typed getters below read one field of an object, checking its type and range; a failure
// names the file and the key (`layout.json: expert_files[2].gate.bits: expected an integer in
// 0..16, got "4"`). Plain functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::format {

// `tag` is the message prefix ("[config]"), `path` the file; errors carry `code`.
Expected<nlohmann::json> parse_json_text(std::string_view text, const std::string& path, std::string_view tag,
                                         ErrorCode code);

// The JSON type of `v` for messages: "a string", "an integer", "a number", ...
std::string json_type_of(const nlohmann::json& v);

// A 64-bit checksum as the JSON manifests write it (16 lowercase hex digits, XXH3), and read back:
// 1 to 16 hex digits, false otherwise.
std::string hex64(uint64_t v);
bool parse_hex64(std::string_view text, uint64_t* out);

// Field readers over one object, collecting the first failure (later ones are dropped): every
// message is "<tag> <path>: <where>.<key>: expected ..., got ...".
class JsonFields {
 public:
    JsonFields(std::string tag, std::string path, ErrorCode code)
        : tag_(std::move(tag)), path_(std::move(path)), code_(code) {}

    Status status() const { return status_; }
    bool ok() const { return status_.is_ok(); }
    void fail(const std::string& where, const std::string& what);

    // An integer in [lo, hi]; `fallback` when absent (required: absent is an error).
    int64_t integer(const nlohmann::json& obj, const char* key, const std::string& where, int64_t lo,
                    int64_t hi, bool required, int64_t fallback = 0);
    // `v` itself (an array element), named `at`.
    int64_t integer_value(const nlohmann::json& v, const std::string& at, int64_t lo, int64_t hi);
    uint64_t unsigned_integer(const nlohmann::json& obj, const char* key, const std::string& where,
                              bool required);
    std::string string(const nlohmann::json& obj, const char* key, const std::string& where, bool required,
                       const std::string& fallback = "");

 private:
    std::string tag_, path_;
    ErrorCode code_;
    Status status_;
};

// "where.key", or "key" at the top level.
std::string json_key_path(const std::string& where, const char* key);

}  // namespace sluice::format
