// Tokens → syntax tree: a port of @huggingface/jinja's parser.ts (same precedence ladder, same
// statement set) with two additions Python Jinja2 has and the oracle lacks: tests with arguments
// (`x is divisibleby(3)`, `x is eq 3`, `x is in [..]`) and `{% raw %}` (handled by the lexer).
//
// Nesting is bounded (kMaxParseDepth) so that hostile templates fail with an error instead of
// overflowing the stack. Throws TemplateError with the offending token's offset.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace sluice::jinja {

inline constexpr int kMaxParseDepth = 200;

NodePtr parse(const std::vector<Token>& tokens, size_t source_size);

}  // namespace sluice::jinja
