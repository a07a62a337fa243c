// Row tiles of Q4_0, Q6_K, Q8_0 and MXFP4 (ggml_tiles.h): the bijection between the natural layout and the
// tiles, one block column (block b of a tile's 16 rows) at a time.
#include "kernels/ggml_tiles.h"

#include <cstring>

#include "core/assert.h"
#include "kernels/weight_format.h"

namespace sluice::kernels {
namespace {

constexpr int64_t kQ4_0Bytes = 18;   // f16 d | u8 qs[16]
constexpr int64_t kQ8_0Bytes = 34;   // f16 d | i8 qs[32]
constexpr int64_t kQ6_KBytes = 210;  // u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
constexpr int64_t kMxfp4Bytes = 17;  // u8 e | u8 qs[16]

// ---- Q4_0 ----

void tile_block_q4_0(const uint8_t* const* blk, uint8_t* out) {
    for (int64_t i = 0; i < kGgmlTileRows; ++i) {
        std::memcpy(out + 2 * i, blk[i], 2);
        for (int64_t k = 0; k < 4; ++k) std::memcpy(out + 32 + 64 * k + 4 * i, blk[i] + 2 + 4 * k, 4);
    }
}

void untile_block_q4_0(const uint8_t* in, int64_t i, uint8_t* blk) {
    std::memcpy(blk, in + 2 * i, 2);
    for (int64_t k = 0; k < 4; ++k) std::memcpy(blk + 2 + 4 * k, in + 32 + 64 * k + 4 * i, 4);
}

// ---- MXFP4: the scale bytes first, then Q4_0's chunks ----

void tile_block_mxfp4(const uint8_t* const* blk, uint8_t* out) {
    for (int64_t i = 0; i < kGgmlTileRows; ++i) {
        out[i] = blk[i][0];
        for (int64_t k = 0; k < 4; ++k) std::memcpy(out + 16 + 64 * k + 4 * i, blk[i] + 1 + 4 * k, 4);
    }
}

void untile_block_mxfp4(const uint8_t* in, int64_t i, uint8_t* blk) {
    blk[0] = in[i];
    for (int64_t k = 0; k < 4; ++k) std::memcpy(blk + 1 + 4 * k, in + 16 + 64 * k + 4 * i, 4);
}

// ---- Q8_0: the codes plus 128 ----

void tile_block_q8_0(const uint8_t* const* blk, uint8_t* out) {
    for (int64_t i = 0; i < kGgmlTileRows; ++i) {
        std::memcpy(out + 2 * i, blk[i], 2);
        for (int64_t k = 0; k < 8; ++k)
            for (int64_t e = 0; e < 4; ++e) out[32 + 64 * k + 4 * i + e] = blk[i][2 + 4 * k + e] ^ 0x80;
    }
}

void untile_block_q8_0(const uint8_t* in, int64_t i, uint8_t* blk) {
    std::memcpy(blk, in + 2 * i, 2);
    for (int64_t k = 0; k < 8; ++k)
        for (int64_t e = 0; e < 4; ++e) blk[2 + 4 * k + e] = in[32 + 64 * k + 4 * i + e] ^ 0x80;
}

// ---- Q6_K: the 6-bit codes c = q + 32 of a super-block in element order, and back (ggml_quants.h) ----

void q6_k_codes(const uint8_t* blk, uint8_t* c) {
    const uint8_t *ql = blk, *qh = blk + 128;
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t a = ql[64 * h + l], b = ql[64 * h + 32 + l], hb = qh[32 * h + l];
            c[128 * h + l] = static_cast<uint8_t>((a & 0x0F) | ((hb & 3) << 4));
            c[128 * h + l + 32] = static_cast<uint8_t>((b & 0x0F) | (((hb >> 2) & 3) << 4));
            c[128 * h + l + 64] = static_cast<uint8_t>((a >> 4) | (((hb >> 4) & 3) << 4));
            c[128 * h + l + 96] = static_cast<uint8_t>((b >> 4) | (((hb >> 6) & 3) << 4));
        }
}

void q6_k_from_codes(const uint8_t* c, uint8_t* blk) {
    uint8_t *ql = blk, *qh = blk + 128;
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t* e = c + 128 * h + l;
            ql[64 * h + l] = static_cast<uint8_t>((e[0] & 0x0F) | ((e[64] & 0x0F) << 4));
            ql[64 * h + 32 + l] = static_cast<uint8_t>((e[32] & 0x0F) | ((e[96] & 0x0F) << 4));
            qh[32 * h + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) |
                                                  ((e[96] >> 4) << 6));
        }
}

