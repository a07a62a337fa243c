// Value construction and the value-to-text conversions that the oracle (@huggingface/jinja) defines
// through JavaScript semantics: Number.prototype.toString, JSON.stringify and the runtime's toJSON.
// Each function names the JS behaviour it reproduces.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/text.h"

namespace sluice::jinja {

const char* value_kind_name(ValueKind kind) {
    switch (kind) {
        case ValueKind::kUndefined: return "UndefinedValue";
        case ValueKind::kNull: return "NullValue";
        case ValueKind::kBool: return "BooleanValue";
        case ValueKind::kInt: return "IntegerValue";
        case ValueKind::kFloat: return "FloatValue";
        case ValueKind::kString: return "StringValue";
        case ValueKind::kArray: return "ArrayValue";
        case ValueKind::kObject: return "ObjectValue";
        case ValueKind::kNamespace: return "NamespaceValue";
        case ValueKind::kFunction: return "FunctionValue";
    }
    return "?";
}

Value Value::string(std::string s) {
    if (s.size() > kMaxStringBytes) {
        fail("render budget exceeded: a string larger than " + std::to_string(kMaxStringBytes >> 20) +
             " MiB");
    }
    Value v(ValueKind::kString);
    v.data_ = std::make_shared<const std::string>(std::move(s));
    return v;
}
Value Value::array(Array items) {
    Value v(ValueKind::kArray);
    v.data_ = std::make_shared<Array>(std::move(items));
    return v;
}
Value Value::object(std::shared_ptr<Object> o) {
    Value v(ValueKind::kObject);
    v.data_ = std::move(o);
    return v;
}
Value Value::new_object() {
    return object(std::make_shared<Object>());
}
Value Value::namespace_object(std::shared_ptr<Object> o) {
    Value v(ValueKind::kNamespace);
    v.data_ = std::move(o);
    return v;
}
Value Value::function(std::shared_ptr<Function> fn) {
    Value v(ValueKind::kFunction);
    v.data_ = std::move(fn);
    return v;
}

// convertToRuntimeValues(): a JS number that is an integer becomes IntegerValue, so JSON 1.0 is an
// integer here too.
Value Value::from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return null();
        case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            uint64_t u = j.get<uint64_t>();
            if (u <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(u));
            return floating(static_cast<double>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: {
            double d = j.get<double>();
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
                return integer(static_cast<int64_t>(d));
            }
            return floating(d);
        }
        case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            Array items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e));
            return array(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            auto o = std::make_shared<Object>();
            o->entries.reserve(j.size());
            for (auto it = j.begin(); it != j.end(); ++it) o->set(it.key(), from_json(it.value()));
            return object(std::move(o));
        }
        default: return Value();
    }
}

const void* Value::identity() const {
    switch (kind_) {
        case ValueKind::kArray: return &as_array();
        case ValueKind::kObject:
        case ValueKind::kNamespace: return &as_object();
        case ValueKind::kFunction: return &as_function();
        default: return nullptr;
    }
}

bool Value::truthy() const {
    switch (kind_) {
        case ValueKind::kUndefined:
        case ValueKind::kNull: return false;
        case ValueKind::kBool: return as_bool();
        case ValueKind::kInt: return as_int() != 0;
        case ValueKind::kFloat: return as_number() != 0 && !std::isnan(as_number());
        case ValueKind::kString: return !as_string().empty();
        case ValueKind::kArray: return !as_array().empty();
        case ValueKind::kObject: return !as_object().entries.empty();
        case ValueKind::kNamespace:
        case ValueKind::kFunction: return true;
    }
    return false;
}

const Value* Object::find(std::string_view key) const {
    for (const auto& [k, v] : entries) {
        if (k == key) return &v;
    }
    return nullptr;
}

void Object::set(const std::string& key, Value v) {
    for (auto& [k, old] : entries) {
        if (k == key) {
            old = std::move(v);
            return;
        }
    }
    entries.emplace_back(key, std::move(v));
}

bool Object::erase(std::string_view key) {
    for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->first == key) {
            entries.erase(it);
            return true;
        }
    }
    return false;
}

const Value* CallArgs::kwarg(std::string_view name) const {
    for (const auto& [k, v] : keyword) {
        if (k == name) return &v;
    }
    return nullptr;
}

