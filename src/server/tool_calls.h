// Forced tool calls (tool_choice "required" or a named function): the grammar that writes them in
// the form the model's chat template uses, so the model continues text shaped like the calls of
// its own prompts and the output parser (output_parser.h) reads them back.
//
// The forms, told apart once per template by rendering a probe conversation (tool_call_style):
//   kJson  Qwen3, Hermes-style: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//   kXml   Qwen3.5 / Qwen3-Coder: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
//          ...</function>\n</tool_call>, a string VALUE as its text, others as JSON
//          (GrammarBuilder::add_xml_tool_arguments)
//   kGlm   GLM-4.5 / 4.6: <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...
//          </tool_call>; GLM-4.7 / 5 the same without the newlines. A string VALUE as its text,
//          others as JSON (GrammarBuilder::ArgumentMarkup::glm). The separators are read from the
//          probe renders (GlmLayout); a template whose separators are not whitespace gets its forced
//          calls in the JSON form, which the parser reads as well.
//   kDeepSeek     DeepSeek-V3 / R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                 \n```json\nARGS\n```<｜tool▁call▁end｜>, more calls after a "\n", then
//                 <｜tool▁calls▁end｜>
//   kDeepSeekV31  DeepSeek-V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
//                 <｜tool▁call▁end｜>..., then <｜tool▁calls▁end｜>
//   kHarmony      gpt-oss (harmony): <|start|>assistant to=functions.NAME<|channel|>commentary json
//                 <|message|>ARGS<|call|>, one call to a message (the template prints tool_calls[0]
//                 only) and <|call|> ends the generation; the reply's other messages are reasoning
//                 (analysis) and content (final, commentary): harmony_parser.h
// DeepSeek's forced calls are written in their own form, the markup being tokens of the model's
// vocabulary it was trained to write; no guard keeps their JSON strings from spelling
// <｜tool▁call▁end｜> (GrammarBuilder's guard is for ASCII tags): the parser ends a call at the first
// one before which it reads whole, passing over one inside a JSON string.
//
// A probe render also tells how the template wants a call it prints given (ToolCallStyle): V3's and
// R1's templates print calls only of an assistant message whose content is null, and concatenate
// function.arguments as a string — sluice hands templates the arguments as an object (api.h), as
// the templates of the other forms print them with tojson — so those messages are reshaped for them
// (messages_for_template). gpt-oss's template wants one call to an assistant message, its result
// after it, and earlier reasoning as `thinking`; a tool without a description fails it (tools_for_template).
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

enum class ToolCallForm { kJson, kXml, kGlm, kDeepSeek, kDeepSeekV31, kHarmony };

// GLM's separators, as its template prints a call (GLM-4.5 / 4.6's by default; none in GLM-4.7 / 5):
//   <tool_call>NAME after_name (<arg_key>K</arg_key> key_to_value <arg_value>V</arg_value> after_value)*
//   </tool_call>, then between_calls before the next <tool_call>.
struct GlmLayout {
    std::string after_name = "\n", key_to_value = "\n", after_value = "\n", between_calls = "\n";
    bool known = true;  // false: a separator is not whitespace (forced calls are written as JSON)
};

// How a chat template prints an assistant's tool calls, and wants them given.
struct ToolCallStyle {
    ToolCallForm form = ToolCallForm::kJson;
    bool arguments_as_text = false;  // function.arguments as its JSON text, not an object
    bool null_content = false;       // an assistant message with calls and no text has content null
    GlmLayout glm;                   // kGlm's separators
};

// What the forced prompt ends with: the grammar writes the rest of the first call.
inline constexpr std::string_view kToolCallOpen = "<tool_call>\n";
// GLM's: the name follows the tag on its line.
inline constexpr std::string_view kGlmCallOpen = "<tool_call>";
// Where a call ends: a reader (output_parser.h) ends it at the first one, so the grammar never writes
// one inside a call, not even in a JSON string (GrammarBuilder::guard_json_strings).
inline constexpr std::string_view kToolCallClose = "</tool_call>";
// DeepSeek's forms: the forced prompt ends with the block's and the first call's openings.
inline constexpr std::string_view kDeepSeekCallsOpen = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>";
// Harmony: the generation prompt ends with "<|start|>assistant"; a forced call's prompt goes on with
// the recipient's namespace, and NAME is followed by the rest of the header, as the template prints it.
inline constexpr std::string_view kHarmonyCallOpen = " to=functions.";
inline constexpr std::string_view kHarmonyCallHeader = "<|channel|>commentary json<|message|>";
// Harmony: a reply constrained by response_format is one final message (no analysis, as a <think>
// opened by a template is closed for the others): its prompt ends with this header.
inline constexpr std::string_view kHarmonyFinalOpen = "<|channel|>final<|message|>";

