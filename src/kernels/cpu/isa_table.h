// The per-ISA inner loops behind the dispatched kernels (internal to src/kernels/cpu/).
//
// Each instruction set (portable, avx2, avx512) fills one IsaTable in its own translation units,
// compiled with that ISA's -m flags (CMake picks them by the file suffix). dispatch.cpp picks a
// table once from the CPU's features and does everything that is not an inner loop: splitting
// work over the ThreadPool, thread_local scratch, and the op-level control flow.
//
// Rules for the ISA translation units (they are compiled with flags the CPU may not support):
// everything is in an anonymous namespace except the exported table, and they use no inline
// functions or templates of the standard library (std::min, std::vector, ...): the linker keeps one
// copy of such a function, possibly the AVX-512 one, and a portable caller would then execute
// AVX-512 code. Plain C library calls (expf, memcpy) are fine.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace sluice::kernels::cpu {

// Scratch for one chunk of one value head of gated_delta_chunked, as float counts.
constexpr int64_t kDeltaChunk = 64;
inline int64_t delta_chunk_scratch_floats(int64_t dk, int64_t dv) {
    const int64_t C = kDeltaChunk;
    return 4 * C * dk + 3 * C * dv + 3 * C * C + 4 * C;
}

// One KV head's view of a KvRing (kv_format.h): k and v point at that head in ring row 0.
struct RingHead {
    const uint8_t* k;
    const uint8_t* v;
    const int64_t* tags;
    int64_t slots, window, row_bytes;
};

// The row kernels of the linear products take up to kRowVectors vectors per call — a decode step of
// several sequences, the k + 1 rows of a speculative verification, the experts several lone rows chose:
// each chunk of a weight row is loaded once and multiplies every vector, so a weight read from memory
// serves all of them.
constexpr int64_t kRowVectors = 8;

// The n (1..kRowVectors) vectors of one row-kernel call: vector v's input at x + v·x_stride_bytes (its
// prepared form, or f32 for float weights), its sums at sums + v·sums_stride (prepared paths), and its
// result for row r of [r0, r1) at y[v·ldy + r − r0].
struct RowVectors {
    const void* x;
    int64_t x_stride_bytes;
    const float* sums;
    int64_t sums_stride;
    int64_t n;
    float* y;
    int64_t ldy;
};

struct IsaTable {
    const char* name;

    // ---- linear (the decode/prefill hot path) ----
    // Floats of the prepared activation for a quantized matvec of `cols` (>= cols; padded).
    int64_t (*prepared_x_floats)(const WeightView& w);
    // Quantized matvec, step 1 (once per input vector): xp = x rearranged to the lane order of
    // this ISA's code unpacking (zero padded), xsum[g] = Σ of x over group g.
    void (*prepare_x)(const WeightView& w, const float* x, float* xp, float* xsum);
    // Step 2: row r of W · each prepared vector (RowVectors: xp, xsum), for rows [r0, r1).
    //
    // Every row kernel (matvec_quant_rows, matvec_float_rows, i8_matvec_rows) gives each (row, vector)
    // bit for bit the result it gives that vector alone (n = 1): a vector's lanes see the same chunks in
    // the same order, the same products and the same reduction whatever vectors share the call, and a
    // row's result does not depend on r0, r1 either (so matvec, matvec_batch, matvec_jobs and the
    // GEMM-less matmul agree bit for bit).
    void (*matvec_quant_rows)(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);
    // Float weights (F32/F16/BF16): row r · each vector (RowVectors: x as it is, no sums).
    void (*matvec_float_rows)(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);
    // Rows [r0, r1) of W in f32, natural order: tile[(r - r0) * cols + i].
    void (*dequant_rows)(const WeightView& w, int64_t r0, int64_t r1, float* tile);
    // y[t * ldy + r] = Σ_i wt[r * ldw + i] · x[t * cols + i] for r < nr, t < n (f32 GEMM, weight
    // rows reused across tokens).
    void (*gemm_tile)(const float* wt, int64_t nr, int64_t ldw, const float* x, int64_t n, int64_t cols,
                      float* y, int64_t ldy);

