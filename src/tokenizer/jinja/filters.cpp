// The filters (`value | name(args)`): a port of the oracle's applyFilter, dispatched by name and
// operand type, plus "[python]" filters the oracle lacks (select, reject, map by filter name,
// round, escape, count, d). See builtins.h.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/builtins_detail.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/text.h"

namespace sluice::jinja {

using namespace detail;

namespace {

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

// Python's str() of a value, for [python] filters on values the oracle rejects.
std::string python_str(const Value& v) {
    if (v.is_null()) return "None";
    if (v.is_undefined()) return "";
    return display_string(v);
}

Value filter_tojson(const Value& operand, const CallArgs& args) {
    JsonOptions options;
    if (const Value* indent = args.kwarg("indent")) {
        if (!indent->is_int() && !indent->is_null()) fail("If set, indent must be a number");
        if (indent->is_int()) options.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
    }
    if (const Value* ea = args.kwarg("ensure_ascii")) {
        if (!ea->is_bool()) fail("If set, ensure_ascii must be a boolean");
        options.ensure_ascii = ea->as_bool();
    }
    if (const Value* sk = args.kwarg("sort_keys")) {
        if (!sk->is_bool()) fail("If set, sort_keys must be a boolean");
        options.sort_keys = sk->as_bool();
    }
    if (const Value* sep = args.kwarg("separators")) {
        if (sep->is_array()) {
            const Array& a = sep->as_array();
            if (a.size() != 2 || !a[0].is_string() || !a[1].is_string()) {
                fail("separators must be a tuple of two strings");
            }
            options.has_separators = true;
            options.item_separator = a[0].as_string();
            options.key_separator = a[1].as_string();
        } else if (!sep->is_null()) {
            fail("If set, separators must be a tuple of two strings");
        }
    }
    return Value::string(to_json(operand, options));
}

Value filter_sort(const Value& operand, const CallArgs& args) {
    Value reverse = arg_at(args, 0, "reverse") ? *arg_at(args, 0, "reverse") : Value::boolean(false);
    Value case_sensitive =
        arg_at(args, 1, "case_sensitive") ? *arg_at(args, 1, "case_sensitive") : Value::boolean(false);
    Value attribute = arg_at(args, 2, "attribute") ? *arg_at(args, 2, "attribute") : Value::null();
    if (!reverse.is_bool()) fail("reverse must be a boolean");
    if (!case_sensitive.is_bool()) fail("case_sensitive must be a boolean");
    if (!attribute.is_string() && !attribute.is_int() && !attribute.is_null()) {
        fail("attribute must be a string, integer, or null");
    }
    auto key = [&](const Value& item) {
        if (attribute.is_null()) return item;
        return attribute_path(
            item, attribute.is_int() ? std::to_string(attribute.as_int()) : attribute.as_string());
    };
    Array items = operand.as_array();
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        int r = compare_values(key(a), key(b), case_sensitive.as_bool());
        return reverse.as_bool() ? r > 0 : r < 0;
    });
    return Value::array(std::move(items));
}

bool same_value_zero(const Value& a, const Value& b) {
    if (a.is_float() && b.is_float() && std::isnan(a.as_number()) && std::isnan(b.as_number())) return true;
    return strict_equals(a, b);
}

