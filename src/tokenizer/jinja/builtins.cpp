// Tests, member access (string and dict methods), slicing, equality and globals; see builtins.h.
// The oracle's code paths are followed case by case (its TESTS table, StringValue/ObjectValue
// builtins, evaluateMemberExpression). Filters are in filters.cpp. "[python]" marks behaviour taken from
// Python Jinja2 where the oracle throws or ignores an argument.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "tokenizer/jinja/builtins_detail.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/text.h"

namespace sluice::jinja {

namespace detail {

const Value* arg_at(const CallArgs& args, size_t i, const char* kw) {
    if (i < args.positional.size()) return &args.positional[i];
    return kw ? args.kwarg(kw) : nullptr;
}

Value make_fn(std::string name, std::function<Value(Interpreter&, const CallArgs&)> f) {
    auto fn = std::make_shared<Function>();
    fn->name = std::move(name);
    fn->call = std::move(f);
    return Value::function(std::move(fn));
}

// ---- JS number parsing (parseInt, parseFloat, ToNumber) -------------------------------------------

// parseInt(s, 10): optional whitespace and sign, then the longest digit prefix; NaN → false.
bool js_parse_int(const std::string& s, double& out) {
    std::string t = js_trim(s, true, false);
    size_t i = 0;
    bool neg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
    size_t start = i;
    double v = 0;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') v = v * 10 + (t[i++] - '0');
    if (i == start) return false;
    out = neg ? -v : v;
    return true;
}

// parseFloat(s): the longest prefix that is a decimal literal or "Infinity".
bool js_parse_float(const std::string& s, double& out) {
    std::string t = js_trim(s, true, false);
    size_t i = 0;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (t.compare(i, 8, "Infinity") == 0) {
        out = t[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    size_t n_digits = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++n_digits;
    if (i < t.size() && t[i] == '.') {
        ++i;
        while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++n_digits;
    }
    if (n_digits == 0) return false;
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        size_t j = i + 1;
        if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
        if (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) {
            while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
            i = j;
        }
    }
    out = std::strtod(t.substr(0, i).c_str(), nullptr);
    return true;
}

// ToNumber(string) for JS `==`: the whole trimmed string must be a numeric literal.
double js_to_number(const std::string& s) {
    std::string t = js_trim(s, true, true);
    if (t.empty()) return 0;
    if (t == "Infinity" || t == "+Infinity") return INFINITY;
    if (t == "-Infinity") return -INFINITY;
    if (t.size() > 2 && t[0] == '0' &&
        (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' || t[1] == 'b' || t[1] == 'B')) {
        int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
        char* end = nullptr;
        double v = static_cast<double>(std::strtoull(t.c_str() + 2, &end, base));
        return *end == '\0' ? v : NAN;
    }
    for (char c : t) {
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' ||
              c == '-'))
            return NAN;
    }
    char* end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    return *end == '\0' ? v : NAN;
}

// ---- comparison for sort / dictsort (the oracle's compareRuntimeValues) -----------------------

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
    if (a.is_null() && b.is_null()) return 0;
    if (a.is_null() || b.is_null()) {
        fail(std::string("Cannot compare ") + value_kind_name(a.kind()) + " with " +
             value_kind_name(b.kind()));
    }
    if (a.is_undefined() && b.is_undefined()) return 0;
    if (a.is_undefined() || b.is_undefined()) {
        fail(std::string("Cannot compare ") + value_kind_name(a.kind()) + " with " +
             value_kind_name(b.kind()));
    }
    auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
    if (numeric(a) && numeric(b)) {
        double x = a.is_bool() ? a.as_bool() : a.as_number();
        double y = b.is_bool() ? b.as_bool() : b.as_number();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind() != b.kind()) {
        fail(std::string("Cannot compare different types: ") + value_kind_name(a.kind()) + " and " +
             value_kind_name(b.kind()));
    }
    if (a.is_string()) {
        std::string x = case_sensitive ? a.as_string() : to_lower(a.as_string());
        std::string y = case_sensitive ? b.as_string() : to_lower(b.as_string());
        return x < y ? -1 : x > y ? 1 : 0;
    }
    fail(std::string("Cannot compare type: ") + value_kind_name(a.kind()));
}

// getAttributeValue(): "a.b.0" through objects and arrays.
Value attribute_path(const Value& item, const std::string& path) {
    Value v = item;
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (v.is_attr_container()) {
            const Value* f = v.as_object().find(part);
            v = f ? *f : Value();
        } else if (v.is_array()) {
            double idx = 0;
            if (!js_parse_int(part, idx) || idx < 0 || idx >= static_cast<double>(v.as_array().size()))
                return Value();
            v = v.as_array()[static_cast<size_t>(idx)];
        } else {
            return Value();
        }
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

// ---- strings -----------------------------------------------------------------------------------

// titleCase(): /\b\w/g → upper case (ASCII word characters; the rest is left as is).
std::string title_case(const std::string& s) {
    auto word = [](unsigned char c) { return std::isalnum(c) || c == '_'; };
    std::string out = s;
    for (size_t i = 0; i < out.size(); ++i) {
        auto c = static_cast<unsigned char>(out[i]);
        bool prev_word = i > 0 && word(static_cast<unsigned char>(out[i - 1]));
        if (word(c) && !prev_word && c >= 'a' && c <= 'z') out[i] = static_cast<char>(c - 32);
    }
    return out;
}

std::string capitalize(const std::string& s) {
    if (s.empty()) return s;
    uint32_t cp = 0;
    size_t len = decode_utf8(s, 0, cp);
    return to_upper(s.substr(0, len)) + s.substr(len);
}

std::vector<std::string> split_string(const std::string& s, const std::string& sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        size_t k = s.find(sep, start);
        if (k == std::string::npos) break;
        parts.push_back(s.substr(start, k - start));
        start = k + sep.size();
    }
    parts.push_back(s.substr(start));
    return parts;
}

// The oracle's replace(): JS replaceAll with an optional count; an empty `old` matches between
// every pair of code points (and at both ends).
std::string replace_string(const std::string& s, const std::string& old_value, const std::string& new_value,
                           int64_t count) {
    if (count == 0) return s;
    int64_t remaining = count < 0 ? INT64_MAX : count;
    std::string out;
    if (old_value.empty()) {
        for (const auto& cp : code_points(s)) {
            if (remaining > 0) {
                out += new_value;
                --remaining;
            }
            out += cp;
        }
        if (remaining > 0) out += new_value;
        return out;
    }
    size_t start = 0;
    while (remaining > 0) {
        size_t k = s.find(old_value, start);
        if (k == std::string::npos) break;
        out += s.substr(start, k - start);
        out += new_value;
        start = k + old_value.size();
        --remaining;
    }
    out += s.substr(start);
    return out;
}

int64_t count_occurrences(const std::string& s, const std::string& sub) {
    if (sub.empty()) return static_cast<int64_t>(code_points(s).size()) + 1;
    int64_t n = 0;
    for (size_t k = s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
    return n;
}

const std::string& need_string(const Value& v, const char* what) {
    if (!v.is_string()) fail(std::string(what) + " must be a string, got " + value_kind_name(v.kind()));
    return v.as_string();
}

// The string's methods (StringValue.builtins), bound to `self`.
Value string_method(const std::string& self, const std::string& name) {
    auto s = std::make_shared<const std::string>(self);
    if (name == "length") return Value::integer(utf16_length(self));
    if (name == "upper")
        return make_fn(name, [s](Interpreter&, const CallArgs&) { return Value::string(to_upper(*s)); });
    if (name == "lower")
        return make_fn(name, [s](Interpreter&, const CallArgs&) { return Value::string(to_lower(*s)); });
    if (name == "title")
        return make_fn(name, [s](Interpreter&, const CallArgs&) { return Value::string(title_case(*s)); });
    if (name == "capitalize") {
        return make_fn(name, [s](Interpreter&, const CallArgs&) { return Value::string(capitalize(*s)); });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool start = name != "rstrip", end = name != "lstrip";
        return make_fn(name, [s, start, end](Interpreter&, const CallArgs& args) {
            // [python] chars argument; the oracle ignores it and strips whitespace.
            const Value* chars = arg_at(args, 0, "chars");
            if (chars && chars->is_string())
                return Value::string(strip_chars(*s, chars->as_string(), start, end));
            return Value::string(js_trim(*s, start, end));
        });
    }
    if (name == "startswith" || name == "endswith") {
        bool starts = name == "startswith";
        return make_fn(name, [s, starts, name](Interpreter&, const CallArgs& args) {
            if (args.positional.empty()) fail(name + "() requires at least one argument");
            auto test = [&](const std::string& p) {
                if (p.size() > s->size()) return false;
                return starts ? s->compare(0, p.size(), p) == 0
                              : s->compare(s->size() - p.size(), p.size(), p) == 0;
            };
            const Value& pattern = args.positional[0];
            if (pattern.is_string()) return Value::boolean(test(pattern.as_string()));
            if (pattern.is_array()) {
                for (const auto& item : pattern.as_array()) {
                    if (!item.is_string()) fail(name + "() tuple elements must be strings");
                    if (test(item.as_string())) return Value::boolean(true);
                }
                return Value::boolean(false);
            }
            fail(name + "() argument must be a string or tuple of strings");
        });
    }
    if (name == "split") {
        return make_fn(name, [s](Interpreter&, const CallArgs& args) {
            const Value* sep = arg_at(args, 0, "sep");
            const Value* maxsplit_v = arg_at(args, 1, "maxsplit");
            if (sep && !sep->is_string() && !sep->is_null()) fail("sep argument must be a string or null");
            if (maxsplit_v && !maxsplit_v->is_int()) fail("maxsplit argument must be a number");
            int64_t maxsplit = maxsplit_v ? maxsplit_v->as_int() : -1;
            Array result;
            if (!sep || sep->is_null()) {
                std::string text = js_trim(*s, true, false);
                size_t i = 0;
                while (i < text.size()) {
                    size_t start = i;
                    while (i < text.size() && !js_space_at(text, i)) {
                        uint32_t cp = 0;
                        i += decode_utf8(text, i, cp);
                    }
                    if (maxsplit != -1 && static_cast<int64_t>(result.size()) >= maxsplit) {
                        result.push_back(Value::string(text.substr(start)));
                        break;
                    }
                    result.push_back(Value::string(text.substr(start, i - start)));
                    while (size_t w = js_space_at(text, i)) i += w;
                }
            } else {
                const std::string& sp = sep->as_string();
                if (sp.empty()) fail("empty separator");
                std::vector<std::string> parts = split_string(*s, sp);
                if (maxsplit != -1 && static_cast<int64_t>(parts.size()) > maxsplit) {
                    std::string rest;
                    for (size_t i = static_cast<size_t>(maxsplit); i < parts.size(); ++i) {
                        if (i > static_cast<size_t>(maxsplit)) rest += sp;
                        rest += parts[i];
                    }
                    parts.resize(static_cast<size_t>(maxsplit));
                    parts.push_back(rest);
                }
                for (auto& p : parts) result.push_back(Value::string(std::move(p)));
            }
            return Value::array(std::move(result));
        });
    }
    if (name == "replace") {
        return make_fn(name, [s](Interpreter&, const CallArgs& args) {
            if (args.positional.size() + args.keyword.size() < 2)
                fail("replace() requires at least two arguments");
            const Value* old_v = arg_at(args, 0, "old");
            const Value* new_v = arg_at(args, 1, "new");
            if (!old_v || !new_v || !old_v->is_string() || !new_v->is_string()) {
                fail("replace() arguments must be strings");
            }
            const Value* count = arg_at(args, 2, "count");
            if (count && !count->is_int() && !count->is_null())
                fail("replace() count argument must be a number or null");
            int64_t n = count && count->is_int() ? count->as_int() : -1;
            return Value::string(replace_string(*s, old_v->as_string(), new_v->as_string(), n));
        });
    }
    // [python] methods the oracle lacks.
    if (name == "find" || name == "rfind") {
        bool reverse = name == "rfind";
        return make_fn(name, [s, reverse](Interpreter&, const CallArgs& args) {
            const Value* sub = arg_at(args, 0, nullptr);
            if (!sub) fail("find() takes at least 1 argument");
            size_t k = reverse ? s->rfind(need_string(*sub, "find() argument"))
                               : s->find(need_string(*sub, "find() argument"));
            if (k == std::string::npos) return Value::integer(-1);
            return Value::integer(static_cast<int64_t>(code_points(s->substr(0, k)).size()));
        });
    }
    if (name == "count") {
        return make_fn(name, [s](Interpreter&, const CallArgs& args) {
            const Value* sub = arg_at(args, 0, nullptr);
            if (!sub) fail("count() takes at least 1 argument");
            return Value::integer(count_occurrences(*s, need_string(*sub, "count() argument")));
        });
    }
    if (name == "join") {
        return make_fn(name, [s](Interpreter&, const CallArgs& args) {
            const Value* items = arg_at(args, 0, nullptr);
            if (!items || !items->is_array()) fail("join() argument must be a list");
            std::string out;
            for (size_t i = 0; i < items->as_array().size(); ++i) {
                if (i) out += *s;
                out += need_string(items->as_array()[i], "join() item");
            }
            return Value::string(std::move(out));
        });
    }
    return Value();
}

// ---- objects -----------------------------------------------------------------------------------

Value items_of(const Object& o) {
    Array items;
    for (const auto& [k, v] : o.entries) items.push_back(Value::array({Value::string(k), v}));
    return Value::array(std::move(items));
}

// ObjectValue.builtins: get, items, keys, values, dictsort.
Value object_method(const Value& self, const std::string& name) {
    if (name == "get") {
        return make_fn(name, [self](Interpreter&, const CallArgs& args) {
            const Value* key = arg_at(args, 0, nullptr);
            if (!key || !key->is_string()) {
                fail(std::string("Object key must be a string: got ") +
                     value_kind_name(key ? key->kind() : ValueKind::kUndefined));
            }
            const Value* v = self.as_object().find(key->as_string());
            if (v) return *v;
            const Value* def = arg_at(args, 1, nullptr);
            return def ? *def : Value::null();
        });
    }
    if (name == "items")
        return make_fn(name, [self](Interpreter&, const CallArgs&) { return items_of(self.as_object()); });
    if (name == "keys") {
        return make_fn(name, [self](Interpreter&, const CallArgs&) {
            Array keys;
            for (const auto& [k, v] : self.as_object().entries) keys.push_back(Value::string(k));
            return Value::array(std::move(keys));
        });
    }
    if (name == "values") {
        return make_fn(name, [self](Interpreter&, const CallArgs&) {
            Array values;
            for (const auto& [k, v] : self.as_object().entries) values.push_back(v);
            return Value::array(std::move(values));
        });
    }
    if (name == "dictsort") {
        return make_fn(name, [self](Interpreter&, const CallArgs& args) {
            Value case_sensitive = arg_at(args, 0, "case_sensitive") ? *arg_at(args, 0, "case_sensitive")
                                                                     : Value::boolean(false);
            Value by = arg_at(args, 1, "by") ? *arg_at(args, 1, "by") : Value::string("key");
            Value reverse = arg_at(args, 2, "reverse") ? *arg_at(args, 2, "reverse") : Value::boolean(false);
            if (!case_sensitive.is_bool()) fail("case_sensitive must be a boolean");
            if (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value")) {
                fail("by must be either 'key' or 'value'");
            }
            if (!reverse.is_bool()) fail("reverse must be a boolean");
            Array items = items_of(self.as_object()).as_array();
            size_t index = by.as_string() == "key" ? 0 : 1;
            std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
                int r = compare_values(a.as_array()[index], b.as_array()[index], case_sensitive.as_bool());
                return reverse.as_bool() ? r > 0 : r < 0;
            });
            return Value::array(std::move(items));
        });
    }
    return Value();
}

}  // namespace detail