void tile_block_q6_k(const uint8_t* const* blk, uint8_t* out) {
    for (int64_t i = 0; i < kGgmlTileRows; ++i) {
        std::memcpy(out + 2 * i, blk[i] + 208, 2);
        for (int64_t s = 0; s < 16; ++s) out[32 + 16 * s + i] = blk[i][192 + s];
        uint8_t c[256];
        q6_k_codes(blk[i], c);
        for (int64_t s = 0; s < 16; ++s) {
            uint8_t* chunks = out + kQ6_KTileCodesAt + 192 * s + 4 * i;
            const uint8_t* cs = c + 16 * s;
            for (int64_t k = 0; k < 3; ++k)
                for (int64_t e = 0; e < 4; ++e)
                    chunks[64 * k + e] =
                        static_cast<uint8_t>(cs[4 * k + e] | ((cs[12 + e] >> (2 * k)) & 3) << 6);
        }
    }
}

void untile_block_q6_k(const uint8_t* in, int64_t i, uint8_t* blk) {
    std::memcpy(blk + 208, in + 2 * i, 2);
    for (int64_t s = 0; s < 16; ++s) blk[192 + s] = in[32 + 16 * s + i];
    uint8_t c[256];
    for (int64_t s = 0; s < 16; ++s) {
        const uint8_t* chunks = in + kQ6_KTileCodesAt + 192 * s + 4 * i;
        uint8_t* cs = c + 16 * s;
        for (int64_t e = 0; e < 4; ++e) {
            cs[12 + e] = 0;
            for (int64_t k = 0; k < 3; ++k) {
                const uint8_t v = chunks[64 * k + e];
                cs[4 * k + e] = v & 0x3F;
                cs[12 + e] = static_cast<uint8_t>(cs[12 + e] | (v >> 6) << (2 * k));
            }
        }
    }
    q6_k_from_codes(c, blk);
}

// ---- by type ----

struct TileOps {
    int64_t block_bytes;       // one row's block
    int64_t tile_block_bytes;  // a block column: 16 · block_bytes
    int64_t block_elems;
    void (*tile_block)(const uint8_t* const* blk, uint8_t* out);
    void (*untile_block)(const uint8_t* in, int64_t i, uint8_t* blk);
};

const TileOps* tile_ops(WeightType natural) {
    static constexpr TileOps kQ4_0{kQ4_0Bytes, kQ4_0TileBlockBytes, 32, tile_block_q4_0, untile_block_q4_0};
    static constexpr TileOps kQ8_0{kQ8_0Bytes, kQ8_0TileBlockBytes, 32, tile_block_q8_0, untile_block_q8_0};
    static constexpr TileOps kQ6_K{kQ6_KBytes, kQ6_KTileBlockBytes, 256, tile_block_q6_k, untile_block_q6_k};
    static constexpr TileOps kMxfp4{kMxfp4Bytes, kMxfp4TileBlockBytes, 32, tile_block_mxfp4,
                                    untile_block_mxfp4};
    static_assert(kQ4_0TileBlockBytes == kGgmlTileRows * kQ4_0Bytes);
    static_assert(kQ8_0TileBlockBytes == kGgmlTileRows * kQ8_0Bytes);
    static_assert(kQ6_KTileBlockBytes == kGgmlTileRows * kQ6_KBytes);
    static_assert(kMxfp4TileBlockBytes == kGgmlTileRows * kMxfp4Bytes);
    static_assert(kQ6_KTileCodesAt + 16 * 192 == kQ6_KTileBlockBytes);
    switch (natural) {
        case WeightType::kGgmlQ4_0: return &kQ4_0;
        case WeightType::kGgmlQ8_0: return &kQ8_0;
        case WeightType::kGgmlQ6_K: return &kQ6_K;
        case WeightType::kGgmlMXFP4: return &kMxfp4;
        default: return nullptr;
    }
}

