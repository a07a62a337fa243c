// libFuzzer target for the chat template interpreter: the input is split at the first NUL into a
// template and a JSON document of messages; both are parsed and the template rendered. Any input
// must yield a value or an error, never a crash, hang or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sluice/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string input(reinterpret_cast<const char*>(data), size);
    size_t nul = input.find('\0');
    std::string source = input.substr(0, nul);
    std::string messages_text = nul == std::string::npos ? "[]" : input.substr(nul + 1);
    auto messages = nlohmann::ordered_json::parse(messages_text, nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded() || !messages.is_array()) messages = nlohmann::ordered_json::array();
    auto tmpl = sluice::ChatTemplate::from_string(source, "<s>", "</s>");
    if (!tmpl.has_value()) return 0;
    auto out = tmpl->render(messages, nullptr, true, nlohmann::ordered_json::object());
    (void)out;
    return 0;
}
