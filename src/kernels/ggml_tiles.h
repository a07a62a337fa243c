// Row tiles: the CPU's decode layout of ggml's Q4_0 (WeightType::kGgmlQ4_0x16), written once, when a
// weight is loaded (the dense core) or lands in an expert-cache slot, never per product.
//
// Why: a decode product streams each weight byte once, and its cost is the work done per byte. In the
// natural layout (a row is its blocks back to back) the int8 row kernel unpacks a row's nibbles into
// element order, puts each block's scale in its lanes and ends every row with a horizontal sum. With 16
// rows side by side, lane i of a 32-bit integer dot (vpdpbusd; vpmaddubsw + vpmaddwd) is row i: a
// 64-byte load is 16 rows × 8 codes that meet x's 4 codes broadcast to every lane, the 16 rows' scales of
// a block are one f16 → f32 convert, and a tile's 16 results leave as one store. llama.cpp's repacked
// Q4_0 (block_q4_0x8 / x16) is the same idea in its own layout.
//
// The layout. Tile t holds rows 16t..16t+15 in exactly the bytes those rows take in the natural layout
// ([16 · row_bytes] at t · 16 · row_bytes), so tiling is a permutation inside each tile, done in place.
// In a tile, block column b (elements 32b..32b+31 of each row) takes kQ4_0TileBlockBytes = 288 bytes at
// 288·b:
//   f16   d[16]        row i's block scale at 2i
//   u8    codes[4][64] chunk k holds, at 4i..4i+3, row i's qs[4k..4k+3]: its low nibbles are elements
//                      4k..4k+3 of the block, its high nibbles 16+4k..16+4k+3 (ggml's nibble order, kept)
// A view of the tiled type has rows a multiple of 16; every op reads it (kernels.h), the int8
// products by their own kernels (cpu/ggml_int8*.cpp), the rest through ggml_untile_row.
//
// Thread safety: pure functions over the caller's memory. No allocation (the caller gives scratch).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace sluice::kernels {

constexpr int64_t kQ4_0TileRows = 16;
constexpr int64_t kQ4_0TileBlockBytes = 288;  // 16 rows × 18 bytes

// The tiled form of a weight's format, when it has one and the weight's shape allows it (Q4_0 with
// rows a multiple of 16); else the weight's own type.
WeightType tiled_type(const WeightView& w);

// Scratch bytes ggml_tile_in_place needs for a [rows, cols] weight of `natural` type: one tile.
size_t ggml_tile_scratch_bytes(WeightType natural, int64_t cols);

// Rows × cols of `natural` type (the natural layout, rows a multiple of the tile) at `data`, rewritten
// as tiled_type's tiles in place; `scratch` holds ggml_tile_scratch_bytes.
void ggml_tile_in_place(WeightType natural, uint8_t* data, int64_t rows, int64_t cols, uint8_t* scratch);

// The same from `src` into `dst` (distinct buffers of rows · row_bytes).
void ggml_tile_rows(WeightType natural, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

// Row r of a tiled view in the natural layout: w.row_bytes() bytes at `out`.
void ggml_untile_row(const WeightView& w, int64_t r, uint8_t* out);

}  // namespace sluice::kernels
