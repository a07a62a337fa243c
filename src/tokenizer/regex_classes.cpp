// See regex_classes.h. The scanner knows just enough PCRE2 syntax to find the escapes it rewrites:
// character classes (with POSIX [:name:] items and a leading ']'), \Q...\E quoting, \c and braced
// escapes, and the groups that set or scope the i flag.
#include "tokenizer/regex_classes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>
#include <vector>

namespace sluice::tok {
namespace {

struct UnicodeRange {
    uint32_t first;
    uint32_t last;
    uint8_t category;
};
#include "tokenizer/unicode_categories.inc"

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

Status unsupported(std::string_view regex, const std::string& what) {
    return error(ErrorCode::kUnsupported,
                 fmt::format("[tokenizer] pre-tokenizer regex: {} (regex: {})", what, regex));
}

// Sorted, merged, without surrogates (PCRE2 refuses them in UTF mode).
Ranges normalized(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (auto [a, b] : r) {
        if (!out.empty() && a <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, b);
        } else {
            out.emplace_back(a, b);
        }
    }
    Ranges clean;
    for (auto [a, b] : out) {
        if (b < 0xD800 || a > 0xDFFF) {
            clean.emplace_back(a, b);
            continue;
        }
        if (a < 0xD800) clean.emplace_back(a, 0xD7FF);
        if (b > 0xDFFF) clean.emplace_back(0xE000, b);
    }
    return clean;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (auto [a, b] : normalized(r)) {
        if (a > next) out.emplace_back(next, a - 1);
        next = b + 1;
    }
    if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
    return normalized(out);
}

// The general categories a property name covers, as a bit per kGeneralCategoryNames entry; "Cn" (the
// gaps) is bit 31. Names as PCRE2 and Oniguruma take them: case, spaces, '_' and '-' ignored.
constexpr uint32_t kCn = 1u << 31;
bool category_mask(std::string name, uint32_t* mask) {
    std::string key;
    for (char c : name)
        if (c != ' ' && c != '_' && c != '-') key += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    auto bit = [](std::string_view code) {
        for (size_t i = 0; i < std::size(kGeneralCategoryNames); ++i)
            if (code == kGeneralCategoryNames[i]) return 1u << i;
        return code == "Cn" ? kCn : 0u;
    };
    auto major = [&](char letter) {
        uint32_t m = 0;
        for (size_t i = 0; i < std::size(kGeneralCategoryNames); ++i)
            if (kGeneralCategoryNames[i][0] == letter) m |= 1u << i;
        return letter == 'C' ? m | kCn : m;
    };
    static const std::pair<std::string_view, std::string_view> kLongNames[] = {
        {"letter", "L"},
        {"casedletter", "LC"},
        {"l&", "LC"},
        {"lc", "LC"},
        {"uppercaseletter", "Lu"},
        {"lowercaseletter", "Ll"},
        {"titlecaseletter", "Lt"},
        {"modifierletter", "Lm"},
        {"otherletter", "Lo"},
        {"mark", "M"},
        {"combiningmark", "M"},
        {"nonspacingmark", "Mn"},
        {"spacingmark", "Mc"},
        {"enclosingmark", "Me"},
        {"number", "N"},
        {"decimalnumber", "Nd"},
        {"letternumber", "Nl"},
        {"othernumber", "No"},
        {"punctuation", "P"},
        {"punct", "P"},
        {"connectorpunctuation", "Pc"},
        {"dashpunctuation", "Pd"},
        {"openpunctuation", "Ps"},
        {"closepunctuation", "Pe"},
        {"initialpunctuation", "Pi"},
        {"finalpunctuation", "Pf"},
        {"otherpunctuation", "Po"},
        {"symbol", "S"},
        {"mathsymbol", "Sm"},
        {"currencysymbol", "Sc"},
        {"modifiersymbol", "Sk"},
        {"othersymbol", "So"},
        {"separator", "Z"},
        {"spaceseparator", "Zs"},
        {"lineseparator", "Zl"},
        {"paragraphseparator", "Zp"},
        {"other", "C"},
        {"control", "Cc"},
        {"format", "Cf"},
        {"surrogate", "Cs"},
        {"privateuse", "Co"},
        {"unassigned", "Cn"},
    };
    std::string code;
    for (const auto& [long_name, short_name] : kLongNames)
        if (key == long_name) code = short_name;
    if (code.empty()) {
        if (key.size() == 1 || key.size() == 2) {
            code = key;
            code[0] = static_cast<char>(code[0] - 32);
        } else {
            return false;
        }
    }
    if (code == "LC") {
        *mask = bit("Lu") | bit("Ll") | bit("Lt");
        return true;
    }
    *mask = code.size() == 1 ? major(code[0]) : bit(code);
    return *mask != 0;
}

Ranges category_ranges(uint32_t mask) {
    Ranges r;
    uint32_t next = 0;  // the first code point not yet covered by a table range (for Cn)
    for (const UnicodeRange& u : kGeneralCategoryRanges) {
        if ((mask & kCn) && u.first > next) r.emplace_back(next, u.first - 1);
        if (mask & (1u << u.category)) r.emplace_back(u.first, u.last);
        next = u.last + 1;
    }
    if ((mask & kCn) && next <= kMaxCodePoint) r.emplace_back(next, kMaxCodePoint);
    return normalized(std::move(r));
}

Ranges white_space_ranges() {
    Ranges r;
    for (const UnicodeRange& u : kWhiteSpaceRanges) r.emplace_back(u.first, u.last);
    return r;
}

void append_ranges(std::string* out, const Ranges& ranges) {
    for (auto [a, b] : ranges) {
        *out += fmt::format("\\x{{{:x}}}", a);
        if (b != a) *out += fmt::format("-\\x{{{:x}}}", b);
    }
}

}  // namespace