// How `chat_template` prints an assistant's tool call: the first of the shapes the probe call can be
// given in (content "" or null, arguments an object or text, in that order) that the render prints
// the call of, and the form it prints it in (in kGlm, with the separators of a render of one call
// with two arguments and of two calls). kJson as given by the request when it prints none.
ToolCallStyle tool_call_style(const ChatTemplate& chat_template);

// The opening a forced call's prompt ends with in `form` (kToolCallOpen, kGlmCallOpen,
// kDeepSeekCallsOpen or kHarmonyCallOpen).
std::string_view forced_call_open(ToolCallForm form);
// What `request`'s forced call's prompt ends with: forced_call_open(style.form) — kToolCallOpen for
// kGlm whose layout is not known (its calls forced as JSON) — and in kHarmony, when one tool only is
// allowed (tool_choice named, or required with one tool), its whole header
// " to=functions.NAME<|channel|>commentary json<|message|>", the grammar writing ARGS alone.
std::string forced_call_prefix(const ChatRequest& request, const ToolCallStyle& style);

// `messages` (as parse_chat_request normalised them) shaped as `style` says the template wants them.
// `request_messages`: the request's own, one for each (a call's arguments text is taken from there
// as the client sent it, else printed from the object). kHarmony: an assistant message's
// reasoning_content becomes `thinking` (what gpt-oss's template prints as the analysis before a call
// no final answer follows yet); beside a call with thinking, content is dropped (the template takes one
// or the other as that analysis, and fails on both); a message with several calls becomes one message
// per call, each followed by its results (tool messages after it, matched by tool_call_id, else in
// order) — the template prints tool_calls[0] only and names a result by the call before it.
nlohmann::ordered_json messages_for_template(const ToolCallStyle& style,
                                             const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& request_messages);

// `tools` (the request's, or null) as the template wants them: in kHarmony a tool without a
// description gets an empty one (gpt-oss's template adds it to a string, and fails on none), and so
// does each of its parameters (the template's first revision does the same with theirs; the current
// one prints no empty one).
nlohmann::ordered_json tools_for_template(const ToolCallStyle& style, const nlohmann::ordered_json& tools);

// tool_choice required / named: the reply after the prompt's forced_call_prefix(style) is one call of
// an allowed tool in `style.form`, its arguments valid against the tool's parameters schema, closed by
// "</tool_call>" (the only one in it: a JSON string spelling it escapes its '>'); repeated
// ("\n<tool_call>\n" call) when parallel_tool_calls. In kGlm the call is NAME, the arguments as
// ArgumentMarkup::glm with style.glm's separators, then "</tool_call>", a further one after
// between_calls + "<tool_call>"; no JSON string holds "</" (its '/' is escaped): GLM's reader ends a
// value at the first "</arg_value>". In DeepSeek's forms the call is closed by
// <｜tool▁call▁end｜>, a further one opened by <｜tool▁call▁begin｜> (after a "\n" in kDeepSeek), and
// the block by <｜tool▁calls▁end｜>. In kHarmony the reply is one call, NAME (when several tools are
// allowed) then kHarmonyCallHeader then ARGS, the generation ending at <|call|> (an end-of-sequence
// id; one call to a message, parallel_tool_calls or not). A schema error is a 400 naming
// tools[i].function.parameters.
std::variant<std::shared_ptr<const Grammar>, ApiError> forced_tool_call_grammar(const ChatRequest& request,
                                                                                const ToolCallStyle& style);

// A JSON Schema compilation error as an OpenAI error: unsupported_schema when the schema uses what
// the compiler does not support, else invalid_schema.
ApiError schema_error(const Status& status, const std::string& param);

}  // namespace sluice::server
