// What the tool-call tests share: the forced-call grammar of a request in a tool-call form (a test
// failure when the request is refused), and whether a reply is a whole sentence of it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

#include "server/tool_calls.h"
#include "sluice/constrain.h"

namespace sluice::server::tool_call_testing {

inline std::shared_ptr<const Grammar> grammar_of(const ChatRequest& r, const ToolCallStyle& style) {
    auto g = forced_tool_call_grammar(r, style);
    if (auto* e = std::get_if<ApiError>(&g)) ADD_FAILURE() << e->message;
    return std::holds_alternative<ApiError>(g) ? nullptr : std::get<std::shared_ptr<const Grammar>>(g);
}

inline std::shared_ptr<const Grammar> grammar_of(const ChatRequest& r, ToolCallForm form) {
    return grammar_of(r, ToolCallStyle{.form = form});
}

// Whether `reply` (what follows the prompt's opening of the call) is a whole sentence of the grammar.
inline bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& reply) {
    GrammarMatcher m(g);
    return m.feed(reply) && m.complete();
}

}  // namespace sluice::server::tool_call_testing
