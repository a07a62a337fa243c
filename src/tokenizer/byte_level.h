// The GPT-2 byte <-> unicode table of byte-level BPE (docs/models.md 7.1 step 4): printable bytes
// 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to the same code point; the other 68 bytes map, in increasing
// byte order, to U+0100, U+0101, ... (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
// constexpr tables, no state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::tok {

constexpr std::array<uint16_t, 256> make_byte_to_unicode() {
    std::array<uint16_t, 256> t{};
    uint16_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t[b] = printable ? uint16_t(b) : next++;
    }
    return t;
}
inline constexpr std::array<uint16_t, 256> kByteToUnicode = make_byte_to_unicode();

// Inverse: code point (< 0x144) -> byte, or -1.
inline int unicode_to_byte(uint32_t cp) {
    static const auto table = [] {
        std::array<int16_t, 0x144> t{};
        t.fill(-1);
        for (int b = 0; b < 256; ++b) t[kByteToUnicode[b]] = int16_t(b);
        return t;
    }();
    return cp < table.size() ? table[cp] : -1;
}

// Maps a byte-level string back to raw bytes. Returns false (leaving `out` unspecified) when a
// character is outside the table.
bool byte_level_to_bytes(std::string_view s, std::string* out);

// Raw bytes -> byte-level string.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace sluice::tok