Value filter_by_name(Interpreter& interp, const Value& operand, const std::string& name, const CallArgs& args,
                     const EnvPtr& env) {
    if (name == "safe") return operand;
    if (name == "tojson") return filter_tojson(operand, args);
    if (name == "default" || name == "d") {
        Value def = arg_at(args, 0, "default_value") ? *arg_at(args, 0, "default_value") : Value::string("");
        Value boolean = arg_at(args, 1, "boolean") ? *arg_at(args, 1, "boolean") : Value::boolean(false);
        if (!boolean.is_bool()) fail("`default` filter flag must be a boolean");
        if (operand.is_undefined() || (boolean.as_bool() && !operand.truthy())) return def;
        return operand;
    }
    if (name == "length" || name == "count") {
        if (operand.is_array()) return Value::integer(static_cast<int64_t>(operand.as_array().size()));
        if (operand.is_string()) return Value::integer(utf16_length(operand.as_string()));
        if (operand.is_attr_container())
            return Value::integer(static_cast<int64_t>(operand.as_object().entries.size()));
        if (operand.is_undefined()) return Value::integer(0);  // [python]
    }
    if (name == "string") {
        if (operand.is_array() || operand.is_string()) return Value::string(display_string(operand));
        if (operand.is_number()) return Value::string(display_string(operand));
        if (operand.is_bool()) return Value::string(operand.as_bool() ? "true" : "false");
        return Value::string(python_str(operand));  // [python]
    }
    if (name == "e" || name == "escape") return Value::string(html_escape(python_str(operand)));  // [python]
    if (name == "items") {
        if (operand.is_object()) return items_of(operand.as_object());
        if (operand.is_undefined()) return Value::array({});  // [python]
    }
    if (name == "int" || name == "float") {
        bool to_int = name == "int";
        Value def = arg_at(args, 0, "default") ? *arg_at(args, 0, "default")
                                               : (to_int ? Value::integer(0) : Value::floating(0.0));
        if (operand.is_string()) {
            double v = 0;
            bool ok = to_int ? js_parse_int(operand.as_string(), v) : js_parse_float(operand.as_string(), v);
            if (!ok) return def;
            return to_int ? Value::integer(static_cast<int64_t>(v)) : Value::floating(v);
        }
        if (operand.is_int()) return to_int ? operand : Value::floating(operand.as_number());
        if (operand.is_float()) {
            // [python] truncation toward zero (the oracle floors: -2.5|int is -3 there, -2 here).
            return to_int ? Value::integer(static_cast<int64_t>(std::trunc(operand.as_number()))) : operand;
        }
        if (operand.is_bool()) {
            return to_int ? Value::integer(operand.as_bool() ? 1 : 0)
                          : Value::floating(operand.as_bool() ? 1 : 0);
        }
        return def;  // [python] int(None) is the default
    }
    if (name == "abs" && operand.is_number()) {
        return operand.is_int() ? Value::integer(std::llabs(operand.as_int()))
                                : Value::floating(std::fabs(operand.as_number()));
    }
    if (name == "round" && (operand.is_number() || operand.is_bool())) {  // [python]
        int64_t precision = arg_at(args, 0, "precision") && arg_at(args, 0, "precision")->is_int()
                                ? arg_at(args, 0, "precision")->as_int()
                                : 0;
        std::string method =
            arg_at(args, 1, "method") ? need_string(*arg_at(args, 1, "method"), "method") : "common";
        double x = operand.is_bool() ? operand.as_bool() : operand.as_number();
        double scale = std::pow(10.0, static_cast<double>(precision));
        if (method == "ceil") return Value::floating(std::ceil(x * scale) / scale);
        if (method == "floor") return Value::floating(std::floor(x * scale) / scale);
        if (method != "common") fail("method must be 'common', 'ceil' or 'floor'");
        // Python's round(): correctly rounded, ties to even; printf rounds the exact binary value.
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
        return Value::floating(std::strtod(buf, nullptr));
    }
    if (operand.is_array()) {
        const Array& a = operand.as_array();
        if (name == "list") return operand;
        if (name == "first") return a.empty() ? Value() : a.front();
        if (name == "last") return a.empty() ? Value() : a.back();
        if (name == "reverse") return Value::array(Array(a.rbegin(), a.rend()));
        if (name == "sort") return filter_sort(operand, args);
        if (name == "join") {
            Value sep = arg_at(args, 0, "separator") ? *arg_at(args, 0, "separator") : Value::string("");
            if (!sep.is_string()) fail("separator must be a string");
            std::string out;
            for (size_t i = 0; i < a.size(); ++i) {
                if (i) out += sep.as_string();
                if (!a[i].is_null() && !a[i].is_undefined()) out += raw_string(a[i]);  // Array.join
            }
            return Value::string(std::move(out));
        }
        if (name == "unique") {
            Array out;
            for (const auto& item : a) {
                bool seen = false;
                for (const auto& o : out) seen = seen || same_value_zero(o, item);
                if (!seen) out.push_back(item);
            }
            return Value::array(std::move(out));
        }
        if (name == "selectattr" || name == "rejectattr") {
            bool select = name == "selectattr";
            for (const auto& item : a) {
                if (!item.is_attr_container()) fail("`" + name + "` can only be applied to array of objects");
            }
            const Value* attr = arg_at(args, 0, nullptr);
            if (!attr || !attr->is_string()) fail("arguments of `" + name + "` must be strings");
            const Value* test = arg_at(args, 1, nullptr);
            std::vector<Value> test_args(
                args.positional.size() > 2 ? args.positional.begin() + 2 : args.positional.end(),
                args.positional.end());
            Array out;
            for (const auto& item : a) {
                const Value* v = item.as_object().find(attr->as_string());
                bool r = false;
                if (v) r = test ? apply_test(need_string(*test, "test name"), *v, test_args) : v->truthy();
                if (r == select) out.push_back(item);
            }
            return Value::array(std::move(out));
        }
        if (name == "select" || name == "reject") {  // [python]
            bool select = name == "select";
            const Value* test = arg_at(args, 0, nullptr);
            std::vector<Value> test_args(
                args.positional.size() > 1 ? args.positional.begin() + 1 : args.positional.end(),
                args.positional.end());
            Array out;
            for (const auto& item : a) {
                bool r = test ? apply_test(need_string(*test, "test name"), item, test_args) : item.truthy();
                if (r == select) out.push_back(item);
            }
            return Value::array(std::move(out));
        }
        if (name == "map") {
            if (const Value* attr = args.kwarg("attribute")) {
                if (!attr->is_string()) fail("attribute must be a string");
                const Value* def = args.kwarg("default");
                Array out;
                for (const auto& item : a) {
                    if (!item.is_attr_container()) fail("items in map must be an object");
                    Value v = attribute_path(item, attr->as_string());
                    out.push_back(v.is_undefined() && def ? *def : v);
                }
                return Value::array(std::move(out));
            }
            // [python] map('filter', args...)
            const Value* filter_name = arg_at(args, 0, nullptr);
            if (!filter_name || !filter_name->is_string()) {
                fail("`map` expressions without `attribute` set are not currently supported.");
            }
            CallArgs rest;
            rest.positional.assign(args.positional.begin() + 1, args.positional.end());
            rest.keyword = args.keyword;
            Array out;
            for (const auto& item : a) {
                out.push_back(filter_by_name(interp, item, filter_name->as_string(), rest, env));
            }
            return Value::array(std::move(out));
        }
        fail("Unknown ArrayValue filter: " + name);
    }
    if (operand.is_string()) {
        const std::string& s = operand.as_string();
        if (name == "upper") return Value::string(to_upper(s));
        if (name == "lower") return Value::string(to_lower(s));
        if (name == "title") return Value::string(title_case(s));
        if (name == "capitalize") return Value::string(capitalize(s));
        if (name == "trim") {
            const Value* chars = arg_at(args, 0, "chars");  // [python] chars
            if (chars && chars->is_string())
                return Value::string(strip_chars(s, chars->as_string(), true, true));
            return Value::string(js_trim(s, true, true));
        }
        if (name == "indent") {
            Value width = arg_at(args, 0, "width") ? *arg_at(args, 0, "width") : Value::integer(4);
            if (!width.is_int()) fail("width must be a number");
            bool first = arg_at(args, 1, "first") && arg_at(args, 1, "first")->truthy();
            bool blank = arg_at(args, 2, "blank") && arg_at(args, 2, "blank")->truthy();
            std::string pad(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
            std::vector<std::string> lines = split_string(s, "\n");
            std::string out;
            for (size_t i = 0; i < lines.size(); ++i) {
                if (i) out += "\n";
                bool skip = (!first && i == 0) || (!blank && lines[i].empty());
                if (!skip) out += pad;
                out += lines[i];
            }
            return Value::string(std::move(out));
        }
        if (name == "join") {
            Value sep = arg_at(args, 0, "separator") ? *arg_at(args, 0, "separator") : Value::string("");
            if (!sep.is_string()) fail("separator must be a string");
            std::vector<std::string> cps = code_points(s);
            std::string out;
            for (size_t i = 0; i < cps.size(); ++i) {
                if (i) out += sep.as_string();
                out += cps[i];
            }
            return Value::string(std::move(out));
        }
        if (name == "replace") {
            Value fn = string_method(s, "replace");
            return fn.as_function().call(interp, args);
        }
        // [python] sequence filters on strings
        if (name == "first" || name == "last" || name == "list" || name == "reverse") {
            std::vector<std::string> cps = code_points(s);
            if (name == "first") return cps.empty() ? Value() : Value::string(cps.front());
            if (name == "last") return cps.empty() ? Value() : Value::string(cps.back());
            if (name == "reverse") {
                std::string out;
                for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
                return Value::string(std::move(out));
            }
            Array out;
            for (auto& c : cps) out.push_back(Value::string(std::move(c)));
            return Value::array(std::move(out));
        }
        fail("Unknown StringValue filter: " + name);
    }
    if (operand.is_object()) {
        if (name == "list") {  // [python] the keys
            Array keys;
            for (const auto& [k, v] : operand.as_object().entries) keys.push_back(Value::string(k));
            return Value::array(std::move(keys));
        }
        Value method = object_method(operand, name);
        if (method.is_function()) return method.as_function().call(interp, args);
        fail("Unknown ObjectValue filter: " + name);
    }
    if (operand.is_bool() && name == "bool") return operand;
    fail("Cannot apply filter \"" + name + "\" to type: " + value_kind_name(operand.kind()));
}

}  // namespace

Value apply_filter(Interpreter& interp, const Value& operand, const Node& filter, const EnvPtr& env) {
    if (filter.kind == NodeKind::kIdentifier)
        return filter_by_name(interp, operand, filter.str, CallArgs{}, env);
    if (filter.kind != NodeKind::kCall || filter.x->kind != NodeKind::kIdentifier)
        fail("Unknown filter expression");
    CallArgs args = interp.eval_args(filter.a, env);
    return filter_by_name(interp, operand, filter.x->str, args, env);
}

}  // namespace sluice::jinja
