// Rewrites a pre-tokenizer regex for PCRE2 so that its Unicode classes -- \p{..} / \P{..} general
// categories, \s / \S (White_Space, Oniguruma's \s) and \d / \D (Nd) -- are spelled as explicit code
// point ranges from tables generated with the oracle's Unicode version (unicode_categories.inc,
// Unicode 17). PCRE2's own tables lag it (Unicode 14 in Debian's 10.42): U+1FA77 PINK HEART is \p{So}
// to HF tokenizers and the oracle but unassigned to PCRE2, which splits DeepSeek-V3's " 🩷" in two.
//
// The rewrite: outside a class `\p{L}` becomes `(?-i:[ranges])` (caseless matching does not extend a
// property, so it must not extend its ranges either); inside a class the ranges join the class's
// other members, merged. Escapes whose meaning differs between Oniguruma (HF's engine) and PCRE2, or
// that depend on tables not generated here (\w, \b, \h, \v, \R, \X, script properties), are refused
// naming the escape, as is a Unicode class inside [...] under (?i).
//
// Pure function; the tables are constexpr.
// Rejected alternatives: a hand-written matcher per regex (as for Qwen's) -- exact, but one per model
// family; linking a newer PCRE2 -- its tables would still drift from the oracle's over time.
#pragma once

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::tok {

Expected<std::string> spell_unicode_classes(std::string_view regex);

}  // namespace sluice::tok
