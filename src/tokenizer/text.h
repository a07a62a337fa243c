// Unicode and UTF-8 helpers for the tokenizer: code point classes for the pre-tokenizer, UTF-8
// stepping, lossy decoding (U+FFFD per maximal ill-formed subsequence, as Rust's
// String::from_utf8_lossy and the WHATWG TextDecoder do), and NFC normalisation.
//
// Lifetime/threading: the class table is built once on first use (a function-local static, so
// initialisation is thread-safe) and is immutable afterwards; every function is reentrant.
// Rejected alternative: utf8proc's category lookup for the classes. Its database (Unicode 15 in
// Debian 12) lags the oracle's (Unicode 17), and a flat two-stage table is faster per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::tok {

enum CodePointClass : uint8_t {
    kClassLetter = 1,      // \p{L}
    kClassNumber = 2,      // \p{N}
    kClassMark = 4,        // \p{M}
    kClassWhitespace = 8,  // \s in Oniguruma = Unicode White_Space
    kClassNfcStable = 16,  // no NFC work needed around it (see scripts/gen_unicode_tables.mjs)
};

// Bitwise OR of CodePointClass for `cp` (0 for anything else, including unassigned code points).
uint8_t code_point_classes(uint32_t cp);

// Decodes the code point at the front of valid UTF-8 `s` (non-empty); returns its byte length.
inline size_t next_code_point(const char* s, uint32_t* cp) {
    const auto* u = reinterpret_cast<const unsigned char*>(s);
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    if (u[0] < 0xE0) {
        *cp = ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
        return 2;
    }
    if (u[0] < 0xF0) {
        *cp = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
        return 3;
    }
    *cp = ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
    return 4;
}

void append_utf8(std::string& out, uint32_t cp);

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// `s` with every maximal ill-formed subsequence replaced by U+FFFD.
std::string utf8_lossy(std::string_view s);
void append_utf8_lossy(std::string& out, std::string_view s);

// Length of the longest prefix of `s` after which the rest is an incomplete (but so far valid)
// UTF-8 sequence that more bytes could complete. Lossy-decoding the prefix now and the rest
// later with more bytes appended gives the same text as lossy-decoding everything at once.
size_t utf8_stable_prefix(std::string_view s);

// True when valid UTF-8 `s` is certainly in NFC already: every code point is kClassNfcStable
// (NFC_Quick_Check=Yes, combining class 0, never composes with what precedes it).
// False means "unknown": run nfc().
bool is_nfc_quick(std::string_view s);

// Unicode NFC of valid UTF-8 `s` (utf8proc).
std::string nfc(std::string_view s);

}  // namespace sluice::tok