// ECMAScript Number::toString(10): shortest round-trip digits, fixed notation for exponents in
// [-7, 21), exponent notation otherwise ("1e+21", "1.5e-7").
std::string js_number_to_string(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    if (v == 0) return "0";
    std::string sign = v < 0 ? "-" : "";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(v), std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // d[.ddd]e[+-]XX
    size_t e_pos = sci.find('e');
    std::string digits = sci.substr(0, e_pos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    int exponent = std::stoi(sci.substr(e_pos + 1));
    int k = static_cast<int>(digits.size());
    int n = exponent + 1;  // value = 0.digits * 10^n
    std::string out;
    if (k <= n && n <= 21) {
        out = digits + std::string(static_cast<size_t>(n - k), '0');
    } else if (0 < n && n <= 21) {
        out = digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
    } else if (-6 < n && n <= 0) {
        out = "0.";
        out.append(static_cast<size_t>(-n), '0');
        out += digits;
    } else {
        int e = n - 1;
        out = digits.substr(0, 1);
        if (k > 1) {
            out += '.';
            out += digits.substr(1);
        }
        out += e >= 0 ? "e+" : "e-";
        out += std::to_string(std::abs(e));
    }
    return sign + out;
}

// FloatValue.toString(): integral floats as toFixed(1) ("2.0", "-0.0"), others as JS toString.
static std::string float_display(double f) {
    if (f == 0 && std::signbit(f)) return "-0.0";
    if (std::isfinite(f) && f == std::floor(f)) {
        if (std::fabs(f) < 1e21) {
            char buf[400];
            std::snprintf(buf, sizeof(buf), "%.1f", f);
            return buf;
        }
        return js_number_to_string(f);
    }
    return js_number_to_string(f);
}

std::string display_string(const Value& v) {
    switch (v.kind()) {
        case ValueKind::kUndefined: return "undefined";
        case ValueKind::kNull: return "null";
        case ValueKind::kBool: return v.as_bool() ? "true" : "false";
        case ValueKind::kInt: return std::to_string(v.as_int());
        case ValueKind::kFloat: return float_display(v.as_number());
        case ValueKind::kString: return v.as_string();
        case ValueKind::kArray:
        case ValueKind::kObject:
        case ValueKind::kNamespace: return to_json(v, JsonOptions{}, /*undefined_as_null=*/false);
        case ValueKind::kFunction: fail("cannot print a function ('" + v.as_function().name + "')");
    }
    return "";
}

std::string raw_string(const Value& v) {
    switch (v.kind()) {
        case ValueKind::kFloat: return js_number_to_string(v.as_number());
        case ValueKind::kArray: {
            // Array.prototype.toString joins the elements' RuntimeValue.toString() with ",".
            std::string out;
            const Array& a = v.as_array();
            for (size_t i = 0; i < a.size(); ++i) {
                if (i) out += ",";
                out += display_string(a[i]);
            }
            return out;
        }
        case ValueKind::kObject:
        case ValueKind::kNamespace: return "[object Map]";
        default: return display_string(v);
    }
}

std::string json_quote(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
    return out;
}

int64_t utf16_length(std::string_view s) {
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        i += decode_utf8(s, i, cp);
        n += cp >= 0x10000 ? 2 : 1;
    }
    return n;
}

// makeAsciiSafe(): every UTF-16 unit >= 0x7f becomes \uXXXX (astral characters as surrogate pairs).
static std::string ascii_safe(const std::string& s) {
    std::string out;
    char buf[16];
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        size_t len = decode_utf8(s, i, cp);
        if (cp < 0x7F) {
            out += s[i];
        } else if (cp >= 0x10000) {
            uint32_t u = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
            out += buf;
        } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
            out += buf;
        }
        i += len;
    }
    return out;
}

// String.prototype.localeCompare under the default (ICU root) collation, approximated for the
// keys templates sort: case-insensitive first, then lower case before upper case.
static bool locale_less(const std::string& a, const std::string& b) {
    std::string la = a, lb = b;
    for (auto& c : la) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : lb) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (la != lb) return la < lb;
    return a > b;  // 'a' (0x61) sorts before 'A' (0x41) in ICU tertiary order
}

std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null, int depth) {
    if (depth > 512) fail("tojson: value nested deeper than 512 levels");
    std::string item_sep = options.indent > 0 ? "," : ", ";
    std::string key_sep = ": ";
    if (options.has_separators) {
        item_sep = options.item_separator;
        key_sep = options.key_separator;
    }
    switch (v.kind()) {
        case ValueKind::kNull: return "null";
        case ValueKind::kUndefined: return undefined_as_null ? "null" : "undefined";
        case ValueKind::kBool: return v.as_bool() ? "true" : "false";
        case ValueKind::kInt: return std::to_string(v.as_int());
        case ValueKind::kFloat: {
            double f = v.as_number();
            return std::isfinite(f) ? js_number_to_string(f) : "null";  // JSON.stringify
        }
        case ValueKind::kString: {
            std::string q = json_quote(v.as_string());
            return options.ensure_ascii ? ascii_safe(q) : q;
        }
        case ValueKind::kArray:
        case ValueKind::kObject:
        case ValueKind::kNamespace: {
            std::string indent_unit(static_cast<size_t>(std::max(options.indent, 0)), ' ');
            std::string base_pad = "\n";
            for (int d = 0; d < depth; ++d) base_pad += indent_unit;
            std::string child_pad = base_pad + indent_unit;
            bool indent = options.indent > 0;
            std::string out;
            if (v.is_array()) {
                const Array& a = v.as_array();
                out += "[";
                for (size_t i = 0; i < a.size(); ++i) {
                    if (i) out += item_sep;
                    if (indent) out += child_pad;
                    out += to_json(a[i], options, undefined_as_null, depth + 1);
                }
                if (indent && !a.empty()) out += base_pad;
                out += "]";
                return out;
            }
            std::vector<const std::pair<std::string, Value>*> entries;
            for (const auto& e : v.as_object().entries) entries.push_back(&e);
            if (options.sort_keys) {
                std::stable_sort(entries.begin(), entries.end(), [](const auto* x, const auto* y) {
                    return locale_less(x->first, y->first);
                });
            }
            out += "{";
            for (size_t i = 0; i < entries.size(); ++i) {
                if (i) out += item_sep;
                if (indent) out += child_pad;
                std::string key = json_quote(entries[i]->first);
                out += options.ensure_ascii ? ascii_safe(key) : key;
                out += key_sep;
                out += to_json(entries[i]->second, options, undefined_as_null, depth + 1);
            }
            if (indent && !entries.empty()) out += base_pad;
            out += "}";
            return out;
        }
        case ValueKind::kFunction: fail("Cannot convert to JSON: FunctionValue");
    }
    return "";
}

}  // namespace sluice::jinja
