// Helpers shared by builtins.cpp (tests, members, globals) and filters.cpp; not part of the
// interpreter's interface. Semantics follow the oracle's runtime.ts/utils.ts functions named below.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/value.h"

namespace sluice::jinja::detail {

// Positional argument i, else keyword `kw` (may be null), else null.
const Value* arg_at(const CallArgs& args, size_t i, const char* kw);
Value make_fn(std::string name, std::function<Value(Interpreter&, const CallArgs&)> f);

bool js_parse_int(const std::string& s, double& out);    // parseInt(s, 10); false for NaN
bool js_parse_float(const std::string& s, double& out);  // parseFloat(s); false for NaN
double js_to_number(const std::string& s);               // ToNumber(string)

int compare_values(const Value& a, const Value& b, bool case_sensitive);  // compareRuntimeValues
Value attribute_path(const Value& item, const std::string& path);         // getAttributeValue

std::string title_case(const std::string& s);  // titleCase(): /\b\w/g upper-cased
std::string capitalize(const std::string& s);  // first character upper-cased, rest kept
std::vector<std::string> split_string(const std::string& s, const std::string& sep);
const std::string& need_string(const Value& v, const char* what);

Value string_method(const std::string& self, const std::string& name);  // StringValue.builtins
Value items_of(const Object& o);
Value object_method(const Value& self, const std::string& name);  // ObjectValue.builtins

}  // namespace sluice::jinja::detail
