// The reply splitter (see output_parser.h): a six-state machine over a text buffer.
#include "server/output_parser.h"

#include <algorithm>

#include "server/harmony_parser.h"
#include "server/reply_text.h"
#include "sluice/constrain.h"

namespace sluice::server {
namespace {

using reply_text::CallRead;
using reply_text::is_space;
using reply_text::is_tool_name;
using reply_text::partial_tag_suffix;
using reply_text::read_json;
using reply_text::trim;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
// DeepSeek's calls block (tokens of their own in its vocabulary, printed as this text).
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// The parameters schema of the tool named `name` among `tools` (OpenAI's array), or null.
const nlohmann::ordered_json* parameters_of(const nlohmann::ordered_json& tools, const std::string& name) {
    if (!tools.is_array()) return nullptr;
    for (const auto& t : tools) {
        auto fn = t.find("function");
        if (fn == t.end() || !fn->is_object()) continue;
        auto n = fn->find("name");
        if (n == fn->end() || *n != name) continue;
        auto p = fn->find("parameters");
        return p == fn->end() || !p->is_object() ? nullptr : &*p;
    }
    return nullptr;
}

// True, False and None: how those templates print a boolean or null argument under Python's Jinja
// (`args_value | string`), the spelling the model saw in training (sluice's renderer prints JSON's
// true/false, as @huggingface/jinja does). Discarded for any other text.
nlohmann::ordered_json python_literal(std::string_view value) {
    if (value == "True") return true;
    if (value == "False") return false;
    if (value == "None") return nullptr;
    return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
}

// One argument's value as its parameter's schema reads it (the XML and GLM forms print a string as
// its text, anything else with tojson): a declared string's text as it is, anything else as JSON (or
// Python's True, False, None); an undeclared one JSON when it parses as JSON, else a string.
nlohmann::ordered_json typed_value(std::string_view value, const nlohmann::ordered_json* schema) {
    const bool text = schema && GrammarBuilder::xml_value_is_text(*schema);
    nlohmann::ordered_json parsed =
        text ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(value, nullptr, false);
    if (schema && !text && parsed.is_discarded()) parsed = python_literal(value);
    return text || parsed.is_discarded() || value.empty() ? nlohmann::ordered_json(std::string(value))
                                                          : parsed;
}

// The XML-style calls of Qwen3.5 / Qwen3-Coder templates:
//   <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>
// Those templates print a string argument as its text and any other with tojson. A parameter the
// tool's schema declares is read by that schema: a string's text as it is ("123" stays a string),
// anything else as JSON (or Python's True, False, None), ended by the first "\n</parameter>" (a JSON
// value holds no raw newline followed by '<', while a JSON string may hold "</parameter>"). An
// undeclared parameter (no schema) is JSON when it parses as JSON, else a string.
bool parse_xml_tool_call(std::string_view body, const nlohmann::ordered_json& tools, ParsedToolCall* out) {
    body = trim(body);
    constexpr std::string_view kOpen = "<function=", kClose = "</function>";
    constexpr std::string_view kParam = "<parameter=", kParamClose = "</parameter>";
    if (!body.starts_with(kOpen) || !body.ends_with(kClose)) return false;
    const size_t name_end = body.find('>');
    if (name_end == std::string_view::npos) return false;
    out->name = std::string(trim(body.substr(kOpen.size(), name_end - kOpen.size())));
    if (out->name.empty()) return false;
    const nlohmann::ordered_json* parameters = parameters_of(tools, out->name);
    const nlohmann::ordered_json* properties = nullptr;
    if (parameters)
        if (auto p = parameters->find("properties"); p != parameters->end() && p->is_object())
            properties = &*p;
    std::string_view rest = body.substr(name_end + 1, body.size() - kClose.size() - name_end - 1);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
        if (!rest.starts_with(kParam)) return false;
        const size_t key_end = rest.find('>');
        if (key_end == std::string_view::npos) return false;
        const std::string key(trim(rest.substr(kParam.size(), key_end - kParam.size())));
        const nlohmann::ordered_json* schema = nullptr;
        if (properties)
            if (auto s = properties->find(key); s != properties->end()) schema = &*s;
        const bool text = schema && GrammarBuilder::xml_value_is_text(*schema);
        size_t value_end = std::string_view::npos;
        if (schema && !text)
            if (const size_t nl = rest.find("\n</parameter>", key_end); nl != std::string_view::npos)
                value_end = nl + 1;
        if (value_end == std::string_view::npos) value_end = rest.find(kParamClose, key_end);
        if (value_end == std::string_view::npos) return false;
        std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
        if (value.starts_with('\n')) value.remove_prefix(1);
        if (value.ends_with('\n')) value.remove_suffix(1);
        args[key] = typed_value(value, schema);
        rest = rest.substr(value_end + kParamClose.size());
    }
    out->arguments = args.dump();
    return true;
}

// Whether `tools` (OpenAI's array) has a function named `name`.
bool has_tool(const nlohmann::ordered_json& tools, std::string_view name) {
    if (!tools.is_array()) return false;
    for (const auto& t : tools)
        if (auto fn = t.find("function"); fn != t.end() && fn->is_object())
            if (auto n = fn->find("name"); n != fn->end() && n->is_string() && n->get<std::string>() == name)
                return true;
    return false;
}

// The calls of GLM-4.5 / 4.6 templates:
//   NAME\n<arg_key>K</arg_key>\n<arg_value>VALUE</arg_value>\n...
// a string VALUE as its text, any other with tojson (typed_value). The name is the first line (up to
// the first <arg_key> when the template wrote none) and must be one of the request's tools.
bool parse_glm_tool_call(std::string_view body, const nlohmann::ordered_json& tools, ParsedToolCall* out) {
    constexpr std::string_view kKey = "<arg_key>", kKeyClose = "</arg_key>";
    constexpr std::string_view kValue = "<arg_value>", kValueClose = "</arg_value>";
    body = trim(body);
    const size_t name_end = std::min(body.find('\n'), body.find(kKey));
    const std::string_view name = trim(body.substr(0, name_end));
    // A bare word is a call only when it names one of the request's tools (else "<tool_call>oops
    // </tool_call>" would be read as a call of "oops").
    if (!is_tool_name(name) || !has_tool(tools, name)) return false;
    out->name = std::string(name);
    const nlohmann::ordered_json* parameters = parameters_of(tools, out->name);
    const nlohmann::ordered_json* properties = nullptr;
    if (parameters)
        if (auto p = parameters->find("properties"); p != parameters->end() && p->is_object())
            properties = &*p;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    std::string_view rest = name_end == std::string_view::npos ? std::string_view() : body.substr(name_end);
    for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
        if (!rest.starts_with(kKey)) return false;
        const size_t key_end = rest.find(kKeyClose);
        if (key_end == std::string_view::npos) return false;
        const std::string key(trim(rest.substr(kKey.size(), key_end - kKey.size())));
        rest = trim(rest.substr(key_end + kKeyClose.size()));
        if (!rest.starts_with(kValue)) return false;
        const size_t value_end = rest.find(kValueClose);
        if (value_end == std::string_view::npos) return false;
        const nlohmann::ordered_json* schema = nullptr;
        if (properties)
            if (auto sc = properties->find(key); sc != properties->end()) schema = &*sc;
        args[key] = typed_value(rest.substr(kValue.size(), value_end - kValue.size()), schema);
        rest = rest.substr(value_end + kValueClose.size());
    }
    out->arguments = args.dump();
    return true;
}

