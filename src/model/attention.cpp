// Full (softmax) attention layers: Qwen3-MoE's plain GQA (models.md §2.2), the gated variant of
// Qwen3-Next / Qwen3.5 (§3.4: q and a sigmoid gate interleaved per head in q_proj, zero-centred
// q/k norms, partial NeoX RoPE), Qwen2's (biases on q/k/v, no q/k norm) and gpt-oss's (biases on q/k/v/o,
// a sink logit per head, a sliding window on alternate layers). The KV cache holds keys (after
// norm and RoPE) and values in the state layout's KV type (f32, or a compressed type of kernels/kv_format.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

// The new rows into the cache in its type, then attention on the cache as stored: a token's own key is
// read back compressed too, so a position's result does not depend on whether it was computed in prefill
// or in decode. With a --kv-window, the rows also go into the f16 ring, in sub-steps of at most the
// ring's slack — a sub-step's writes then never overwrite a row one of its queries reads inside its
// window, so every query sees its window in f16 however the step was batched.
void attend_step(ModelState& state, ModelState::Layer& st, const float* k, const float* v, const float* q,
                 int64_t n, int64_t nh, int64_t nkv, int64_t hd, float scale, float* out, ThreadPool* pool,
                 const kernels::AttentionExtras& extras) {
    const int64_t pos0 = state.n_past, kv = nkv * hd;
    const kernels::KvType type = state.kv;
    const int64_t row_bytes = nkv * kernels::kv_head_bytes(type, hd);
    const bool latent = v == nullptr;  // the keys' rows are the values
    const uint8_t* v_cache = latent ? st.k_cache.data() : st.v_cache.data();
    kernels::kv_store(type, k, n, nkv, hd, st.k_cache.data() + pos0 * row_bytes);
    if (!latent) kernels::kv_store(type, v, n, nkv, hd, st.v_cache.data() + pos0 * row_bytes);
    if (st.recent.empty()) {
        kernels::attention_kv(type, q, st.k_cache.data(), v_cache, nullptr, n, pos0, nh, nkv, hd, scale, out,
                              pool, extras);
        return;
    }
    const ModelState::Ring r = state.ring(st);
    const int64_t slots = state.ring_slots, ring_row = state.ring_row_bytes;
    const kernels::KvRing ring{state.kv_window, slots, r.tags, r.k, latent ? r.k : r.v};
    for (int64_t c0 = 0; c0 < n; c0 += kKvRingSlack) {
        const int64_t c = std::min(kKvRingSlack, n - c0);
        for (int64_t t = 0; t < c; ++t) {
            const int64_t pos = pos0 + c0 + t, slot = pos % slots, row = c0 + t;
            kernels::kv_store(kernels::KvType::kF16, k + row * kv, 1, nkv, hd, r.k + slot * ring_row);
            if (!latent)
                kernels::kv_store(kernels::KvType::kF16, v + row * kv, 1, nkv, hd, r.v + slot * ring_row);
            r.tags[slot] = pos;
        }
        kernels::attention_kv(type, q + c0 * nh * hd, st.k_cache.data(), v_cache, &ring, c, pos0 + c0, nh,
                              nkv, hd, scale, out + c0 * nh * hd, pool, extras);
    }
}