    // ---- int8 activations (kernels.h, Activations::kInt8) ----
    // The name of this path ("avx512-vnni", "avx2", "portable").
    const char* i8_name;
    // Bytes of one prepared vector for a product with w: the int8 codes of x in this ISA's lane
    // order and the per-lane block scales (a multiple of 64).
    int64_t (*i8_prepared_bytes)(const WeightView& w);
    // Quantises x per block of 32 (kernels.h) into `prep`, and xs[g] = Σ_{b∈g} d_b·Σ_{i∈b} q_i.
    void (*i8_prepare)(const WeightView& w, const float* x, uint8_t* prep, float* xs);
    // Row r of W · each prepared vector (RowVectors: prep, xs) for rows [r0, r1) (bit for bit each
    // vector alone: see matvec_quant_rows).
    void (*i8_matvec_rows)(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);
    // The prefill GEMM (null: matmul runs i8_matvec_rows per token). Prepared x of n tokens:
    // i8_gemm_prepared_bytes(w, n) bytes written by i8_gemm_prepare; i8_gemm_rows writes
    // y[t·ldy + r] for rows [r0, r1) and every token, with i8_gemm_scratch_bytes(w, r1 − r0) bytes of
    // scratch. A token's result does not depend on n or the other tokens (it may differ from matvec's
    // in the last bits: the sums run in another order).
    int64_t (*i8_gemm_prepared_bytes)(const WeightView& w, int64_t n);
    void (*i8_gemm_prepare)(const WeightView& w, const float* x, int64_t n, uint8_t* prep);
    int64_t (*i8_gemm_scratch_bytes)(const WeightView& w, int64_t rows);
    void (*i8_gemm_rows)(const WeightView& w, const uint8_t* prep, int64_t n, int64_t r0, int64_t r1,
                         float* y, int64_t ldy, uint8_t* scratch);

    // ---- small ops (same semantics as the public ones) ----
    void (*rms_norm)(const float* x, const float* weight, int64_t n, float eps, float* y);
    void (*rms_norm_gated)(const float* x, const float* z, const float* weight, int64_t n, float eps,
                           float* y);
    void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
    void (*axpy)(float a, const float* x, int64_t n, float* y);
    void (*rope_neox)(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position,
                      float theta);
    void (*conv1d_silu_channels)(const float* x, int64_t n, int64_t channels, int64_t kernel,
                                 const float* weight, float* state, float* y, int64_t c0, int64_t c1);

    // ---- attention over a KV cache (kv_format.h; f32 included) ----
    // The rep (<= 64) query heads of one KV head at once over keys [s0, s1) of the query's n_keys,
    // each key and value read once for all of them; q and acc: rep consecutive heads; scores:
    // rep · (s1 − s0) floats; tmp: (2·rep + 1) · head_dim floats; ring: the f16 recent window
    // (null: none); queries_rotated: tmp still holds this query's q3-rotated heads from the call
    // before (the same query's previous chunk on this thread). Writes the softmax's partial terms: per head
    // the largest score m, the sum l of exp(score − m) and acc = Σ exp(score − m) · value (attention = acc /
    // l). Same per head.
    void (*attention_group_kv)(KvType type, const float* q, int64_t rep, const uint8_t* k, const uint8_t* v,
                               const RingHead* ring, int64_t n_keys, int64_t s0, int64_t s1,
                               int64_t row_bytes, int64_t head_dim, float scale, bool queries_rotated,
                               float* scores, float* tmp, float* acc, float* m, float* l);
    // One head of one cache position back to f32 (kv_load).
    void (*kv_load_head)(KvType type, const uint8_t* src, int64_t head_dim, float* dst);

    // ---- Gated DeltaNet, one value head j (its key head m chosen by the caller) ----
    // Token-by-token over n tokens. q_head/k_head point at token 0 of the head, stepping by
    // qk_stride per token; v/out by v_stride; beta/g by g_stride. S: [dk, dv]. scratch: 2·dv floats.
    void (*delta_recurrent_head)(const float* q, const float* k, int64_t qk_stride, const float* v,
                                 int64_t v_stride, const float* beta, const float* g, int64_t g_stride,
                                 int64_t n, int64_t dk, int64_t dv, float* S, float* out, float* scratch);
    // Chunked form (C = kDeltaChunk), same arguments; scratch: delta_chunk_scratch_floats(dk, dv).
    void (*delta_chunked_head)(const float* q, const float* k, int64_t qk_stride, const float* v,
                               int64_t v_stride, const float* beta, const float* g, int64_t g_stride,
                               int64_t n, int64_t dk, int64_t dv, float* S, float* out, float* scratch);
};

extern const IsaTable kPortableTable;
#if defined(__x86_64__)
extern const IsaTable kAvx2Table;
extern const IsaTable kAvx512Table;
#endif

}  // namespace sluice::kernels::cpu
