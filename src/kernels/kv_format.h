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
//   kQ3   head_dim·3/8 code bytes, then one f16 scale       3 + 16/head_dim bits (3.125 at 128):
//         a rotated codebook in the TurboQuant family. The head is rotated, y = H·D·x / √head_dim
//         (D the fixed random signs kv_rotation_sign, H the Sylvester Hadamard matrix), which
//         spreads outlier channels over all coordinates and leaves them close to Gaussian; each
//         coordinate is coded as the nearest of the 3-bit Lloyd–Max levels for N(0, 1)
//         (kKvQ3Levels) at σ = rms(y), and the scale s is the least-squares fit of the levels to y,
//         so ŷ = s·L[c] and x ≈ D·H·ŷ / √head_dim. Codes pack 8 to 3 bytes (little-endian 24 bits,
//         code j at bit 3j). Attention never rotates a key or value back: q·k = (H·D·q/√hd)·ŷ, and
//         the softmax-weighted sum of the ŷ is rotated back once per query head.
// q8 and q4 group 32 consecutive elements of a head (kKvGroup); head_dim must be a multiple of it.
// q3 needs a power-of-two head_dim from 8 to kKvMaxRotatedDim (the fast Walsh–Hadamard transform).
// Definitions (the scalar reference every kernel is tested against): kernels::reference::kv_store
// / kv_load.
#pragma once

#include <cstdint>

namespace sluice::kernels {

enum class KvType : uint8_t { kF32, kF16, kQ8, kQ4, kQ3 };

constexpr int64_t kKvGroup = 32;
constexpr int64_t kKvMaxRotatedDim = 1024;

// The 3-bit Lloyd–Max quantizer of a standard normal variable: its reconstruction levels
// (Max 1960), ascending; the decision thresholds are the midpoints between neighbours.
constexpr float kKvQ3Levels[8] = {-2.1519457f, -1.3439093f, -0.7560052f, -0.2450941f,
                                  0.2450941f,  0.7560052f,  1.3439093f,  2.1519457f};

// D of the q3 rotation: coordinate i is multiplied by ±1, the top bit of splitmix64(i) (fixed, so
// a cache written by one build reads back in any other).
constexpr float kv_rotation_sign(int64_t i) {
    uint64_t z = static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> 63) != 0 ? -1.0f : 1.0f;
}

// The recent window of a compressed cache (--kv-window): the last positions' keys and values also
// kept in f16, in a ring of `slots` rows (position s at row s % slots, [n_kv_heads, head_dim]
// halves each, the kF16 layout). A query at position P reads key and value s from the ring when
// P − s < window and tags[s % slots] == s (the ring holds s), else from the compressed cache — so
// what a query reads depends on its own position only, not on how its step was batched, and a
// ring row overwritten after a cut-back (or a failed forward) just falls back to the cache.
struct KvRing {
    int64_t window = 0;
    int64_t slots = 0;
    const int64_t* tags = nullptr;  // [slots]: the position each row holds, -1 for none
    const void* k = nullptr;
    const void* v = nullptr;
};

const char* kv_type_name(KvType type);  // "f32", "f16", "q8", "q4", "q3"
// Bits per stored element of a head of head_dim, scales included (32, 16, 8.5, 4.5, 3 + 16/hd).
double kv_type_bits(KvType type, int64_t head_dim);
// Bytes of one head of one position.
int64_t kv_head_bytes(KvType type, int64_t head_dim);
// Null when head_dim can be stored as `type`, else what is wrong with it.
const char* kv_shape_error(KvType type, int64_t head_dim);
// The type of `--kv-bits N`: 32 → f32, 16 → f16, 8 → q8, 4 → q4, 3 → q3; false for any other N.
bool kv_type_for_bits(int bits, KvType* type);

}  // namespace sluice::kernels