WeightType tiled_of(WeightType natural) {
    switch (natural) {
        case WeightType::kGgmlQ4_0: return WeightType::kGgmlQ4_0x16;
        case WeightType::kGgmlQ8_0: return WeightType::kGgmlQ8_0x16;
        case WeightType::kGgmlQ6_K: return WeightType::kGgmlQ6_Kx16;
        case WeightType::kGgmlMXFP4: return WeightType::kGgmlMXFP4x16;
        default: return natural;
    }
}

// One tile from 16 natural rows (row i at rows + i·row_bytes) into `tile`.
void tile_one(const TileOps& ops, const uint8_t* rows, int64_t cols, uint8_t* tile) {
    const int64_t blocks = cols / ops.block_elems;
    const size_t row_bytes = static_cast<size_t>(blocks * ops.block_bytes);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk[kGgmlTileRows];
        for (int64_t i = 0; i < kGgmlTileRows; ++i)
            blk[i] = rows + static_cast<size_t>(i) * row_bytes + b * ops.block_bytes;
        ops.tile_block(blk, tile + b * ops.tile_block_bytes);
    }
}

const TileOps& checked_ops(WeightType natural, int64_t rows, int64_t cols) {
    const TileOps* ops = tile_ops(natural);
    SLUICE_ASSERT(ops != nullptr && rows % kGgmlTileRows == 0 && cols % ops->block_elems == 0);
    return *ops;
}

}  // namespace

WeightType tiled_type(const WeightView& w) {
    if (tile_ops(w.type) != nullptr && w.rows > 0 && w.rows % kGgmlTileRows == 0) return tiled_of(w.type);
    return w.type;
}

WeightType untiled_type(WeightType type) {
    switch (type) {
        case WeightType::kGgmlQ4_0x16: return WeightType::kGgmlQ4_0;
        case WeightType::kGgmlQ8_0x16: return WeightType::kGgmlQ8_0;
        case WeightType::kGgmlQ6_Kx16: return WeightType::kGgmlQ6_K;
        case WeightType::kGgmlMXFP4x16: return WeightType::kGgmlMXFP4;
        default: return type;
    }
}

size_t ggml_tile_scratch_bytes(WeightType natural, int64_t cols) {
    SLUICE_ASSERT(tile_ops(natural) != nullptr);
    return static_cast<size_t>(kGgmlTileRows) * weight_format(natural).data_row_bytes(cols);
}

void ggml_tile_in_place(WeightType natural, uint8_t* data, int64_t rows, int64_t cols, uint8_t* scratch) {
    const TileOps& ops = checked_ops(natural, rows, cols);
    const size_t tile_bytes = ggml_tile_scratch_bytes(natural, cols);
    for (int64_t t = 0; t < rows / kGgmlTileRows; ++t) {
        uint8_t* at = data + static_cast<size_t>(t) * tile_bytes;
        std::memcpy(scratch, at, tile_bytes);
        tile_one(ops, scratch, cols, at);
    }
}

void ggml_tile_rows(WeightType natural, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
    const TileOps& ops = checked_ops(natural, rows, cols);
    const size_t tile_bytes = ggml_tile_scratch_bytes(natural, cols);
    for (int64_t t = 0; t < rows / kGgmlTileRows; ++t)
        tile_one(ops, src + static_cast<size_t>(t) * tile_bytes, cols,
                 dst + static_cast<size_t>(t) * tile_bytes);
}

void ggml_untile_block(const WeightView& w, int64_t r, int64_t b, uint8_t* out) {
    const TileOps* ops = tile_ops(untiled_type(w.type));
    SLUICE_ASSERT(ops != nullptr && untiled_type(w.type) != w.type && r >= 0 && r < w.rows);
    const int64_t i = r % kGgmlTileRows;
    const uint8_t* tile = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r - i) * w.row_bytes();
    ops->untile_block(tile + b * ops->tile_block_bytes, i, out);
}

void ggml_untile_row(const WeightView& w, int64_t r, uint8_t* out) {
    const TileOps* ops = tile_ops(untiled_type(w.type));
    SLUICE_ASSERT(ops != nullptr && untiled_type(w.type) != w.type && r >= 0 && r < w.rows);
    for (int64_t b = 0; b < w.cols / ops->block_elems; ++b)
        ggml_untile_block(w, r, b, out + b * ops->block_bytes);
}

}  // namespace sluice::kernels
