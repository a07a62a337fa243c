// Multi-head latent attention (DeepSeek-V3 / Kimi K2), plan.h LatentAttentionPlan: the absorbed form for
// every step, prefill and decode alike. The cache holds one row per position, [rms_norm(latent) |
// rope(k_rope)] in the state layout's KV type, read by the attention as the keys of one shared head
// and — its first kv_lora_rank values — as the values: the output's rope dims are computed and dropped.
#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/weight_format.h"
#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

namespace {

// DeepSeek's interleaved RoPE rotates pairs (2i, 2i+1); transformers de-interleaves them into halves
// and rotates those (NeoX). q and k get the same permutation, so their products are the reference's.
void deinterleave(float* x, int64_t dim, float* tmp) {
    for (int64_t i = 0; i < dim / 2; ++i) {
        tmp[i] = x[2 * i];
        tmp[dim / 2 + i] = x[2 * i + 1];
    }
    std::memcpy(x, tmp, sizeof(float) * static_cast<size_t>(dim));
}

void rope(const LatentAttentionPlan& P, float* x, int64_t n_heads, int64_t stride, int64_t pos) {
    if (P.rope_inv_freq.empty())
        kernels::rope_neox(x, n_heads, stride, P.rope_dim, pos, P.rope_theta);
    else
        kernels::rope_neox_table(x, n_heads, stride, P.rope_dim, pos, P.rope_inv_freq.data(), P.rope_mscale);
}

void for_heads(int64_t heads, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool != nullptr)
        pool->parallel_for(heads, fn);
    else
        fn(0, heads);
}

}  // namespace

