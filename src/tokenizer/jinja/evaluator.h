// The tree-walking interpreter: a port of @huggingface/jinja's Interpreter (runtime.ts), which is
// the oracle. Scoping follows it: `for` opens one scope for the whole loop, macros run in a child of
// the CALLER's scope, `if` opens none, `set` writes to the innermost scope.
//
// Lifetime and threading: an Interpreter and its Envs live for one render call and are used by one
// thread; the syntax tree it walks is shared read-only.
//
// Limits: nesting of evaluation (kMaxEvalDepth), macro call depth (kMaxCallDepth), total loop
// iterations (kMaxLoopIterations) and output size (kMaxOutputBytes) are bounded; exceeding one is a
// TemplateError, never a crash.
//
// Rejected alternative: compiling to bytecode. Chat templates are a few hundred nodes rendered once
// per request; a tree walk costs microseconds and keeps the port readable next to the original.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace sluice::jinja {

inline constexpr int kMaxEvalDepth = 1000;
inline constexpr int kMaxCallDepth = 200;
inline constexpr int64_t kMaxLoopIterations = 1'000'000;
inline constexpr size_t kMaxOutputBytes = size_t{32} << 20;

class Env;
using EnvPtr = std::shared_ptr<Env>;

// One scope: variables declared here, and the enclosing scope.
class Env {
 public:
    explicit Env(EnvPtr parent = nullptr) : parent_(std::move(parent)) {}
    // The variable's value, or undefined when no enclosing scope declares it.
    Value lookup(const std::string& name) const;
    void set(const std::string& name, Value v);

 private:
    std::vector<std::pair<std::string, Value>> vars_;
    EnvPtr parent_;
};

class Interpreter {
 public:
    // Renders a kProgram node with `globals` as the outermost scope.
    std::string render(const Node& program, const EnvPtr& globals);

    Value eval(const Node& node, const EnvPtr& env);
    void exec_block(const std::vector<NodePtr>& body, const EnvPtr& env, std::string& out);
    Value call(const Value& fn, const CallArgs& args, const EnvPtr& env);
    CallArgs eval_args(const std::vector<NodePtr>& args, const EnvPtr& env);
    void count_iterations(int64_t n);

    // The scope the currently executing builtin was called from (macros need it).
    const EnvPtr& current_env() const { return call_env_; }

 private:
    void exec(const Node& node, const EnvPtr& env, std::string& out);
    void exec_for(const Node& node, const EnvPtr& env, std::string& out);
    void exec_set(const Node& node, const EnvPtr& env);
    void define_macro(const Node& node, const EnvPtr& env);
    Value exec_call_block(const Node& node, const EnvPtr& env);
    Value eval_binary(const Node& node, const EnvPtr& env);
    Value eval_member(const Node& node, const EnvPtr& env);
    Value make_macro(const std::vector<NodePtr>& params, const std::vector<NodePtr>& body,
                     const std::string& display_name, EnvPtr fixed_parent);

    int depth_ = 0;
    int call_depth_ = 0;
    int64_t iterations_ = 0;
    EnvPtr call_env_;
};

}  // namespace sluice::jinja