// Over a batch (model.h BatchLayout): the projections over every row at once; norms, RoPE, the KV
// write and the attention per sequence, each at its own positions in its own cache.
void Model::attention_layer(const AttentionPlan& P, const LayerWeights& lw, int64_t layer, Workspace& ws,
                            ThreadPool* pool) const {
    const AttentionWeights& a = lw.attn;
    const BatchLayout& b = ws.batch;
    const int64_t n = b.rows, singles = b.singles;
    const int64_t nh = P.heads, nkv = P.kv_heads, hd = P.head_dim;
    const bool gated = P.output_gate;
    const int64_t q_rows = nh * hd * (gated ? 2 : 1);
    const float* norm = ws.norm.data();  // [n, H]

    float* qg = grow(ws.tmp, n * q_rows);      // [n, nh, (q | gate)]
    float* q = grow(ws.q, n * nh * hd);        // [n, nh, hd]
    float* gate = grow(ws.gate, n * nh * hd);  // [n, nh, hd]
    float* k = grow(ws.k, n * nkv * hd);       // [n, nkv, hd]
    float* v = grow(ws.v, n * nkv * hd);       // [n, nkv, hd]
    float* head = grow(ws.y, hd);
    float* out = grow(ws.attn, n * nh * hd);  // [n, nh, hd]
    linear_rows_shared({{&a.q_proj, qg}, {&a.k_proj, k}, {&a.v_proj, v}}, norm, n, singles, pool);
    // gpt-oss: the layer's sliding window and its heads' sink logits.
    const kernels::AttentionExtras extras{P.window, P.sinks ? a.sinks.data() : nullptr};

    for (const BatchLayout::Part& p : b.parts) {
        ModelState::Layer& st = p.state->layers[static_cast<size_t>(layer)];
        const int64_t pos0 = p.state->n_past;
        for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
            if (P.qkv_bias) {  // Qwen2: q, k and v plus their biases (before RoPE, as the reference)
                float* qr = qg + t * q_rows;
                float* kr = k + t * nkv * hd;
                float* vr = v + t * nkv * hd;
                for (int64_t i = 0; i < nh * hd; ++i) qr[i] += a.q_bias[static_cast<size_t>(i)];
                for (int64_t i = 0; i < nkv * hd; ++i) {
                    kr[i] += a.k_bias[static_cast<size_t>(i)];
                    vr[i] += a.v_bias[static_cast<size_t>(i)];
                }
            }
            for (int64_t h = 0; h < nh; ++h) {
                const float* src = qg + t * q_rows + h * hd * (gated ? 2 : 1);
                if (P.qk_norm)
                    kernels::rms_norm(src, a.q_norm.data(), hd, P.qk_norm_eps, q + (t * nh + h) * hd);
                else
                    std::memcpy(q + (t * nh + h) * hd, src, sizeof(float) * hd);
                if (gated) std::memcpy(gate + (t * nh + h) * hd, src + hd, sizeof(float) * hd);
            }
            if (P.qk_norm) {
                for (int64_t h = 0; h < nkv; ++h) {
                    float* kh = k + (t * nkv + h) * hd;
                    kernels::rms_norm(kh, a.k_norm.data(), hd, P.qk_norm_eps, head);
                    std::memcpy(kh, head, sizeof(float) * hd);
                }
            }
            const int64_t pos = pos0 + t - p.row0;
            if (P.rope_inv_freq.empty()) {
                kernels::rope_neox(q + t * nh * hd, nh, hd, P.rotary_dim, pos, P.rope_theta);
                kernels::rope_neox(k + t * nkv * hd, nkv, hd, P.rotary_dim, pos, P.rope_theta);
            } else {
                kernels::rope_neox_table(q + t * nh * hd, nh, hd, P.rotary_dim, pos, P.rope_inv_freq.data(),
                                         P.rope_mscale);
                kernels::rope_neox_table(k + t * nkv * hd, nkv, hd, P.rotary_dim, pos, P.rope_inv_freq.data(),
                                         P.rope_mscale);
            }
        }
        attend_step(*p.state, st, k + p.row0 * nkv * hd, v + p.row0 * nkv * hd, q + p.row0 * nh * hd, p.n, nh,
                    nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)), out + p.row0 * nh * hd, pool, extras);
    }
    if (gated) {
        for (int64_t i = 0; i < n * nh * hd; ++i) out[i] *= sigmoid(gate[i]);
    }
    linear_rows(a.o_proj, out, n, singles, ws.mix.data(), pool);
    if (P.o_bias) add_bias(ws.mix.data(), n, a.o_proj.rows, a.o_bias.data());  // gpt-oss
}

}  // namespace sluice::model
