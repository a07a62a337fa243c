// KV cache element types: how an attention layer stores the keys and values of one position.
//
// A cache row (one position) is n_kv_heads heads, each laid out on its own so attention reads a
// head's bytes contiguously:
//   kF32  head_dim floats                                   32 bits per element (exact)
//   kF16  head_dim IEEE halves                              16 bits
//   kQ8   head_dim int8 codes, then head_dim/32 f16 scales   8.5 bits: x ≈ d·c, d = amax/127
//   kQ4   head_dim/2 code bytes, then head_dim/32 f16 scales 4.5 bits: x ≈ d·(c − 8), d = m/−8,
//         m the element of largest magnitude; group g's byte j holds element 32g + j in its low
//         nibble and 32g + 16 + j in its high one (so both halves unpack with one shift).
// The quantized types group 32 consecutive elements of a head (kKvGroup); head_dim must be a
// multiple of it. Definitions (the scalar reference every kernel is tested against):
// kernels::reference::kv_store / kv_load.
#pragma once

#include <cstdint>

namespace sluice::kernels {

enum class KvType : uint8_t { kF32, kF16, kQ8, kQ4 };

constexpr int64_t kKvGroup = 32;

const char* kv_type_name(KvType type);  // "f32", "f16", "q8", "q4"
// Bits per stored element, scales included (32, 16, 8.5, 4.5).
double kv_type_bits(KvType type);
// Bytes of one head of one position.
int64_t kv_head_bytes(KvType type, int64_t head_dim);
// Null when head_dim can be stored as `type`, else what is wrong with it.
const char* kv_shape_error(KvType type, int64_t head_dim);
// The type of `--kv-bits N`: 32 → f32, 16 → f16, 8 → q8, 4 → q4; false for any other N.
bool kv_type_for_bits(int bits, KvType* type);

}  // namespace sluice::kernels