Expected<std::string> spell_unicode_classes(std::string_view re) {
    std::string out;
    out.reserve(re.size() * 4);
    bool in_class = false;
    bool class_caseless = false;
    // The rewritten members of the open class: merged, they go where the first of them stood (a valid
    // pattern has no range hyphen next to a class escape, so they cannot join a neighbour's range).
    Ranges class_ranges;
    size_t class_insert = 0;
    std::vector<bool> caseless;  // the i flag of each open group's enclosing scope
    bool ci = false;             // the i flag now
    const size_t n = re.size();
    size_t i = 0;
    while (i < n) {
        const char c = re[i];
        if (c == '\\' && i + 1 < n) {
            const char d = re[i + 1];
            Ranges ranges;
            bool negate = false;
            size_t len = 2;
            if (d == 'Q') {  // literal up to \E
                const size_t end = re.find("\\E", i + 2);
                const size_t stop = end == std::string_view::npos ? n : end + 2;
                out.append(re.substr(i, stop - i));
                i = stop;
                continue;
            } else if (d == 'p' || d == 'P') {
                std::string name;
                if (i + 2 < n && re[i + 2] == '{') {
                    const size_t close = re.find('}', i + 3);
                    if (close == std::string_view::npos) return unsupported(re, "unterminated \\p{");
                    name = std::string(re.substr(i + 3, close - i - 3));
                    len = close + 1 - i;
                } else if (i + 2 < n) {
                    name = std::string(1, re[i + 2]);
                    len = 3;
                } else {
                    return unsupported(re, "\\p without a property name");
                }
                negate = d == 'P';
                if (!name.empty() && name[0] == '^') {
                    negate = !negate;
                    name.erase(0, 1);
                }
                uint32_t mask = 0;
                if (!category_mask(name, &mask))
                    return unsupported(
                        re, fmt::format("\\{}{{{}}}: only general categories are supported (L, Lu, "
                                        "N, P, S, M, Z, C, ... and their long names)",
                                        d, name));
                ranges = category_ranges(mask);
            } else if (d == 's' || d == 'S') {
                ranges = white_space_ranges();
                negate = d == 'S';
            } else if (d == 'd' || d == 'D') {
                uint32_t mask = 0;
                category_mask("Nd", &mask);
                ranges = category_ranges(mask);
                negate = d == 'D';
            } else if (std::string_view("wWbBhHvVRX").find(d) != std::string_view::npos) {
                return unsupported(re, fmt::format("\\{} is not supported (its meaning differs between "
                                                   "Oniguruma, which HF tokenizers uses, and PCRE2)",
                                                   d));
            } else {
                // Any other escape is copied: \c takes the next character with it.
                len = d == 'c' && i + 2 < n ? 3 : 2;
                out.append(re.substr(i, len));
                i += len;
                continue;
            }
            if (in_class) {
                if (class_caseless) return unsupported(re, "a Unicode class inside [...] under (?i)");
                const Ranges add = negate ? complement(ranges) : ranges;
                if (class_ranges.empty()) class_insert = out.size();
                class_ranges.insert(class_ranges.end(), add.begin(), add.end());
            } else {
                out += negate ? "(?-i:[^" : "(?-i:[";
                append_ranges(&out, normalized(std::move(ranges)));
                out += "])";
            }
            i += len;
            continue;
        }
        if (in_class) {
            if (c == '[' && i + 1 < n && re[i + 1] == ':') {  // a POSIX item [:name:]
                const size_t close = re.find(":]", i + 2);
                const size_t stop = close == std::string_view::npos ? n : close + 2;
                out.append(re.substr(i, stop - i));
                i = stop;
                continue;
            }
            if (c == ']') {
                if (!class_ranges.empty()) {
                    std::string spelled;
                    append_ranges(&spelled, normalized(std::move(class_ranges)));
                    out.insert(class_insert, spelled);
                }
                class_ranges.clear();
                in_class = false;
            }
            out += c;
            ++i;
            continue;
        }
        if (c == '[') {
            in_class = true;
            class_caseless = ci;
            out += c;
            ++i;
            if (i < n && re[i] == '^') out += re[i++];
            if (i < n && re[i] == ']') out += re[i++];  // a leading ']' is a member
            continue;
        }
        if (c == '(') {
            if (i + 2 < n && re[i + 1] == '?' && re[i + 2] == '#') {  // a comment (?#...)
                const size_t close = re.find(')', i);
                const size_t stop = close == std::string_view::npos ? n : close + 1;
                out.append(re.substr(i, stop - i));
                i = stop;
                continue;
            }
            // (?flags) sets the i flag for the rest of the enclosing group; (?flags:...) and every
            // other group scope it.
            bool new_ci = ci;
            size_t f = i + 1;
            bool flags = false;
            if (f < n && re[f] == '?') {
                bool on = true;
                for (++f; f < n &&
                          (std::isalpha(static_cast<unsigned char>(re[f])) || re[f] == '-' || re[f] == '^');
                     ++f) {
                    if (re[f] == '-') on = false;
                    if (re[f] == '^') new_ci = false;
                    if (re[f] == 'i') new_ci = on;
                    flags = true;
                }
                flags = flags && f < n && (re[f] == ')' || re[f] == ':');
            }
            if (flags && re[f] == ')') {
                ci = new_ci;
                out.append(re.substr(i, f + 1 - i));
                i = f + 1;
                continue;
            }
            caseless.push_back(ci);
            if (flags) ci = new_ci;
            out += c;
            ++i;
            continue;
        }
        if (c == ')' && !caseless.empty()) {
            ci = caseless.back();
            caseless.pop_back();
        }
        out += c;
        ++i;
    }
    return out;
}

}  // namespace sluice::tok
