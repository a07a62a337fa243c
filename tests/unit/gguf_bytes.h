// GGUF bytes built by hand for tests: little-endian integers and GGUF strings (u64 length, bytes), the
// pieces of a header the tests write without gguf-py; and rows of random valid ggml blocks.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"

namespace sluice::testing {

inline std::string le32(uint32_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 4);
}
inline std::string le64(uint64_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 8);
}
inline std::string gstr(std::string_view s) {
    return le64(s.size()) + std::string(s);
}

// A row of random valid blocks: random codes, f16 scales (and mins) of |d| in [1e-3, 1e-2], MXFP4
// exponents near 2^0.
inline std::vector<uint8_t> random_ggml_row(kernels::GgmlType type, int64_t cols, std::mt19937& rng) {
    const kernels::GgmlFormat& f = kernels::ggml_format(type);
    std::vector<uint8_t> row(kernels::ggml_row_bytes(f, cols));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
    std::uniform_real_distribution<float> mag(1e-3f, 1e-2f);
    auto put_scale = [&](uint8_t* p) {
        const uint16_t h = kernels::f32_to_f16(byte(rng) & 1 ? mag(rng) : -mag(rng));
        std::memcpy(p, &h, 2);
    };
    for (size_t b = 0; b < row.size(); b += static_cast<size_t>(f.block_bytes)) {
        uint8_t* block = row.data() + b;
        switch (type) {
            case kernels::GgmlType::kQ4_1:
            case kernels::GgmlType::kQ5_1:
            case kernels::GgmlType::kQ4_K:
            case kernels::GgmlType::kQ5_K:
                put_scale(block);
                put_scale(block + 2);
                break;
            case kernels::GgmlType::kQ6_K: put_scale(block + 208); break;
            case kernels::GgmlType::kMXFP4: block[0] = static_cast<uint8_t>(118 + byte(rng) % 16); break;
            default: put_scale(block); break;
        }
    }
    return row;
}

}  // namespace sluice::testing
