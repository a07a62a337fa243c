// Gated DeltaNet layers (models.md §3.5, §4.2): input projections (Qwen3-Next's per-group
// interleaved in_proj_qkvz/in_proj_ba, or Qwen3.5's split in_proj_qkv/z/b/a), causal depthwise
// conv + SiLU with a K-1 token state, per-head L2 norm of q and k, the gates β = σ(b) and
// g = −exp(A_log)·softplus(a + dt_bias), the delta rule (chunked for batches, recurrent for a
// single token), the gated RMSNorm and out_proj.
#include <cmath>
#include <cstring>

#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

namespace {

// y = x / sqrt(Σx² + eps) · scale. transformers' l2norm uses eps = 1e-6; mlx-lm computes the same
// normalisation as a scaled rms_norm, whose epsilon on Σx² is n·1e-6. The two differ only when
// Σx² is tiny, but tiny test models are exactly that case, so each checkpoint layout follows its
// own reference implementation.
void l2_normalize(const float* x, int64_t n, float scale, float eps, float* y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = scale / std::sqrt(static_cast<float>(ss) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
}

}  // namespace

// Over a batch (model.h BatchLayout): the projections and the per-token norms and gates over every
// row at once; the conv and the delta rule per sequence, on its own state (the recurrent form for a
// step of one token, the chunked one for longer steps, as alone).
void Model::deltanet_layer(const DeltaNetPlan& P, const LayerWeights& lw, int64_t layer, bool out_of_place,
                           Workspace& ws, ThreadPool* pool) const {
    const DeltaNetWeights& d = lw.linear;
    const BatchLayout& batch = ws.batch;
    const int64_t n = batch.rows, singles = batch.singles;
    const int64_t nk = P.k_heads, nv = P.v_heads, dk = P.k_dim, dv = P.v_dim;
    const int64_t r = nv / nk, kd = nk * dk, vd = nv * dv, cd = P.conv_dim();
    const float* norm = ws.norm.data();  // [n, H]

    float* u = grow(ws.conv_in, n * cd);  // [n, q | k | v] conv input, head-major
    float* z = grow(ws.z, n * vd);        // [n, nv, dv]
    float* b = grow(ws.beta, n * nv);     // [n, nv] raw b, then β
    float* a = grow(ws.g, n * nv);        // [n, nv] raw a, then g

    if (P.projection == DeltaProjection::kSplit) {
        linear_rows_shared({{&d.in_qkv, u}, {&d.in_z, z}, {&d.in_b, b}, {&d.in_a, a}}, norm, n, singles,
                           pool);
    } else {
        // in_proj_qkvz output: nk blocks of [q (dk) | k (dk) | v (r·dv) | z (r·dv)];
        // in_proj_ba output: nk blocks of [b (r) | a (r)] (models.md §3.5.2).
        const int64_t qkvz = 2 * kd + 2 * vd, block = 2 * dk + 2 * r * dv;
        float* p = grow(ws.tmp, n * qkvz);
        float* ba = grow(ws.gate, n * 2 * nv);
        linear_rows_shared({{&d.in_qkvz, p}, {&d.in_ba, ba}}, norm, n, singles, pool);
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t g = 0; g < nk; ++g) {
                const float* src = p + t * qkvz + g * block;
                float* ut = u + t * cd;
                std::memcpy(ut + g * dk, src, sizeof(float) * dk);
                std::memcpy(ut + kd + g * dk, src + dk, sizeof(float) * dk);
                std::memcpy(ut + 2 * kd + g * r * dv, src + 2 * dk, sizeof(float) * r * dv);
                std::memcpy(z + t * vd + g * r * dv, src + 2 * dk + r * dv, sizeof(float) * r * dv);
                const float* bab = ba + t * 2 * nv + g * 2 * r;
                for (int64_t i = 0; i < r; ++i) {
                    b[t * nv + g * r + i] = bab[i];
                    a[t * nv + g * r + i] = bab[r + i];
                }
            }
        }
    }

    float* uc = grow(ws.conv_out, n * cd);  // [n, cd] after conv + SiLU
    // Out of place, the new state goes to the *_next buffers and the committed one stays until the
    // forward succeeds (model.h, ModelState).
    for (const BatchLayout::Part& part : batch.parts) {
        ModelState::Layer& st = part.state->layers[static_cast<size_t>(layer)];
        float* conv_state_out = out_of_place ? st.conv_next.data() : st.conv.data();
        kernels::conv1d_silu(u + part.row0 * cd, part.n, cd, P.conv_kernel, d.conv.data(), st.conv.data(),
                             conv_state_out, uc + part.row0 * cd);
    }

    float* q = grow(ws.q, n * kd);  // [n, nk, dk] normalised and scaled
    float* k = grow(ws.k, n * kd);  // [n, nk, dk] normalised
    float* v = grow(ws.v, n * vd);  // [n, nv, dv]
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const float eps = P.l2_eps;
    for (int64_t t = 0; t < n; ++t) {
        const float* ut = uc + t * cd;
        for (int64_t h = 0; h < nk; ++h) {
            l2_normalize(ut + h * dk, dk, q_scale, eps, q + t * kd + h * dk);
            l2_normalize(ut + kd + h * dk, dk, 1.0f, eps, k + t * kd + h * dk);
        }
        std::memcpy(v + t * vd, ut + 2 * kd, sizeof(float) * vd);
        for (int64_t j = 0; j < nv; ++j) {
            b[t * nv + j] = sigmoid(b[t * nv + j]);
            a[t * nv + j] = d.neg_a[j] * softplus(a[t * nv + j] + d.dt_bias[j]);
        }
    }

    // Tiled value heads (DeltaNetPlan::v_heads_tiled): value head j takes key head j % nk. q and k are
    // laid out per value head ([n, nv, dk], head j a copy of key head j % nk) and the delta rule runs
    // with as many key heads as value heads, whose head-j-takes-key-head-j is then the same mapping.
    int64_t n_kh = nk, q_stride = kd;
    if (P.v_heads_tiled) {
        float* qx = grow(ws.tmp, 2 * n * nv * dk);
        float* kx = qx + n * nv * dk;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < nv; ++j) {
                std::memcpy(qx + (t * nv + j) * dk, q + t * kd + (j % nk) * dk, sizeof(float) * dk);
                std::memcpy(kx + (t * nv + j) * dk, k + t * kd + (j % nk) * dk, sizeof(float) * dk);
            }
        q = qx;
        k = kx;
        n_kh = nv;
        q_stride = nv * dk;
    }

    float* o = grow(ws.attn, n * vd);  // [n, nv, dv]
    for (const BatchLayout::Part& part : batch.parts) {
        ModelState::Layer& st = part.state->layers[static_cast<size_t>(layer)];
        float* state_out = out_of_place ? st.recurrent_next.data() : st.recurrent.data();
        const int64_t r0 = part.row0;
        // The recurrent form for short steps (a decode token, a speculative verification): a chunk
        // of 64 costs its full size in work whatever the tokens in it, and the recurrent form gives a
        // k-token step the numbers of k single steps.
        if (part.n <= kRecurrentStepTokens || part.decode_rows) {
            kernels::gated_delta_recurrent(q + r0 * q_stride, k + r0 * q_stride, v + r0 * vd, b + r0 * nv,
                                           a + r0 * nv, part.n, n_kh, nv, dk, dv, st.recurrent.data(),
                                           state_out, o + r0 * vd, pool);
        } else {
            kernels::gated_delta_chunked(q + r0 * q_stride, k + r0 * q_stride, v + r0 * vd, b + r0 * nv,
                                         a + r0 * nv, part.n, n_kh, nv, dk, dv, st.recurrent.data(),
                                         state_out, o + r0 * vd, pool);
        }
    }

    float* y = grow(ws.y, n * vd);  // [n, nv, dv]
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < nv; ++j) {
            const int64_t off = t * vd + j * dv;
            kernels::rms_norm_gated(o + off, z + off, d.norm.data(), dv, P.norm_eps, y + off);
        }
    }
    linear_rows(d.out_proj, y, n, singles, ws.mix.data(), pool);
}

}  // namespace sluice::model