using namespace detail;

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
    auto arg = [&](size_t i) -> const Value& {
        if (i >= args.size()) fail("test '" + name + "' needs an argument");
        return args[i];
    };
    if (name == "boolean") return v.is_bool();
    if (name == "callable") return v.is_function();
    if (name == "odd" || name == "even") {
        if (!v.is_int()) fail("cannot " + name + " on " + value_kind_name(v.kind()));
        bool odd = v.as_int() % 2 != 0;
        return name == "odd" ? odd : !odd;
    }
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "none") return v.is_null();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();  // [python]
    if (name == "iterable") return v.is_array() || v.is_string();
    if (name == "mapping") return v.is_object();
    if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
    if (name == "lower") return v.is_string() && v.as_string() == to_lower(v.as_string());
    if (name == "upper") return v.is_string() && v.as_string() == to_upper(v.as_string());
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "equalto" || name == "eq" || name == "==") return strict_equals(v, arg(0));
    // [python] tests the oracle lacks
    if (name == "ne" || name == "!=") return !strict_equals(v, arg(0));
    if (name == "in") {
        const Value& seq = arg(0);
        if (seq.is_array()) {
            for (const auto& x : seq.as_array()) {
                if (strict_equals(x, v)) return true;
            }
            return false;
        }
        if (seq.is_string() && v.is_string()) return seq.as_string().find(v.as_string()) != std::string::npos;
        if (seq.is_attr_container() && v.is_string()) return seq.as_object().find(v.as_string()) != nullptr;
        fail(std::string("test 'in' cannot search a ") + value_kind_name(seq.kind()));
    }
    if (name == "divisibleby") {
        if (!v.is_int() || !arg(0).is_int() || arg(0).as_int() == 0)
            fail("divisibleby needs non-zero integers");
        return v.as_int() % arg(0).as_int() == 0;
    }
    if (name == "sameas") return strict_equals(v, arg(0));
    if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
        int r = compare_values(v, arg(0), true);
        return name == "lt" ? r < 0 : name == "gt" ? r > 0 : name == "le" ? r <= 0 : r >= 0;
    }
    fail("Unknown test: " + name);
}