// {"name": ..., "arguments": {...}} (Qwen3), the XML form or GLM's form above → a tool call; false
// when the body is none of them.
bool parse_tool_call(std::string_view body, const nlohmann::ordered_json& tools, ParsedToolCall* out) {
    if (trim(body).starts_with("<function=")) return parse_xml_tool_call(body, tools, out);
    if (!trim(body).starts_with("{")) return parse_glm_tool_call(body, tools, out);
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string()) return false;
    out->name = name->get<std::string>();
    auto args = j.find("arguments");
    if (args == j.end() || args->is_null())
        out->arguments = "{}";
    else if (args->is_string())
        out->arguments = args->get<std::string>();
    else
        out->arguments = args->dump();
    return true;
}

// One call of DeepSeek's block, the text between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>:
//   V3 / R1:  function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//   V3.1:     NAME<｜tool▁sep｜>ARGS
// ARGS a JSON object, kept as the model wrote it (a client sends it back as it got it, and V3's
// template prints it as it is). The closing fence may be missing. kCut when the text stops inside
// the arguments: a JSON string there may spell <｜tool▁call▁end｜>, so the call goes on to the next.
CallRead parse_deepseek_tool_call(std::string_view body, ParsedToolCall* out) {
    const size_t sep = body.find(kDsSep);
    if (sep == std::string_view::npos) return CallRead::kBad;
    const std::string_view head = trim(body.substr(0, sep));
    std::string_view tail = body.substr(sep + kDsSep.size());
    std::string_view name = head, args = tail;
    if (!trim(tail).starts_with('{')) {
        if (head != "function") return CallRead::kBad;
        const size_t nl = tail.find('\n');
        if (nl == std::string_view::npos) return CallRead::kBad;
        name = trim(tail.substr(0, nl));
        args = trim(tail.substr(nl + 1));
        if (!args.starts_with("```")) return CallRead::kBad;
        args.remove_prefix(args.starts_with("```json") ? 7 : 3);
        args = trim(args);
        if (args.ends_with("```")) args = trim(args.substr(0, args.size() - 3));
    }
    if (!is_tool_name(name)) return CallRead::kBad;
    args = trim(args);
    nlohmann::ordered_json parsed;
    const CallRead read = read_json(args, &parsed);
    if (read != CallRead::kCall) return read;
    if (!parsed.is_object()) return CallRead::kBad;
    out->name = std::string(name);
    out->arguments = std::string(args);
    return CallRead::kCall;
}

}  // namespace

