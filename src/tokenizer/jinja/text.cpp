// See text.h. Case mapping uses utf8proc's simple (one-to-one) mappings; JavaScript's full
// mappings differ only for a few characters (e.g. "ß".toUpperCase() is "SS").
#include "tokenizer/jinja/text.h"

#include <utf8proc.h>

namespace sluice::jinja {

size_t js_space_at(std::string_view s, size_t i) {
    if (i >= s.size()) return 0;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return 1;
    if (c < 0x80) return 0;
    uint32_t cp = 0;
    size_t len = decode_utf8(s, i, cp);
    bool space = cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                 cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
    return space ? len : 0;
}

size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + len > s.size()) len = 1;
    if (len == 1) {
        cp = c;
        return 1;
    }
    cp = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    return len;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string js_trim(std::string_view s, bool start, bool end) {
    size_t b = 0;
    if (start) {
        while (size_t w = js_space_at(s, b)) b += w;
    }
    size_t e = s.size();
    if (end) {
        e = b;
        for (size_t i = b; i < s.size();) {
            size_t w = js_space_at(s, i);
            if (w) {
                i += w;
            } else {
                uint32_t cp = 0;
                i += decode_utf8(s, i, cp);
                e = i;
            }
        }
    }
    return std::string(s.substr(b, e - b));
}

std::string strip_chars(std::string_view s, std::string_view chars, bool start, bool end) {
    std::vector<std::string> set = code_points(chars);
    std::vector<std::string> cps = code_points(s);
    auto in_set = [&](const std::string& c) {
        for (const auto& x : set) {
            if (x == c) return true;
        }
        return false;
    };
    size_t b = 0, e = cps.size();
    if (start) {
        while (b < e && in_set(cps[b])) ++b;
    }
    if (end) {
        while (e > b && in_set(cps[e - 1])) --e;
    }
    std::string out;
    for (size_t i = b; i < e; ++i) out += cps[i];
    return out;
}

std::vector<std::string> code_points(std::string_view s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        size_t len = decode_utf8(s, i, cp);
        out.emplace_back(s.substr(i, len));
        i += len;
    }
    return out;
}

static std::string map_case(std::string_view s, bool upper) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        size_t len = decode_utf8(s, i, cp);
        if (cp < 0x80) {
            char c = static_cast<char>(cp);
            if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
            if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
            out += c;
        } else if (len == 1) {
            out += s[i];  // malformed byte: keep
        } else {
            auto mapped = upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))
                                : utf8proc_tolower(static_cast<utf8proc_int32_t>(cp));
            append_utf8(out, static_cast<uint32_t>(mapped));
        }
        i += len;
    }
    return out;
}

std::string to_upper(std::string_view s) {
    return map_case(s, true);
}
std::string to_lower(std::string_view s) {
    return map_case(s, false);
}

}  // namespace sluice::jinja
