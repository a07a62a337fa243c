// Forced tool calls (tool_choice "required" or a named function): the grammar that writes them in
// the form the model's chat template uses, so the model continues text shaped like the calls of
// its own prompts and the output parser (output_parser.h) reads them back.
//
// Two forms, told apart once per template by rendering a probe conversation (tool_call_form):
//   kJson  Qwen3, Hermes-style: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//   kXml   Qwen3.5 / Qwen3-Coder: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
//          ...</function>\n</tool_call>, a string VALUE as its text, others as JSON
//          (GrammarBuilder::add_xml_tool_arguments)
//   kGlm   GLM-4.5 / 4.6: <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...
//          </tool_call>. Read by the output parser; a forced call is written in the JSON form (which
//          the parser reads as well), there being no grammar of GLM's form yet.
// A tool whose parameters the XML form cannot carry (patternProperties, a key with '>') is written
// in the JSON form, which the parser reads as well.
//
// Data lifetime: plain functions; the grammar is shared by the request's constraint. Threading: none.
// Rejected alternative: telling the forms apart by searching the template's source for
// "<function=" — a template may mention the string in its instructions while printing JSON calls,
// or build the tag from pieces; what a render prints is what the model saw.
#pragma once

#include <memory>
#include <string_view>
#include <variant>

#include "server/api.h"
#include "sluice/chat_template.h"
#include "sluice/constrain.h"

namespace sluice::server {

enum class ToolCallForm { kJson, kXml, kGlm };

// What the forced prompt ends with: the grammar writes the rest of the first call.
inline constexpr std::string_view kToolCallOpen = "<tool_call>\n";
// Where a call ends: a reader (output_parser.h) ends it at the first one, so the grammar never writes
// one inside a call, not even in a JSON string (GrammarBuilder::guard_json_strings).
inline constexpr std::string_view kToolCallClose = "</tool_call>";

// The form `chat_template` prints an assistant's tool call in (kJson when it prints none).
ToolCallForm tool_call_form(const ChatTemplate& chat_template);

// tool_choice required / named: the reply after the prompt's "<tool_call>\n" is one call of an
// allowed tool in `form`, its arguments valid against the tool's parameters schema, closed by
// "</tool_call>" (the only one in it: a JSON string spelling it escapes its '>'); repeated
// ("\n<tool_call>\n" call) when parallel_tool_calls. A schema error is a 400 naming
// tools[i].function.parameters.
std::variant<std::shared_ptr<const Grammar>, ApiError> forced_tool_call_grammar(const ChatRequest& request,
                                                                                ToolCallForm form);

// A JSON Schema compilation error as an OpenAI error: unsupported_schema when the schema uses what
// the compiler does not support, else invalid_schema.
ApiError schema_error(const Status& status, const std::string& param);

}  // namespace sluice::server