Value get_member(const Value& object, const Value& property) {
    if (object.is_attr_container()) {
        if (!property.is_string()) {
            fail(std::string("Cannot access property with non-string: got ") +
                 value_kind_name(property.kind()));
        }
        const Value* v = object.as_object().find(property.as_string());
        if (v) return *v;
        return object.is_object() ? object_method(object, property.as_string()) : Value();
    }
    if (object.is_array() || object.is_string()) {
        if (property.is_int()) {
            int64_t i = property.as_int();
            if (object.is_array()) {
                auto n = static_cast<int64_t>(object.as_array().size());
                if (i < 0) i += n;
                return i >= 0 && i < n ? object.as_array()[static_cast<size_t>(i)] : Value();
            }
            std::vector<std::string> cps = code_points(object.as_string());
            auto n = static_cast<int64_t>(cps.size());
            if (i < 0) i += n;
            return i >= 0 && i < n ? Value::string(cps[static_cast<size_t>(i)]) : Value();
        }
        if (property.is_string()) {
            if (object.is_array()) {
                if (property.as_string() == "length") {
                    return Value::integer(static_cast<int64_t>(object.as_array().size()));
                }
                return Value();
            }
            return string_method(object.as_string(), property.as_string());
        }
        fail(std::string("Cannot access property with non-string/non-number: got ") +
             value_kind_name(property.kind()));
    }
    if (!property.is_string()) {
        fail(std::string("Cannot access property with non-string: got ") + value_kind_name(property.kind()));
    }
    return Value();
}

