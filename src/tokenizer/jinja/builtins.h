// The interpreter's library: filters, tests, attribute access (including string and dict methods),
// operators' equality rules, and the global functions (range, namespace, raise_exception,
// strftime_now). Behaviour follows @huggingface/jinja; where the oracle rejects a construct that
// Python Jinja2 (what transformers renders with) accepts, Python's behaviour is implemented
// instead and marked "[python]" at the definition.
//
// Stateless; every function is safe to call from any thread on its own values.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/value.h"

namespace sluice::jinja {

// `operand | filter` where filter is an Identifier or Call node.
Value apply_filter(Interpreter& interp, const Value& operand, const Node& filter, const EnvPtr& env);

// `operand is name(args)`.
bool apply_test(const std::string& name, const Value& operand, const std::vector<Value>& args);

// `object.property` / `object[property]` (non-slice): map entries, list/string indexing, methods.
Value get_member(const Value& object, const Value& property);

// `object[start:stop:step]` for arrays and strings (absent bounds as undefined).
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);

// JS `==` on the values' payloads, as the oracle's `left.value == right.value`.
bool loose_equals(const Value& a, const Value& b);
// JS `===` on the payloads (membership, unique).
bool strict_equals(const Value& a, const Value& b);

// Declares true/false/none (and title-case spellings), range, namespace, raise_exception,
// strftime_now in `env`.
void install_globals(Env& env);

}  // namespace sluice::jinja
