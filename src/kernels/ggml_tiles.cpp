// Row tiles of Q4_0 (ggml_tiles.h): the permutation between the natural layout and the tiles.
#include "kernels/ggml_tiles.h"

#include <cstring>

#include "core/assert.h"
#include "kernels/weight_format.h"

namespace sluice::kernels {
namespace {

constexpr int64_t kQ4_0Bytes = 18;  // f16 d | u8 qs[16]

// One tile from 16 natural rows (row i at rows + i·row_bytes) into `tile`.
void tile_q4_0(const uint8_t* rows, int64_t cols, uint8_t* tile) {
    const int64_t blocks = cols / 32;
    const size_t row_bytes = static_cast<size_t>(blocks * kQ4_0Bytes);
    for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* out = tile + b * kQ4_0TileBlockBytes;
        for (int64_t i = 0; i < kQ4_0TileRows; ++i) {
            const uint8_t* blk = rows + static_cast<size_t>(i) * row_bytes + b * kQ4_0Bytes;
            std::memcpy(out + 2 * i, blk, 2);
            for (int64_t k = 0; k < 4; ++k) std::memcpy(out + 32 + 64 * k + 4 * i, blk + 2 + 4 * k, 4);
        }
    }
}

}  // namespace

WeightType tiled_type(const WeightView& w) {
    if (w.type == WeightType::kGgmlQ4_0 && w.rows > 0 && w.rows % kQ4_0TileRows == 0)
        return WeightType::kGgmlQ4_0x16;
    return w.type;
}

size_t ggml_tile_scratch_bytes(WeightType natural, int64_t cols) {
    SLUICE_ASSERT(natural == WeightType::kGgmlQ4_0);
    return static_cast<size_t>(kQ4_0TileRows) * weight_format(natural).data_row_bytes(cols);
}

void ggml_tile_in_place(WeightType natural, uint8_t* data, int64_t rows, int64_t cols, uint8_t* scratch) {
    SLUICE_ASSERT(natural == WeightType::kGgmlQ4_0 && rows % kQ4_0TileRows == 0 && cols % 32 == 0);
    const size_t tile_bytes = ggml_tile_scratch_bytes(natural, cols);
    for (int64_t t = 0; t < rows / kQ4_0TileRows; ++t) {
        uint8_t* at = data + static_cast<size_t>(t) * tile_bytes;
        std::memcpy(scratch, at, tile_bytes);
        tile_q4_0(scratch, cols, at);
    }
}

void ggml_tile_rows(WeightType natural, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
    SLUICE_ASSERT(natural == WeightType::kGgmlQ4_0 && rows % kQ4_0TileRows == 0 && cols % 32 == 0);
    const size_t tile_bytes = ggml_tile_scratch_bytes(natural, cols);
    for (int64_t t = 0; t < rows / kQ4_0TileRows; ++t)
        tile_q4_0(src + static_cast<size_t>(t) * tile_bytes, cols, dst + static_cast<size_t>(t) * tile_bytes);
}

void ggml_untile_row(const WeightView& w, int64_t r, uint8_t* out) {
    SLUICE_ASSERT(w.type == WeightType::kGgmlQ4_0x16 && r >= 0 && r < w.rows);
    const int64_t blocks = w.cols / 32, i = r % kQ4_0TileRows;
    const uint8_t* tile = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r - i) * w.row_bytes();
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* in = tile + b * kQ4_0TileBlockBytes;
        uint8_t* blk = out + b * kQ4_0Bytes;
        std::memcpy(blk, in + 2 * i, 2);
        for (int64_t k = 0; k < 4; ++k) std::memcpy(blk + 2 + 4 * k, in + 32 + 64 * k + 4 * i, 4);
    }
}

}  // namespace sluice::kernels