// utils.ts slice(): Python slicing over array elements or string code points.
Value slice_value(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
    if (!object.is_array() && !object.is_string()) fail("Slice object must be an array or string");
    for (const Value* v : {&start_v, &stop_v, &step_v}) {
        if (!v->is_int() && !v->is_undefined() && !v->is_null())
            fail("Slice indices must be integers or undefined");
    }
    std::vector<std::string> cps;
    int64_t len = 0;
    if (object.is_array()) {
        len = static_cast<int64_t>(object.as_array().size());
    } else {
        cps = code_points(object.as_string());
        len = static_cast<int64_t>(cps.size());
    }
    int64_t step = step_v.is_int() ? step_v.as_int() : 1;
    if (step == 0) fail("slice step cannot be zero");
    bool has_start = start_v.is_int(), has_stop = stop_v.is_int();
    int64_t start = 0, stop = 0;
    if (step > 0) {
        start = has_start ? start_v.as_int() : 0;
        start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
        stop = has_stop ? stop_v.as_int() : len;
        stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
    } else {
        start = has_start ? start_v.as_int() : len - 1;
        start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
        stop = has_stop ? stop_v.as_int() : -1;
        stop = stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
    }
    Array items;
    std::string text;
    int64_t dir = step > 0 ? 1 : -1;
    for (int64_t i = start; dir * i < dir * stop; i += step) {
        if (object.is_array()) {
            items.push_back(object.as_array()[static_cast<size_t>(i)]);
        } else {
            text += cps[static_cast<size_t>(i)];
        }
    }
    return object.is_array() ? Value::array(std::move(items)) : Value::string(std::move(text));
}

