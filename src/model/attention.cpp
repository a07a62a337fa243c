// Full (softmax) attention layers: Qwen3-MoE's plain GQA (models.md §2.2) and the gated variant of
// Qwen3-Next / Qwen3.5 (§3.4: q and a sigmoid gate interleaved per head in q_proj, zero-centred
// q/k norms, partial NeoX RoPE). The KV cache holds f32 keys and values after norm and RoPE.
#include <cmath>
#include <cstring>

#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

void Model::attention_layer(const AttentionPlan& P, const LayerWeights& lw, ModelState::Layer& st,
                            int64_t pos0, int64_t n, Workspace& ws, ThreadPool* pool) const {
    const AttentionWeights& a = lw.attn;
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
    linear(a.q_proj, norm, n, qg, pool);
    linear(a.k_proj, norm, n, k, pool);
    linear(a.v_proj, norm, n, v, pool);

    for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < nh; ++h) {
            const float* src = qg + t * q_rows + h * hd * (gated ? 2 : 1);
            kernels::rms_norm(src, a.q_norm.data(), hd, P.qk_norm_eps, q + (t * nh + h) * hd);
            if (gated) std::memcpy(gate + (t * nh + h) * hd, src + hd, sizeof(float) * hd);
        }
        for (int64_t h = 0; h < nkv; ++h) {
            float* kh = k + (t * nkv + h) * hd;
            kernels::rms_norm(kh, a.k_norm.data(), hd, P.qk_norm_eps, head);
            std::memcpy(kh, head, sizeof(float) * hd);
        }
        kernels::rope_neox(q + t * nh * hd, nh, hd, P.rotary_dim, pos0 + t, P.rope_theta);
        kernels::rope_neox(k + t * nkv * hd, nkv, hd, P.rotary_dim, pos0 + t, P.rope_theta);
    }
    std::memcpy(st.k_cache.data() + pos0 * nkv * hd, k, sizeof(float) * n * nkv * hd);
    std::memcpy(st.v_cache.data() + pos0 * nkv * hd, v, sizeof(float) * n * nkv * hd);

    float* out = grow(ws.attn, n * nh * hd);  // [n, nh, hd]
    kernels::attention(q, st.k_cache.data(), st.v_cache.data(), n, pos0, nh, nkv, hd,
                       1.0f / std::sqrt(static_cast<float>(hd)), out, pool);
    if (gated) {
        for (int64_t i = 0; i < n * nh * hd; ++i) out[i] *= sigmoid(gate[i]);
    }
    linear(a.o_proj, out, n, ws.mix.data(), pool);
}

}  // namespace sluice::model
