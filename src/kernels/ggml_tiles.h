// Row tiles: the CPU's decode layouts of ggml's Q4_0, Q6_K, Q8_0 and MXFP4 (WeightType::kGgmlQ4_0x16,
// kGgmlQ6_Kx16, kGgmlQ8_0x16, kGgmlMXFP4x16), written once, when a weight is loaded (the dense core) or lands
// in an expert-cache slot, never per product.
//
// Why: a decode product streams each weight byte once, and its cost is the work done per byte. In the
// natural layout (a row is its blocks back to back) the int8 row kernel unpacks a row's codes into
// element order, puts each (sub-)block's scale in its lanes and ends every row with a horizontal sum.
// With 16 rows side by side, lane i of a 32-bit integer dot (vpdpbusd; vpmaddubsw + vpmaddwd) is row i: a
// 64-byte operand is 16 rows × 4 codes that meet x's 4 codes broadcast to every lane, the 16 rows' scales
// of a block are one convert, and a tile's 16 results leave as one store. llama.cpp's repacked layouts
// (block_q4_0x8 / x16, block_q6_Kx8, block_mxfp4x8) are the same idea in their own byte orders.
//
// The layouts. Tile t holds rows 16t..16t+15 in exactly the bytes those rows take in the natural layout
// ([16 · row_bytes] at t · 16 · row_bytes), so tiling is a bijection inside each tile, done in place. In
// a tile, block column b (block b of each of the 16 rows) takes 16 · block_bytes bytes at that times b:
//
//   Q4_0x16 (kQ4_0TileBlockBytes = 288):
//     f16 d[16]          row i's block scale at 2i
//     u8  codes[4][64]   chunk k holds, at 4i..4i+3, row i's qs[4k..4k+3]: its low nibbles are elements
//                        4k..4k+3 of the block, its high nibbles 16+4k..16+4k+3 (ggml's nibble order, kept)
//   Q8_0x16 (kQ8_0TileBlockBytes = 544):
//     f16 d[16]          row i's block scale at 2i
//     u8  codes[8][64]   chunk k holds, at 4i..4i+3, row i's codes of elements 4k..4k+3 plus 128 (the
//                        int8 with its sign bit flipped: the unsigned operand of vpdpbusd as stored)
//   MXFP4x16 (kMxfp4TileBlockBytes = 272):
//     u8  e[16]          row i's e8m0 scale at i
//     u8  codes[4][64]   as Q4_0x16's: chunk k holds, at 4i..4i+3, row i's qs[4k..4k+3] (low nibbles elements
//                        4k..4k+3, high nibbles 16+4k..16+4k+3), each nibble an index into the e2m1 codebook
//   Q6_Kx16 (kQ6_KTileBlockBytes = 3360; the 256-block's codes c = q + 32 in 0..63):
//     f16 d[16]          row i's super-block scale at 2i
//     i8  sc[16][16]     sub-block s's scales of the 16 rows at 32 + 16s (row i at + i)
//     u8  codes[16][3][64]  sub-block s (elements 16s..16s+15) at 288 + 192s, three chunks k = 0, 1, 2:
//                        byte 4i + e of chunk k is row i's c of element 16s + 4k + e in bits 0..5, and
//                        bits 2k, 2k+1 of row i's c of element 16s + 12 + e in bits 6..7 (so elements
//                        16s..16s+11 are one AND each, the fourth group three shifts and two selects)
// A view of a tiled type has rows a multiple of 16; every op reads it (kernels.h), the int8 products by
// their own kernels (cpu/ggml_int8*.cpp), the rest through ggml_untile_row.
//
// Thread safety: pure functions over the caller's memory. No allocation (the caller gives scratch).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace sluice::kernels {

constexpr int64_t kGgmlTileRows = 16;  // rows per tile, every tiled type
constexpr int64_t kQ4_0TileRows = kGgmlTileRows;
constexpr int64_t kQ4_0TileBlockBytes = 288;   // 16 rows × 18 bytes
constexpr int64_t kQ8_0TileBlockBytes = 544;   // 16 rows × 34 bytes
constexpr int64_t kQ6_KTileBlockBytes = 3360;  // 16 rows × 210 bytes
constexpr int64_t kMxfp4TileBlockBytes = 272;  // 16 rows × 17 bytes
constexpr int64_t kQ6_KTileCodesAt = 288;      // the codes after d[16] and sc[16][16]

// The tiled form of a weight's format, when it has one and the weight's shape allows it (Q4_0, Q6_K, Q8_0
// or MXFP4 with rows a multiple of 16); else the weight's own type.
WeightType tiled_type(const WeightView& w);
// The natural (GGUF) type of a tiled type; any other type is its own.
WeightType untiled_type(WeightType type);

// Scratch bytes ggml_tile_in_place needs for a [rows, cols] weight of `natural` type: one tile.
size_t ggml_tile_scratch_bytes(WeightType natural, int64_t cols);

// Rows × cols of `natural` type (the natural layout, rows a multiple of the tile) at `data`, rewritten
// as tiled_type's tiles in place; `scratch` holds ggml_tile_scratch_bytes.
void ggml_tile_in_place(WeightType natural, uint8_t* data, int64_t rows, int64_t cols, uint8_t* scratch);

// The same from `src` into `dst` (distinct buffers of rows · row_bytes).
void ggml_tile_rows(WeightType natural, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

// Row r of a tiled view in the natural layout: w.row_bytes() bytes at `out`.
void ggml_untile_row(const WeightView& w, int64_t r, uint8_t* out);
// Block b of row r of a tiled view in the natural layout (one block's bytes at `out`).
void ggml_untile_block(const WeightView& w, int64_t r, int64_t b, uint8_t* out);

}  // namespace sluice::kernels
