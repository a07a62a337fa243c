// libFuzzer target for the JSON-Schema compiler (what a request's response_format or a
// --json-schema file reaches): the input is split at the first NUL into a schema text and bytes
// for the matcher. A schema must compile to a grammar or give a Status, the grammar must build or
// give a Status, and feeding any bytes must never crash — no crash, hang or sanitizer report.
// A schema that is not JSON is skipped: the JSON parser is nlohmann's, not sluice's.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/constrain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string_view schema_text = input.substr(0, nul);
    const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
    auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    sluice::GrammarBuilder builder;
    auto root = builder.add_json_schema(schema, "fuzz");
    if (!root.has_value()) return 0;
    auto grammar = builder.build(*root);
    if (!grammar.has_value()) return 0;
    sluice::GrammarMatcher matcher(*grammar);
    for (size_t i = 0; i < text.size() && matcher.can_continue(); ++i) {
        (void)matcher.feed(text.substr(i, 1));
        (void)matcher.state_key();
    }
    return 0;
}
