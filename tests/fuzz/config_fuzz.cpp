// libFuzzer target for the config.json parser: any text must give a ModelConfig whose derived
// tables agree with its dims, or a Status — never a crash, an uncaught exception or a sanitizer
// report (config values are bounded before they are narrowed or used as sizes).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto config = sluice::model::parse_model_config(text, "fuzz/config.json");
    if (!config.has_value()) return 0;
    if (static_cast<int64_t>(config->layer_types.size()) != config->n_layers) std::abort();
    for (int64_t l = 0; l < config->n_layers; ++l) {
        (void)config->is_full_attention(l);
        (void)config->is_moe_layer(l);
    }
    return 0;
}
