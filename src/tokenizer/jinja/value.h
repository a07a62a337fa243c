// The runtime value of the Jinja interpreter, modelled on @huggingface/jinja's RuntimeValue family
// (IntegerValue, FloatValue, StringValue, BooleanValue, ObjectValue, NamespaceValue, ArrayValue,
// FunctionValue, NullValue, UndefinedValue), because that package is the oracle the renderer must
// match byte for byte.
//
// Lifetime: scalars are held inline; strings, arrays, objects and functions are shared (ref-counted)
// so that copying a Value is cheap and so that namespaces have reference semantics (a
// `{% set ns.x = 1 %}` inside a loop is seen outside it). Containers are mutable only through a
// namespace assignment; everything else builds new containers.
//
// Threading: a Value graph belongs to one render call; nothing here is shared between threads.
//
// Rejected alternative: reusing nlohmann::json as the value type. It cannot tell integer from float
// the way the oracle does, has no undefined, no functions, no identity for namespaces, and its
// object type (sorted, or ordered with O(n) lookup) would dictate key order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::jinja {

inline constexpr size_t kMaxStringBytes = size_t{32} << 20;  // ~8M tokens of text

class Value;
struct Object;
struct Function;
using Array = std::vector<Value>;

enum class ValueKind : uint8_t {
    kUndefined,
    kNull,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,  // also tuples: the oracle treats them as arrays
    kObject,
    kNamespace,  // an Object with attribute assignment and no dict methods
    kFunction,
};

const char* value_kind_name(ValueKind kind);  // the oracle's type names: "IntegerValue", ...

class Value {
 public:
    Value() = default;  // undefined
    static Value null() { return Value(ValueKind::kNull); }
    static Value boolean(bool b) {
        Value v(ValueKind::kBool);
        v.data_ = b;
        return v;
    }
    static Value integer(int64_t i) {
        Value v(ValueKind::kInt);
        v.data_ = i;
        return v;
    }
    static Value floating(double f) {
        Value v(ValueKind::kFloat);
        v.data_ = f;
        return v;
    }
    // Throws TemplateError when `s` exceeds kMaxStringBytes (bounds memory of runaway templates).
    static Value string(std::string s);
    static Value array(Array items);
    static Value object(std::shared_ptr<Object> o);
    static Value new_object();
    static Value namespace_object(std::shared_ptr<Object> o);
    static Value function(std::shared_ptr<Function> fn);
    static Value from_json(const nlohmann::ordered_json& j);

    ValueKind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
    bool is_null() const { return kind_ == ValueKind::kNull; }
    bool is_bool() const { return kind_ == ValueKind::kBool; }
    bool is_int() const { return kind_ == ValueKind::kInt; }
    bool is_float() const { return kind_ == ValueKind::kFloat; }
    bool is_number() const { return is_int() || is_float(); }
    bool is_string() const { return kind_ == ValueKind::kString; }
    bool is_array() const { return kind_ == ValueKind::kArray; }
    bool is_object() const { return kind_ == ValueKind::kObject; }
    bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
    bool is_attr_container() const { return is_object() || is_namespace(); }
    bool is_function() const { return kind_ == ValueKind::kFunction; }

    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const { return std::get<int64_t>(data_); }
    double as_number() const { return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_); }
    const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
    const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(data_); }
    Object& as_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
    const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(data_); }
    const void* identity() const;  // container identity, for the oracle's `===` on references

    // The oracle's __bool__: Python-like for containers (empty is false), JS-like for scalars;
    // a namespace is always true.
    bool truthy() const;

 private:
    explicit Value(ValueKind k) : kind_(k) {}
    ValueKind kind_ = ValueKind::kUndefined;
    // One payload slot (24 bytes + tag) keeps arrays of values compact.
    std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
                 std::shared_ptr<Array>, std::shared_ptr<Object>, std::shared_ptr<Function>>
        data_;
};

// Insertion-ordered string-keyed map (JS Map semantics). Linear lookup: chat-template objects have
// a handful of keys, and order must be kept for tojson.
struct Object {
    std::vector<std::pair<std::string, Value>> entries;

    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);
    bool erase(std::string_view key);
};

class Interpreter;
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    const Value* kwarg(std::string_view name) const;
};

// A callable: a builtin (range, namespace, raise_exception, a bound string method) or a macro.
struct Function {
    std::string name;
    std::function<Value(Interpreter&, const CallArgs&)> call;
};

// ---- conversions that must match the oracle byte for byte ----------------------------------------

// JS Number.prototype.toString() for a double (shortest round-trip digits, JS exponent rules).
std::string js_number_to_string(double v);

// RuntimeValue.toString(): what `{{ v }}` prints (floats as "1.0", containers as JSON).
std::string display_string(const Value& v);

// `v.value.toString()` in the oracle: what `~` and string `+` concatenate (floats as "1",
// arrays joined by ",", objects as "[object Map]").
std::string raw_string(const Value& v);

struct JsonOptions {
    int indent = 0;  // 0: single line (the oracle treats indent=0 as no indent)
    bool ensure_ascii = false;
    bool sort_keys = false;
    bool has_separators = false;
    std::string item_separator;
    std::string key_separator;
};

// The oracle's toJSON(): Python json.dumps-like separators, JSON.stringify escaping.
// Throws TemplateError-compatible std::runtime_error for functions.
std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null = true, int depth = 0);

// JSON.stringify of a string (escapes ", \, control characters; keeps other UTF-8 as is).
std::string json_quote(std::string_view s);

// Number of UTF-16 code units (JS String.length) of a UTF-8 string.
int64_t utf16_length(std::string_view s);

}  // namespace sluice::jinja