void Model::latent_attention_layer(const LatentAttentionPlan& P, const LayerWeights& lw, int64_t layer,
                                   Workspace& ws, ThreadPool* pool) const {
    const AttentionWeights& a = lw.attn;
    const BatchLayout& b = ws.batch;
    const int64_t n = b.rows, singles = b.singles;
    const int64_t nh = P.heads, qd = P.q_dim(), L = P.kv_lora_rank, R = P.rope_dim, cd = P.cache_dim();
    const int64_t nope = P.nope_dim, vd = P.v_dim, unit = P.nope_dim + P.v_dim;
    const float* norm = ws.norm.data();  // [n, H]

    float* q = grow(ws.q, n * nh * qd);  // [n, nh, nope | rope]
    float* ckv = grow(ws.k, n * cd);     // [n, latent | k_rope]
    float* qa = grow(ws.tmp, n * std::max<int64_t>(P.q_lora_rank, 1));
    float* qabs = grow(ws.gate, n * nh * cd);           // [n, nh, q_lat | rope(q_rope)]
    float* out = grow(ws.attn, n * nh * cd);            // [n, nh, o_lat | (dropped)]
    float* olat = grow(ws.v, nh * n * L);               // [nh, n, L]: head-major for the per-head products
    float* vout = grow(ws.z, nh * n * vd);              // [nh, n, vd]
    float* heads_out = grow(ws.conv_out, n * nh * vd);  // [n, nh·vd]: o_proj's input
    float* tmp = grow(ws.y, std::max(R, L));

    if (P.q_lora_rank > 0) {
        linear_rows_shared({{&a.q_a_proj, qa}, {&a.kv_a_proj, ckv}}, norm, n, singles, pool);
        for (int64_t t = 0; t < n; ++t)
            kernels::rms_norm(qa + t * P.q_lora_rank, a.q_a_norm.data(), P.q_lora_rank, P.norm_eps,
                              qa + t * P.q_lora_rank);
        linear_rows(a.q_b_proj, qa, n, singles, q, pool);
    } else {
        linear_rows_shared({{&a.q_proj, q}, {&a.kv_a_proj, ckv}}, norm, n, singles, pool);
    }

    // The cache rows of the step: the normed latent and the roped key, at each token's position.
    for (const BatchLayout::Part& p : b.parts) {
        for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
            const int64_t pos = p.state->n_past + t - p.row0;
            float* row = ckv + t * cd;
            kernels::rms_norm(row, a.kv_a_norm.data(), L, P.norm_eps, row);
            if (P.rope_interleaved) deinterleave(row + L, R, tmp);
            rope(P, row + L, 1, R, pos);
            float* qt = q + t * nh * qd;
            for (int64_t h = 0; h < nh; ++h) {
                float* dst = qabs + (t * nh + h) * cd + L;
                std::memcpy(dst, qt + h * qd + nope, sizeof(float) * static_cast<size_t>(R));
                if (P.rope_interleaved) deinterleave(dst, R, tmp);
            }
            rope(P, qabs + t * nh * cd + L, nh, cd, pos);
        }
    }

    // Absorb W_UK into the queries. From kv_b: q_lat[t, h] = Σ_j q_nope[t, h, j] · kv_b[h·unit + j, :], each
    // weight row dequantized once for every token of the step (and each token's sum in the same order
    // whatever the step's size). From mlx-lm's embed_q (W_UKᵀ stored per head): a product per head.
    std::vector<kernels::WeightView>& views = ws.latent_uv;
    views.resize(static_cast<size_t>(nh));
    std::vector<kernels::MatvecJob>& jobs = ws.jobs;
    // Per head over the step's rows, head-major in and out: x [nh, n, cols] → y [nh, n, rows]; the
    // single-token rows through one matvec_jobs dispatch, the rest through matmul (workspace.h linear_rows).
    auto per_head = [&](const float* x, int64_t cols, float* y, int64_t rows) {
        if (singles > 0) {
            jobs.clear();
            for (int64_t h = 0; h < nh; ++h)
                jobs.push_back({&views[static_cast<size_t>(h)], x + h * n * cols, singles, y + h * n * rows});
            kernels::matvec_jobs(jobs.data(), static_cast<int64_t>(jobs.size()), pool);
        }
        if (n > singles)
            for (int64_t h = 0; h < nh; ++h)
                kernels::matmul(views[static_cast<size_t>(h)], x + (h * n + singles) * cols, n - singles,
                                y + (h * n + singles) * rows, pool);
    };
    if (a.embed_q.data != nullptr) {
        float* qn = grow(ws.expert_in, nh * n * nope);  // [nh, n, nope]
        float* ql = grow(ws.expert_out, nh * n * L);    // [nh, n, L]
        for (int64_t h = 0; h < nh; ++h) {
            views[static_cast<size_t>(h)] = kernels::row_slice(a.embed_q, h * L, L);
            for (int64_t t = 0; t < n; ++t)
                std::memcpy(qn + (h * n + t) * nope, q + (t * nh + h) * qd,
                            sizeof(float) * static_cast<size_t>(nope));
        }
        per_head(qn, nope, ql, L);
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t t = 0; t < n; ++t)
                std::memcpy(qabs + (t * nh + h) * cd, ql + (h * n + t) * L,
                            sizeof(float) * static_cast<size_t>(L));
    } else {
        for_heads(nh, pool, [&](int64_t h0, int64_t h1) {
            thread_local std::vector<float> wrow;
            if (wrow.size() < static_cast<size_t>(L)) wrow.resize(static_cast<size_t>(L));
            for (int64_t h = h0; h < h1; ++h) {
                for (int64_t t = 0; t < n; ++t) std::fill_n(qabs + (t * nh + h) * cd, L, 0.0f);
                for (int64_t j = 0; j < nope; ++j) {
                    kernels::dequantize_row(a.kv_b_proj, h * unit + j, wrow.data());
                    for (int64_t t = 0; t < n; ++t)
                        kernels::axpy(q[(t * nh + h) * qd + j], wrow.data(), L, qabs + (t * nh + h) * cd);
                }
            }
        });
    }

    // The rows into the cache (as keys only: they are their own values), attention over it per sequence.
    for (const BatchLayout::Part& p : b.parts)
        attend_step(*p.state, p.state->layers[static_cast<size_t>(layer)], ckv + p.row0 * cd, nullptr,
                    qabs + p.row0 * nh * cd, p.n, nh, 1, cd, P.softmax_scale, out + p.row0 * nh * cd, pool);

    // Per head, its values from its latent output: W_UV[h] (its v rows of kv_b, or unembed_out's) over the
    // head's rows.
    for (int64_t h = 0; h < nh; ++h)
        for (int64_t t = 0; t < n; ++t)
            std::memcpy(olat + (h * n + t) * L, out + (t * nh + h) * cd,
                        sizeof(float) * static_cast<size_t>(L));
    for (int64_t h = 0; h < nh; ++h)
        views[static_cast<size_t>(h)] = a.unembed_out.data != nullptr
                                            ? kernels::row_slice(a.unembed_out, h * vd, vd)
                                            : kernels::row_slice(a.kv_b_proj, h * unit + nope, vd);
    per_head(olat, L, vout, vd);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < nh; ++h)
            std::memcpy(heads_out + (t * nh + h) * vd, vout + (h * n + t) * vd,
                        sizeof(float) * static_cast<size_t>(vd));
    linear_rows(a.o_proj, heads_out, n, singles, ws.mix.data(), pool);
}

}  // namespace sluice::model