namespace {
enum class JsType { kUndefined, kNull, kBool, kNumber, kString, kObject };
JsType js_type(const Value& v) {
    switch (v.kind()) {
        case ValueKind::kUndefined: return JsType::kUndefined;
        case ValueKind::kNull: return JsType::kNull;
        case ValueKind::kBool: return JsType::kBool;
        case ValueKind::kInt:
        case ValueKind::kFloat: return JsType::kNumber;
        case ValueKind::kString: return JsType::kString;
        default: return JsType::kObject;
    }
}
}  // namespace

bool strict_equals(const Value& a, const Value& b) {
    JsType ta = js_type(a), tb = js_type(b);
    if (ta != tb) return false;
    switch (ta) {
        case JsType::kUndefined:
        case JsType::kNull: return true;
        case JsType::kBool: return a.as_bool() == b.as_bool();
        case JsType::kNumber: return a.as_number() == b.as_number();
        case JsType::kString: return a.as_string() == b.as_string();
        case JsType::kObject: return a.identity() == b.identity();
    }
    return false;
}

// JS abstract equality (IsLooselyEqual) on the payloads.
bool loose_equals(const Value& a, const Value& b) {
    JsType ta = js_type(a), tb = js_type(b);
    if (ta == tb) return strict_equals(a, b);
    bool a_nullish = ta == JsType::kNull || ta == JsType::kUndefined;
    bool b_nullish = tb == JsType::kNull || tb == JsType::kUndefined;
    if (a_nullish || b_nullish) return a_nullish && b_nullish;
    auto to_num = [](const Value& v) -> double {
        if (v.is_bool()) return v.as_bool() ? 1 : 0;
        if (v.is_number()) return v.as_number();
        if (v.is_string()) return js_to_number(v.as_string());
        return js_to_number(raw_string(v));
    };
    if (ta == JsType::kObject || tb == JsType::kObject) {
        // ToPrimitive(object) is its string form; compare as strings when the other side is a string.
        const Value& obj = ta == JsType::kObject ? a : b;
        const Value& other = ta == JsType::kObject ? b : a;
        if (obj.is_function()) return false;
        if (other.is_string()) return raw_string(obj) == other.as_string();
        return to_num(obj) == to_num(other);
    }
    return to_num(a) == to_num(b);
}

