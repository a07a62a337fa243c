// The statement and expression walk of the interpreter; see evaluator.h. Filters, tests, member
// access and globals live in builtins.cpp.
//
// Deliberate departures from the oracle (Python Jinja2 semantics instead, because the oracle's
// behaviour there is a bug that changes output): text rendered before `{% break %}` /
// `{% continue %}` in an iteration is kept (Jinja2 streams it; the oracle drops it); integer `//` and `%` by
// zero are errors and `%` takes the divisor's sign; `in` between two lists and string ordering (`<`, `>`)
// work instead of erroring.
#include "tokenizer/jinja/evaluator.h"

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/text.h"

namespace sluice::jinja {

namespace {

struct BreakSignal {
    size_t offset;
};
struct ContinueSignal {
    size_t offset;
};

struct DepthGuard {
    int& depth;
    DepthGuard(int& d, int limit, const char* what, size_t offset) : depth(d) {
        if (++depth > limit) {
            --depth;
            fail(std::string(what) + " deeper than " + std::to_string(limit) + " levels", offset);
        }
    }
    ~DepthGuard() { --depth; }
};

// Runs `f`, attaching `offset` to any TemplateError that does not carry a position yet.
template <typename F>
auto at_node(size_t offset, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (TemplateError& e) {
        if (e.offset == kNoOffset) e.offset = offset;
        throw;
    }
}

bool mentions_identifier(const Node& n, const char* name) {
    if (n.kind == NodeKind::kIdentifier && n.str == name) return true;
    for (const auto* list : {&n.a, &n.b}) {
        for (const auto& c : *list) {
            if (c && mentions_identifier(*c, name)) return true;
        }
    }
    for (const auto* c : {n.x.get(), n.y.get(), n.z.get()}) {
        if (c && mentions_identifier(*c, name)) return true;
    }
    return false;
}

bool mentions_in_body(const std::vector<NodePtr>& body, const std::vector<NodePtr>& params,
                      const char* name) {
    for (const auto& p : params) {
        if (p->str == name) return false;  // declared as a parameter
    }
    for (const auto& n : body) {
        if (mentions_identifier(*n, name)) return true;
    }
    return false;
}

bool checked_int(double r, int64_t& out) {
    if (!std::isfinite(r) || std::fabs(r) >= 9.2e18) return false;
    out = static_cast<int64_t>(r);
    return true;
}

}  // namespace

Value Env::lookup(const std::string& name) const {
    for (const Env* e = this; e; e = e->parent_.get()) {
        for (const auto& [k, v] : e->vars_) {
            if (k == name) return v;
        }
    }
    return Value();
}

void Env::set(const std::string& name, Value v) {
    for (auto& [k, old] : vars_) {
        if (k == name) {
            old = std::move(v);
            return;
        }
    }
    vars_.emplace_back(name, std::move(v));
}

std::string Interpreter::render(const Node& program, const EnvPtr& globals) {
    std::string out;
    try {
        exec_block(program.a, globals, out);
    } catch (const BreakSignal& s) {
        fail("'break' outside of a loop", s.offset);
    } catch (const ContinueSignal& s) {
        fail("'continue' outside of a loop", s.offset);
    }
    return out;
}

void Interpreter::count_iterations(int64_t n) {
    iterations_ += n;
    if (iterations_ > kMaxLoopIterations) {
        fail("render budget exceeded: more than " + std::to_string(kMaxLoopIterations) + " loop iterations");
    }
}

void Interpreter::exec_block(const std::vector<NodePtr>& body, const EnvPtr& env, std::string& out) {
    for (const auto& stmt : body) {
        exec(*stmt, env, out);
        if (out.size() > kMaxOutputBytes) {
            fail("render budget exceeded: output larger than " + std::to_string(kMaxOutputBytes >> 20) +
                     " MiB",
                 stmt->offset);
        }
    }
}

void Interpreter::exec(const Node& node, const EnvPtr& env, std::string& out) {
    DepthGuard guard(depth_, kMaxEvalDepth, "evaluation nested", node.offset);
    switch (node.kind) {
        case NodeKind::kText: out += node.str; return;
        case NodeKind::kComment: return;
        case NodeKind::kIf: {
            bool test = eval(*node.x, env).truthy();
            exec_block(test ? node.a : node.b, env, out);
            return;
        }
        case NodeKind::kFor: at_node(node.offset, [&] { exec_for(node, env, out); }); return;
        case NodeKind::kSet: at_node(node.offset, [&] { exec_set(node, env); }); return;
        case NodeKind::kMacro: define_macro(node, env); return;
        case NodeKind::kBreak: throw BreakSignal{node.offset};
        case NodeKind::kContinue: throw ContinueSignal{node.offset};
        case NodeKind::kCallBlock: {
            Value v = exec_call_block(node, env);
            if (!v.is_null() && !v.is_undefined())
                out += at_node(node.offset, [&] { return display_string(v); });
            return;
        }
        case NodeKind::kFilterBlock: {
            std::string body;
            exec_block(node.a, env, body);
            Value v =
                at_node(node.offset, [&] { return apply_filter(*this, Value::string(body), *node.x, env); });
            if (!v.is_null() && !v.is_undefined())
                out += at_node(node.offset, [&] { return display_string(v); });
            return;
        }
        default: {
            Value v = eval(node, env);
            if (!v.is_null() && !v.is_undefined())
                out += at_node(node.offset, [&] { return display_string(v); });
            return;
        }
    }
}

void Interpreter::exec_for(const Node& node, const EnvPtr& env, std::string& out) {
    auto scope = std::make_shared<Env>(env);
    Value iterable = eval(*node.y, scope);
    Array source;
    if (iterable.is_array()) {
        source = iterable.as_array();
    } else if (iterable.is_object()) {
        for (const auto& [k, v] : iterable.as_object().entries) source.push_back(Value::string(k));
    } else if (iterable.is_string()) {  // [python] the oracle rejects strings
        for (auto& c : code_points(iterable.as_string())) source.push_back(Value::string(std::move(c)));
    } else {
        fail(std::string("Expected iterable or object type in for loop: got ") +
                 value_kind_name(iterable.kind()),
             node.y->offset);
    }

    const Node& var = *node.x;
    auto bind = [&](const EnvPtr& target, const Value& item) {
        if (var.kind == NodeKind::kIdentifier) {
            target->set(var.str, item);
            return;
        }
        if (!item.is_array()) {
            fail(std::string("Cannot unpack non-iterable type: ") + value_kind_name(item.kind()), var.offset);
        }
        const Array& parts = item.as_array();
        if (parts.size() != var.a.size()) {
            fail(std::string("Too ") + (var.a.size() > parts.size() ? "few" : "many") + " items to unpack",
                 var.offset);
        }
        for (size_t j = 0; j < parts.size(); ++j) {
            if (var.a[j]->kind != NodeKind::kIdentifier)
                fail("Cannot unpack to a non-identifier", var.a[j]->offset);
            target->set(var.a[j]->str, parts[j]);
        }
    };

    Array items;
    items.reserve(source.size());
    for (const Value& item : source) {
        if (node.z) {
            count_iterations(1);
            auto test_scope = std::make_shared<Env>(scope);
            bind(test_scope, item);
            if (!eval(*node.z, test_scope).truthy()) continue;
        }
        items.push_back(item);
    }

    const size_t n = items.size();
    bool completed_body = false;
    for (size_t i = 0; i < n; ++i) {
        count_iterations(1);
        auto loop = std::make_shared<Object>();
        auto len = static_cast<int64_t>(n);
        auto idx = static_cast<int64_t>(i);
        loop->entries = {
            {"index", Value::integer(idx + 1)},
            {"index0", Value::integer(idx)},
            {"revindex", Value::integer(len - idx)},
            {"revindex0", Value::integer(len - idx - 1)},
            {"first", Value::boolean(i == 0)},
            {"last", Value::boolean(i + 1 == n)},
            {"length", Value::integer(len)},
            {"previtem", i > 0 ? items[i - 1] : Value()},
            {"nextitem", i + 1 < n ? items[i + 1] : Value()},
        };
        scope->set("loop", Value::object(std::move(loop)));
        bind(scope, items[i]);
        try {
            exec_block(node.a, scope, out);
        } catch (const ContinueSignal&) {
            continue;
        } catch (const BreakSignal&) {
            break;
        }
        completed_body = true;
    }
    // Like Jinja2 (and the oracle), `else` runs when no iteration ran its body to the end.
    if (!completed_body) exec_block(node.b, scope, out);
}

void Interpreter::exec_set(const Node& node, const EnvPtr& env) {
    Value rhs;
    if (node.y) {
        rhs = eval(*node.y, env);
    } else {
        std::string body;
        exec_block(node.a, env, body);
        rhs = Value::string(std::move(body));
    }
    const Node& target = *node.x;
    switch (target.kind) {
        case NodeKind::kIdentifier: env->set(target.str, rhs); return;
        case NodeKind::kTuple: {
            if (!rhs.is_array()) {
                fail(std::string("Cannot unpack non-iterable type in set: ") + value_kind_name(rhs.kind()),
                     node.offset);
            }
            const Array& parts = rhs.as_array();
            if (parts.size() != target.a.size()) {
                fail(std::string("Too ") + (target.a.size() > parts.size() ? "few" : "many") +
                         " items to unpack in set",
                     node.offset);
            }
            for (size_t i = 0; i < parts.size(); ++i) {
                if (target.a[i]->kind != NodeKind::kIdentifier) {
                    fail("Cannot unpack to non-identifier in set", target.a[i]->offset);
                }
                env->set(target.a[i]->str, parts[i]);
            }
            return;
        }
        case NodeKind::kMember: {
            Value object = eval(*target.x, env);
            if (!object.is_namespace())
                fail("cannot assign attribute on non-namespace object", target.offset);
            if (target.flag || target.y->kind != NodeKind::kIdentifier) {
                fail("Cannot assign to member with non-identifier property", target.offset);
            }
            object.as_object().set(target.y->str, rhs);
            return;
        }
        default: fail("Invalid target of an assignment", target.offset);
    }
}

Value Interpreter::make_macro(const std::vector<NodePtr>& params, const std::vector<NodePtr>& body,
                              const std::string& display_name, EnvPtr fixed_parent) {
    bool wants_kwargs = mentions_in_body(body, params, "kwargs");
    bool wants_varargs = mentions_in_body(body, params, "varargs");
    auto fn = std::make_shared<Function>();
    fn->name = display_name;
    const std::vector<NodePtr>* params_ptr = &params;
    const std::vector<NodePtr>* body_ptr = &body;
    fn->call = [params_ptr, body_ptr, display_name, fixed_parent, wants_kwargs, wants_varargs](
                   Interpreter& interp, const CallArgs& args) -> Value {
        DepthGuard guard(interp.call_depth_, kMaxCallDepth, "macro calls nested",
                         kNoOffset);  // call site's offset
        auto scope = std::make_shared<Env>(fixed_parent ? fixed_parent : interp.current_env());
        std::vector<std::pair<std::string, Value>> kwargs = args.keyword;
        std::vector<std::pair<std::string, const Node*>> pending_defaults;
        const auto& plist = *params_ptr;
        for (size_t i = 0; i < plist.size(); ++i) {
            const Node& p = *plist[i];
            bool bound = false;
            Value v;
            if (i < args.positional.size()) {
                v = args.positional[i];
                bound = true;
            } else {
                for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
                    if (it->first == p.str) {
                        v = it->second;
                        kwargs.erase(it);
                        bound = true;
                        break;
                    }
                }
            }
            if (!bound && p.kind == NodeKind::kKwarg) pending_defaults.emplace_back(p.str, p.x.get());
            scope->set(p.str, v);
        }
        if (wants_kwargs) {
            auto o = std::make_shared<Object>();
            o->entries = kwargs;
            scope->set("kwargs", Value::object(std::move(o)));
        } else if (!kwargs.empty()) {
            fail("macro " + display_name + " takes no keyword argument '" + kwargs.front().first + "'");
        }
        if (wants_varargs) {
            Array rest;
            for (size_t i = plist.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
            scope->set("varargs", Value::array(std::move(rest)));
        } else if (args.positional.size() > plist.size()) {
            fail("macro " + display_name + " takes not more than " + std::to_string(plist.size()) +
                 " argument(s)");
        }
        for (const auto& [name, expr] : pending_defaults) scope->set(name, interp.eval(*expr, scope));
        std::string out;
        interp.exec_block(*body_ptr, scope, out);
        return Value::string(std::move(out));
    };
    return Value::function(std::move(fn));
}

void Interpreter::define_macro(const Node& node, const EnvPtr& env) {
    env->set(node.str, make_macro(node.a, node.b, "'" + node.str + "'", nullptr));
}

Value Interpreter::exec_call_block(const Node& node, const EnvPtr& env) {
    Value caller = make_macro(node.a, node.b, "None", env);
    const Node& call_node = *node.x;
    CallArgs args = eval_args(call_node.a, env);
    Value fn = eval(*call_node.x, env);
    auto with_caller = std::make_shared<Env>(env);
    with_caller->set("caller", caller);
    return at_node(call_node.offset, [&] { return call(fn, args, with_caller); });
}

CallArgs Interpreter::eval_args(const std::vector<NodePtr>& args, const EnvPtr& env) {
    CallArgs out;
    for (const auto& a : args) {
        if (a->kind == NodeKind::kSpread) {
            Value v = eval(*a->x, env);
            if (!v.is_array())
                fail(std::string("Cannot unpack non-iterable type: ") + value_kind_name(v.kind()), a->offset);
            for (const auto& item : v.as_array()) out.positional.push_back(item);
        } else if (a->kind != NodeKind::kKwarg && a->kind != NodeKind::kKwSpread) {
            out.positional.push_back(eval(*a, env));
        }
    }
    auto add_kw = [&](const std::string& key, Value v, size_t offset) {
        if (out.kwarg(key)) fail("Got multiple values for keyword argument '" + key + "'", offset);
        out.keyword.emplace_back(key, std::move(v));
    };
    for (const auto& a : args) {
        if (a->kind == NodeKind::kKwarg) {
            add_kw(a->str, eval(*a->x, env), a->offset);
        } else if (a->kind == NodeKind::kKwSpread) {
            Value v = eval(*a->x, env);
            if (!v.is_object()) {
                fail(std::string("Argument after ** must be a mapping, not ") + value_kind_name(v.kind()),
                     a->offset);
            }
            for (const auto& [k, val] : v.as_object().entries) add_kw(k, val, a->offset);
        }
    }
    return out;
}

Value Interpreter::call(const Value& fn, const CallArgs& args, const EnvPtr& env) {
    if (!fn.is_function()) {
        fail(std::string("Cannot call something that is not a function: got ") + value_kind_name(fn.kind()));
    }
    EnvPtr saved = call_env_;
    call_env_ = env;
    struct Restore {
        EnvPtr& slot;
        EnvPtr saved;
        ~Restore() { slot = std::move(saved); }
    } restore{call_env_, std::move(saved)};
    return fn.as_function().call(*this, args);
}

Value Interpreter::eval(const Node& node, const EnvPtr& env) {
    DepthGuard guard(depth_, kMaxEvalDepth, "evaluation nested", node.offset);
    return at_node(node.offset, [&]() -> Value {
        switch (node.kind) {
            case NodeKind::kText: return Value::string(node.str);
            case NodeKind::kComment: return Value::null();
            case NodeKind::kInt: return Value::integer(node.ival);
            case NodeKind::kFloat: return Value::floating(node.fval);
            case NodeKind::kString: return Value::string(node.str);
            case NodeKind::kArray:
            case NodeKind::kTuple: {
                Array items;
                items.reserve(node.a.size());
                for (const auto& e : node.a) items.push_back(eval(*e, env));
                return Value::array(std::move(items));
            }
            case NodeKind::kObject: {
                auto o = std::make_shared<Object>();
                for (size_t i = 0; i < node.a.size(); ++i) {
                    Value key = eval(*node.a[i], env);
                    if (!key.is_string()) {
                        fail(std::string("Object keys must be strings: got ") + value_kind_name(key.kind()),
                             node.a[i]->offset);
                    }
                    o->set(key.as_string(), eval(*node.b[i], env));
                }
                return Value::object(std::move(o));
            }
            case NodeKind::kIdentifier: return env->lookup(node.str);
            case NodeKind::kCall: {
                CallArgs args = eval_args(node.a, env);
                Value fn = eval(*node.x, env);
                return call(fn, args, env);
            }
            case NodeKind::kMember: return eval_member(node, env);
            case NodeKind::kUnary: {
                Value v = eval(*node.x, env);
                if (node.str == "not") return Value::boolean(!v.truthy());
                int sign = node.str == "-" ? -1 : 1;
                if (v.is_int()) return Value::integer(sign * v.as_int());
                if (v.is_bool()) return Value::integer(sign * (v.as_bool() ? 1 : 0));
                if (v.is_float()) return Value::floating(sign * v.as_number());
                fail("Unknown operator \"" + node.str + "\" for " + value_kind_name(v.kind()));
            }
            case NodeKind::kBinary: return eval_binary(node, env);
            case NodeKind::kFilter: {
                Value operand = eval(*node.x, env);
                return apply_filter(*this, operand, *node.y, env);
            }
            case NodeKind::kTest: {
                Value operand = eval(*node.x, env);
                std::vector<Value> args;
                for (const auto& a : node.a) args.push_back(eval(*a, env));
                bool r = apply_test(node.str, operand, args);
                return Value::boolean(node.flag ? !r : r);
            }
            case NodeKind::kSelect: {
                if (!eval(*node.y, env).truthy()) return Value();
                return eval(*node.x, env);
            }
            case NodeKind::kTernary:
                return eval(*node.x, env).truthy() ? eval(*node.y, env) : eval(*node.z, env);
            default: fail("this statement cannot be used as an expression");
        }
    });
}

Value Interpreter::eval_member(const Node& node, const EnvPtr& env) {
    Value object = eval(*node.x, env);
    const Node& prop = *node.y;
    if (node.flag && prop.kind == NodeKind::kSlice) {
        Value start = prop.x ? eval(*prop.x, env) : Value();
        Value stop = prop.y ? eval(*prop.y, env) : Value();
        Value step = prop.z ? eval(*prop.z, env) : Value();
        return slice_value(object, start, stop, step);
    }
    Value property;
    if (node.flag) {
        property = eval(prop, env);
    } else if (prop.kind == NodeKind::kInt) {
        property = Value::integer(prop.ival);
    } else {
        property = Value::string(prop.str);
    }
    return get_member(object, property);
}

Value Interpreter::eval_binary(const Node& node, const EnvPtr& env) {
    const std::string& op = node.str;
    Value left = eval(*node.x, env);
    if (op == "and") return left.truthy() ? eval(*node.y, env) : left;
    if (op == "or") return left.truthy() ? left : eval(*node.y, env);
    Value right = eval(*node.y, env);
    if (op == "==") return Value::boolean(loose_equals(left, right));
    if (op == "!=") return Value::boolean(!loose_equals(left, right));

    bool membership = op == "in" || op == "not in";
    if (left.is_undefined() || right.is_undefined()) {
        if (right.is_undefined() && membership) return Value::boolean(op == "not in");
        fail("Cannot perform operation " + op + " on undefined values");
    }
    if (left.is_null() || right.is_null()) fail("Cannot perform operation " + op + " on null values");
    if (op == "~") return Value::string(raw_string(left) + raw_string(right));

    auto numeric_like = [](const Value& v) { return v.is_number() || v.is_bool(); };
    auto numeric_value = [](const Value& v) {
        return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number();
    };
    if (op == "**" && numeric_like(left) && numeric_like(right)) {
        double a = numeric_value(left), b = numeric_value(right);
        if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
        double r = std::pow(a, b);
        if (!std::isfinite(r)) fail("Exponentiation result is not a finite real number");
        if (left.is_float() || right.is_float() || b < 0) return Value::floating(r);
        int64_t i = 0;
        if (!checked_int(r, i)) fail("integer overflow in **");
        return Value::integer(i);
    }
    if (left.is_number() && right.is_number()) {
        bool is_float = left.is_float() || right.is_float();
        double a = left.as_number(), b = right.as_number();
        if (op == "+" || op == "-" || op == "*") {
            if (!is_float) {
                int64_t x = left.as_int(), y = right.as_int(), r = 0;
                bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                                : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                            : __builtin_mul_overflow(x, y, &r);
                if (overflow) fail("integer overflow in " + op);
                return Value::integer(r);
            }
            return Value::floating(op == "+" ? a + b : op == "-" ? a - b : a * b);
        }
        if (op == "/") {
            if (b == 0) fail("division by zero");  // [python]; the oracle prints Infinity
            return Value::floating(a / b);
        }
        if (op == "//") {
            if (b == 0) fail("integer division or modulo by zero");
            if (!is_float) {
                int64_t x = left.as_int(), y = right.as_int();
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
                return Value::integer(q);
            }
            return Value::floating(std::floor(a / b));
        }
        if (op == "%") {
            if (b == 0) fail("integer division or modulo by zero");
            if (!is_float) {
                int64_t x = left.as_int(), y = right.as_int();
                int64_t r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) r += y;  // [python] sign of the divisor
                return Value::integer(r);
            }
            double r = std::fmod(a, b);
            if (r != 0 && ((r < 0) != (b < 0))) r += b;
            return Value::floating(r);
        }
        if (op == "<") return Value::boolean(a < b);
        if (op == ">") return Value::boolean(a > b);
        if (op == "<=") return Value::boolean(a <= b);
        if (op == ">=") return Value::boolean(a >= b);
    } else if (left.is_array() && right.is_array()) {
        if (op == "+") {
            Array joined = left.as_array();
            joined.insert(joined.end(), right.as_array().begin(), right.as_array().end());
            return Value::array(std::move(joined));
        }
    }
    if (right.is_array() && membership) {
        bool found = false;
        for (const auto& x : right.as_array()) {
            if (strict_equals(x, left)) {
                found = true;
                break;
            }
        }
        return Value::boolean(op == "in" ? found : !found);
    }
    if ((left.is_string() || right.is_string()) && op == "+") {
        return Value::string(raw_string(left) + raw_string(right));
    }
    if (left.is_string() && right.is_string()) {
        const std::string& a = left.as_string();
        const std::string& b = right.as_string();
        if (membership) {
            bool found = b.find(a) != std::string::npos;
            return Value::boolean(op == "in" ? found : !found);
        }
        // [python] string ordering (the oracle rejects it); UTF-8 byte order is code point order.
        if (op == "<") return Value::boolean(a < b);
        if (op == ">") return Value::boolean(a > b);
        if (op == "<=") return Value::boolean(a <= b);
        if (op == ">=") return Value::boolean(a >= b);
    }
    if (left.is_string() && right.is_object() && membership) {
        bool found = right.as_object().find(left.as_string()) != nullptr;
        return Value::boolean(op == "in" ? found : !found);
    }
    fail("Unknown operator \"" + op + "\" between " + value_kind_name(left.kind()) + " and " +
         value_kind_name(right.kind()));
}

}  // namespace sluice::jinja