bool prompt_opens_reasoning(std::string_view prompt_text) {
    while (!prompt_text.empty() && is_space(prompt_text.back())) prompt_text.remove_suffix(1);
    return prompt_text.ends_with(kThinkOpen);
}

OutputParser::OutputParser(bool start_in_reasoning, bool parse_tool_calls, nlohmann::ordered_json tools,
                           bool harmony)
    : state_(start_in_reasoning ? State::kReasoning : State::kStart),
      parse_tool_calls_(parse_tool_calls),
      tools_(std::move(tools)) {
    if (harmony) harmony_ = std::make_unique<HarmonyParser>(parse_tool_calls);
}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

bool OutputParser::cut_call() const {
    return harmony_ ? harmony_->cut_call() : cut_call_;
}

bool OutputParser::in_reasoning() const {
    return harmony_ ? harmony_->in_reasoning() : state_ == State::kReasoning;
}

ParsedDelta OutputParser::feed(std::string_view text) {
    if (harmony_) return harmony_->feed(text);
    buffer_ += text;
    ParsedDelta out;
    process(&out, false);
    return out;
}

ParsedDelta OutputParser::finish() {
    if (harmony_) return harmony_->finish();
    ParsedDelta out;
    process(&out, true);
    return out;
}

void OutputParser::process(ParsedDelta* out, bool final) {
    for (;;) {
        if (strip_leading_space_ && state_ != State::kReasoning) {
            size_t n = 0;
            while (n < buffer_.size() && is_space(buffer_[n])) ++n;
            buffer_.erase(0, n);
            if (buffer_.empty() && !final) return;
            strip_leading_space_ = false;
        }
        switch (state_) {
            case State::kStart: {
                size_t n = 0;
                while (n < buffer_.size() && is_space(buffer_[n])) ++n;
                std::string_view rest = std::string_view(buffer_).substr(n);
                if (rest.starts_with(kThinkOpen)) {
                    buffer_.erase(0, n + kThinkOpen.size());
                    state_ = State::kReasoning;
                    continue;
                }
                if (!final && kThinkOpen.starts_with(rest)) return;  // may still become <think>
                state_ = State::kContent;
                continue;
            }
            case State::kReasoning: {
                const size_t pos = buffer_.find(kThinkClose);
                if (pos != std::string::npos) {
                    out->reasoning += buffer_.substr(0, pos);
                    buffer_.erase(0, pos + kThinkClose.size());
                    state_ = State::kContent;
                    strip_leading_space_ = true;
                    continue;
                }
                const size_t hold = final ? 0 : partial_tag_suffix(buffer_, kThinkClose);
                out->reasoning += buffer_.substr(0, buffer_.size() - hold);
                buffer_.erase(0, buffer_.size() - hold);
                return;
            }
            case State::kContent: {
                if (parse_tool_calls_) {
                    const size_t pos = std::min(buffer_.find(kToolOpen), buffer_.find(kDsCallsBegin));
                    if (pos != std::string::npos) {
                        out->content += buffer_.substr(0, pos);
                        if (pos > 0) after_call_ = false;
                        if (std::string_view(buffer_).substr(pos).starts_with(kDsCallsBegin)) {
                            // Held until a call in the block reads whole: given back with the
                            // first text in it that is no call.
                            block_opener_ = std::string(kDsCallsBegin);
                            buffer_.erase(0, pos + kDsCallsBegin.size());
                            state_ = State::kCallBlock;
                            continue;
                        }
                        buffer_.erase(0, pos);  // keep the tag: unparsable calls are given back as text
                        state_ = State::kToolCall;
                        continue;
                    }
                }
                if (final && after_call_ && parse_tool_calls_ && !buffer_.empty() &&
                    kToolOpen.starts_with(buffer_)) {
                    // The end came inside the tag of a further call (parallel forced calls go on
                    // "\n<tool_call>\n…"): that call is cut, not content.
                    cut_call_ = true;
                    buffer_.clear();
                    return;
                }
                const size_t hold = final || !parse_tool_calls_
                                        ? 0
                                        : std::max(partial_tag_suffix(buffer_, kToolOpen),
                                                   partial_tag_suffix(buffer_, kDsCallsBegin));
                out->content += buffer_.substr(0, buffer_.size() - hold);
                if (buffer_.size() > hold) after_call_ = false;
                buffer_.erase(0, buffer_.size() - hold);
                return;
            }
            case State::kCallBlock: {
                // Between DeepSeek's calls: whitespace, the next <｜tool▁call▁begin｜> or the block's end.
                size_t n = 0;
                while (n < buffer_.size() && is_space(buffer_[n])) ++n;
                const std::string_view rest = std::string_view(buffer_).substr(n);
                if (rest.starts_with(kDsCallBegin)) {
                    buffer_.erase(0, n);
                    state_ = State::kDsCall;
                    continue;
                }
                if (rest.starts_with(kDsCallsEnd)) {
                    buffer_.erase(0, n + kDsCallsEnd.size());
                    out->content += block_opener_;  // a block without a call is text
                    block_opener_.clear();
                    state_ = State::kContent;
                    strip_leading_space_ = true;
                    continue;
                }
                const bool may_be_tag = kDsCallBegin.starts_with(rest) || kDsCallsEnd.starts_with(rest);
                if (may_be_tag && !final) return;
                if (may_be_tag) {
                    // The end came in the block's markup: nothing to give back. A call was cut when
                    // the markup could open one, or the block holds none yet; the calls before stand.
                    if (kDsCallBegin.starts_with(rest) && (!rest.empty() || !block_opener_.empty()))
                        cut_call_ = true;
                    buffer_.clear();
                    return;
                }
                // Text in the block that is no call: the block is over, the text is content (the
                // whitespace before it a separator after a call, the model's text after the opening).
                if (block_opener_.empty()) buffer_.erase(0, n);
                out->content += block_opener_;
                block_opener_.clear();
                state_ = State::kContent;
                continue;
            }
            case State::kDsCall: {
                // buffer_ starts with <｜tool▁call▁begin｜>. The call ends at the first
                // <｜tool▁call▁end｜> before which it reads whole; one inside its JSON arguments
                // (kCut) is passed over.
                ParsedToolCall call;
                CallRead read = CallRead::kCut;
                size_t end = kDsCallBegin.size();
                for (;;) {
                    const size_t pos = buffer_.find(kDsCallEnd, end);
                    if (pos == std::string::npos) break;
                    end = pos + kDsCallEnd.size();
                    read = parse_deepseek_tool_call(
                        std::string_view(buffer_).substr(kDsCallBegin.size(), pos - kDsCallBegin.size()),
                        &call);
                    if (read != CallRead::kCut) break;
                }
                if (read == CallRead::kCut) {
                    if (final) {
                        cut_call_ = true;
                        buffer_.clear();
                    }
                    return;
                }
                if (read == CallRead::kCall) {
                    out->tool_calls.push_back(std::move(call));
                    block_opener_.clear();
                    after_call_ = true;
                } else {
                    out->content += block_opener_ + buffer_.substr(0, end);
                    block_opener_.clear();
                    after_call_ = false;
                }
                buffer_.erase(0, end);
                state_ = State::kCallBlock;
                continue;
            }
            case State::kToolCall: {
                const size_t pos = buffer_.find(kToolClose);
                if (pos == std::string::npos) {
                    if (final) {
                        cut_call_ = true;
                        buffer_.clear();
                    }
                    return;
                }
                const size_t end = pos + kToolClose.size();
                ParsedToolCall call;
                after_call_ = parse_tool_call(
                    std::string_view(buffer_).substr(kToolOpen.size(), pos - kToolOpen.size()), tools_,
                    &call);
                if (after_call_)
                    out->tool_calls.push_back(std::move(call));
                else
                    out->content += buffer_.substr(0, end);
                buffer_.erase(0, end);
                state_ = State::kContent;
                strip_leading_space_ = true;
                continue;
            }
        }
    }
}

}  // namespace sluice::server
