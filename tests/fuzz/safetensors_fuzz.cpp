// libFuzzer target for the safetensors header parser: any byte string must give either a valid
// header whose tensors all lie inside the input, or an error — never a crash or an overread.
// Run with `make fuzz` (clang, ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto header = sluice::format::parse_safetensors_header(std::span<const uint8_t>(data, size), "fuzz");
    if (header.has_value()) {
        for (const auto& t : header->tensors) {
            if (t.data < data || t.data + t.size_bytes > data + size) std::abort();
            volatile uint8_t sink = 0;
            for (uint64_t i = 0; i < t.size_bytes; ++i) sink = sink ^ t.data[i];  // touch every byte
            (void)sink;
        }
    }
    return 0;
}
