// See text.h. The lossy decoder follows Unicode 15 section 3.9, table 3-7 (well-formed byte
// sequences) and the "maximal subpart" substitution practice (U+FFFD per maximal subpart).
#include "tokenizer/text.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

namespace sluice::tok {
namespace {

struct ClassRange {
    uint32_t first;
    uint32_t last;
    uint8_t flags;
};

constexpr ClassRange kClassRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

// Two-stage table: stage1 maps a 256-code-point block to a deduplicated block of flags.
class ClassTable {
 public:
    ClassTable() {
        constexpr uint32_t kBlocks = 0x110000 / 256;
        std::vector<uint8_t> flat(0x110000, 0);
        for (const auto& r : kClassRanges)
            for (uint32_t cp = r.first; cp <= r.last; ++cp) flat[cp] = r.flags;
        stage1_.resize(kBlocks);
        std::unordered_map<std::string, uint16_t> index;
        for (uint32_t b = 0; b < kBlocks; ++b) {
            std::string block(reinterpret_cast<const char*>(flat.data() + b * 256), 256);
            auto [it, inserted] = index.emplace(block, static_cast<uint16_t>(index.size()));
            if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
            stage1_[b] = it->second;
        }
    }
    uint8_t get(uint32_t cp) const {
        if (cp >= 0x110000) return 0;
        return blocks_[size_t(stage1_[cp >> 8]) * 256 + (cp & 0xFF)];
    }

 private:
    std::vector<uint16_t> stage1_;
    std::vector<uint8_t> blocks_;
};

const ClassTable& class_table() {
    static const ClassTable table;
    return table;
}

// Length of the well-formed sequence at s[i], or the length of the maximal ill-formed subpart
// (>= 1) with *ok = false; *truncated = true when the subpart stopped only because input ended.
size_t scan_sequence(std::string_view s, size_t i, bool* ok, bool* truncated) {
    const auto* u = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    const unsigned b = u[i];
    *truncated = false;
    if (b < 0x80) {
        *ok = true;
        return 1;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // valid range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *ok = false;
        return 1;
    }
    for (size_t k = 1; k < len; ++k) {
        if (i + k >= n) {
            *ok = false;
            *truncated = true;
            return k;
        }
        const unsigned c = u[i + k];
        const bool in_range = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
        if (!in_range) {
            *ok = false;
            return k;
        }
    }
    *ok = true;
    return len;
}

}  // namespace

uint8_t code_point_classes(uint32_t cp) {
    return class_table().get(cp);
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        bool ok = false, truncated = false;
        const size_t len = scan_sequence(s, i, &ok, &truncated);
        if (!ok) return false;
        i += len;
    }
    return true;
}

void append_utf8_lossy(std::string& out, std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        bool ok = false, truncated = false;
        const size_t len = scan_sequence(s, i, &ok, &truncated);
        if (ok) {
            out.append(s.data() + i, len);
        } else {
            out.append("\xEF\xBF\xBD");
        }
        i += len;
    }
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    append_utf8_lossy(out, s);
    return out;
}

size_t utf8_stable_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        bool ok = false, truncated = false;
        const size_t len = scan_sequence(s, i, &ok, &truncated);
        if (truncated) return i;
        i += len;
    }
    return i;
}

bool is_nfc_quick(std::string_view s) {
    const ClassTable& table = class_table();
    for (size_t i = 0; i < s.size();) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        uint32_t cp = 0;
        i += next_code_point(s.data() + i, &cp);
        if (!(table.get(cp) & kClassNfcStable)) return false;
    }
    return true;
}

std::string nfc(std::string_view s) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(
        reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) return std::string(s);  // unreachable for valid UTF-8; keep the text rather than lose it
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
    return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace sluice::tok