void install_globals(Env& env) {
    env.set("false", Value::boolean(false));
    env.set("true", Value::boolean(true));
    env.set("none", Value::null());
    env.set("False", Value::boolean(false));
    env.set("True", Value::boolean(true));
    env.set("None", Value::null());
    env.set("raise_exception", make_fn("raise_exception", [](Interpreter&, const CallArgs& args) -> Value {
                std::string message;
                for (size_t i = 0; i < args.positional.size(); ++i) {
                    if (i) message += ",";
                    message += raw_string(args.positional[i]);
                }
                throw RaisedError(message);
            }));
    env.set("range", make_fn("range", [](Interpreter& interp, const CallArgs& args) {
                for (const auto& a : args.positional) {
                    if (!a.is_int()) fail("range() arguments must be integers");
                }
                if (args.positional.empty() || args.positional.size() > 3)
                    fail("range() takes 1 to 3 arguments");
                int64_t start = 0, stop = 0, step = 1;
                if (args.positional.size() == 1) {
                    stop = args.positional[0].as_int();
                } else {
                    start = args.positional[0].as_int();
                    stop = args.positional[1].as_int();
                    if (args.positional.size() == 3) step = args.positional[2].as_int();
                }
                if (step == 0) fail("range() step must not be zero");
                Array out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                    if ((out.size() & 0xFFF) == 0) interp.count_iterations(0x1000);
                    out.push_back(Value::integer(i));
                }
                return Value::array(std::move(out));
            }));
    env.set(
        "namespace", make_fn("namespace", [](Interpreter&, const CallArgs& args) {
            if (args.positional.size() > 1) {
                fail("namespace expected at most 1 argument, got " + std::to_string(args.positional.size()));
            }
            auto o = std::make_shared<Object>();
            if (args.positional.size() == 1) {
                const Value& src = args.positional[0];
                if (src.is_object()) {
                    for (const auto& [k, v] : src.as_object().entries) o->set(k, v);
                } else if (src.is_array()) {
                    for (const auto& pair : src.as_array()) {
                        if (!pair.is_array() || pair.as_array().size() != 2 ||
                            !pair.as_array()[0].is_string()) {
                            fail("namespace expected an object or an iterable of [key, value] pairs");
                        }
                        o->set(pair.as_array()[0].as_string(), pair.as_array()[1]);
                    }
                } else {
                    fail(std::string("'") + value_kind_name(src.kind()) + "' object is not iterable");
                }
            }
            for (const auto& [k, v] : args.keyword) o->set(k, v);
            return Value::namespace_object(std::move(o));
        }));
    env.set("strftime_now", make_fn("strftime_now", [](Interpreter&, const CallArgs& args) {
                const Value* fmt_v = arg_at(args, 0, nullptr);
                std::string fmt = fmt_v ? need_string(*fmt_v, "strftime_now format") : "";
                std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                static const char* kMonths[] = {"January",   "February", "March",    "April",
                                                "May",       "June",     "July",     "August",
                                                "September", "October",  "November", "December"};
                auto pad2 = [](int n) {
                    std::string v = std::to_string(n);
                    return n < 10 ? std::string("0").append(v) : v;
                };
                std::string out;
                for (size_t i = 0; i < fmt.size(); ++i) {
                    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
                        out += fmt[i];
                        continue;
                    }
                    char c = fmt[++i];
                    switch (c) {
                        case 'Y': out += std::to_string(tm.tm_year + 1900); break;
                        case 'm': out += pad2(tm.tm_mon + 1); break;
                        case 'd': out += pad2(tm.tm_mday); break;
                        case 'b': out += std::string(kMonths[tm.tm_mon]).substr(0, 3); break;
                        case 'B': out += kMonths[tm.tm_mon]; break;
                        case 'H': out += pad2(tm.tm_hour); break;
                        case 'M': out += pad2(tm.tm_min); break;
                        case '%': out += '%'; break;
                        default: out += '%'; out += c;
                    }
                }
                return Value::string(std::move(out));
            }));
}

}  // namespace sluice::jinja
