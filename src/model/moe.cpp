// The feed-forward block (models.md §1.6, §1.7, §3.6): softmax top-k router over E experts
// (renormalised when norm_topk_prob), routed SwiGLU experts, and for Qwen3-Next / Qwen3.5 a shared
// expert scaled by σ(shared_expert_gate · x). Non-MoE layers run a dense SwiGLU MLP.
//
// A batch's tokens are grouped by expert (counting sort over expert ids), so each routed expert's
// weights are read once per batch and applied to all its tokens as one matmul — the per-chunk
// expert union that makes prefill fast when experts stream from disk.
#include <algorithm>
#include <cstring>

#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

namespace {

// y[n, H] = down(silu(gate·x) ⊙ up·x) for a SwiGLU MLP with weights `w`.
void swiglu_mlp(const ExpertWeights& w, const float* x, int64_t n, float* y, Workspace& ws,
                ThreadPool* pool) {
    const int64_t I = w.gate.rows;
    float* g = grow(ws.expert_gate, n * I);
    float* u = grow(ws.expert_up, n * I);
    float* act = grow(ws.expert_act, n * I);
    linear(w.gate, x, n, g, pool);
    linear(w.up, x, n, u, pool);
    kernels::swiglu(g, u, n * I, act);
    linear(w.down, act, n, y, pool);
}

}  // namespace

void Model::moe_layer(const LayerPlan& plan, const LayerWeights& lw, int64_t layer, int64_t n, Workspace& ws,
                      ThreadPool* pool) const {
    const int64_t H = plan_.hidden;
    const float* x = ws.norm.data();  // [n, H]
    float* mix = ws.mix.data();       // [n, H] output

    if (plan.ffn == FfnKind::kDense) {
        swiglu_mlp(lw.dense_mlp, x, n, mix, ws, pool);
        return;
    }
    const MoePlan& P = plan.moe;
    const MoeWeights& m = lw.moe_w;
    const int64_t E = P.experts, K = P.top_k;

    float* logits = grow(ws.router, n * E);  // [n, E]
    linear(m.router, x, n, logits, pool);
    int32_t* ids = grow(ws.topk_ids, n * K);        // [n, K]
    float* weights = grow(ws.topk_weights, n * K);  // [n, K]
    for (int64_t t = 0; t < n; ++t)
        kernels::router_topk(logits + t * E, E, K, P.renormalize, ids + t * K, weights + t * K);

    // Group (token, weight) pairs by expert: counts → offsets → fill.
    int32_t* offsets = grow(ws.expert_offsets, E + 1);
    std::fill(offsets, offsets + E + 1, 0);
    for (int64_t i = 0; i < n * K; ++i) offsets[ids[i] + 1]++;
    for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
    int32_t* tok = grow(ws.expert_tokens, n * K);
    float* tok_w = grow(ws.expert_token_weights, n * K);
    {
        int32_t* fill = grow(ws.expert_fill, E);
        std::copy(offsets, offsets + E, fill);
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t j = 0; j < K; ++j) {
                const int32_t e = ids[t * K + j];
                tok[fill[e]] = static_cast<int32_t>(t);
                tok_w[fill[e]] = weights[t * K + j];
                fill[e]++;
            }
        }
    }

    std::fill(mix, mix + n * H, 0.0f);
    // The batch's expert union, acquired from the expert source in rounds of at most max_pinned()
    // (a cache smaller than one layer's union still works, just with more reads).
    int32_t* used = grow(ws.expert_ids, E);
    int64_t n_used = 0;
    for (int64_t e = 0; e < E; ++e)
        if (offsets[e + 1] > offsets[e]) used[n_used++] = static_cast<int32_t>(e);
    ExpertWeights* views = grow(ws.expert_views, n_used);
    const int64_t round = std::max<int64_t>(1, std::min<int64_t>(n_used, experts_->max_pinned()));
    for (int64_t first = 0; first < n_used; first += round) {
        const int64_t count_ids = std::min(round, n_used - first);
        std::span<const int32_t> batch_ids(used + first, static_cast<size_t>(count_ids));
        Status st = experts_->acquire(layer, batch_ids, views);
        if (!st.is_ok()) {
            if (ws.moe_status.is_ok()) ws.moe_status = st;
            return;
        }
        for (int64_t i = 0; i < count_ids; ++i) {
            const int32_t e = batch_ids[i];
            const int64_t begin = offsets[e], count = offsets[e + 1] - offsets[e];
            float* in = grow(ws.expert_in, count * H);
            for (int64_t j = 0; j < count; ++j)
                std::memcpy(in + j * H, x + tok[begin + j] * H, sizeof(float) * H);
            float* out = grow(ws.expert_out, count * H);
            swiglu_mlp(views[i], in, count, out, ws, pool);
            for (int64_t j = 0; j < count; ++j)
                kernels::axpy(tok_w[begin + j], out + j * H, H, mix + tok[begin + j] * H);
        }
        experts_->release(layer, batch_ids);
    }

    if (P.shared_expert) {
        float* out = grow(ws.expert_out, n * H);
        swiglu_mlp(m.shared, x, n, out, ws, pool);
        if (!P.shared_gate) {
            for (int64_t i = 0; i < n * H; ++i) mix[i] += out[i];
            return;
        }
        float* sg = grow(ws.expert_in, n);  // [n, 1] shared-expert gate logits
        linear(m.shared_gate, x, n, sg, pool);
        for (int64_t t = 0; t < n; ++t) kernels::axpy(sigmoid(sg[t]), out + t * H, H, mix + t * H);
    }
}

// Prefetch (lessons.md: next-layer experts are predictable from the current hidden state): apply
// layer+1's post-attention norm and router to the residual stream after layer's mixer, and tell
// the expert source which experts that predicts, while layer's own experts compute.
void Model::predict_next_experts(int64_t layer, const float* x, int64_t n, Workspace& ws,
                                 ThreadPool* pool) const {
    if (layer + 1 >= static_cast<int64_t>(plan_.layers.size()) || !experts_->wants_prefetch()) return;
    const LayerPlan& plan = plan_.layers[static_cast<size_t>(layer + 1)];
    const LayerWeights& next = weights_.layers[static_cast<size_t>(layer + 1)];
    if (plan.ffn != FfnKind::kMoe) return;
    const int64_t H = plan_.hidden, E = plan.moe.experts, K = plan.moe.top_k;
    float* normed = grow(ws.tmp, n * H);
    for (int64_t t = 0; t < n; ++t)
        kernels::rms_norm(x + t * H, next.post_norm.data(), H, plan.norm_eps, normed + t * H);
    float* logits = grow(ws.router, n * E);
    linear(next.moe_w.router, normed, n, logits, pool);
    int32_t* ids = grow(ws.topk_ids, n * K);
    float* weights = grow(ws.topk_weights, n * K);
    int32_t* predicted = grow(ws.predicted_ids, E);
    int32_t* seen = grow(ws.expert_fill, E);
    std::fill(seen, seen + E, 0);
    int64_t count = 0;
    for (int64_t t = 0; t < n; ++t) {
        kernels::router_topk(logits + t * E, E, K, plan.moe.renormalize, ids + t * K, weights + t * K);
        for (int64_t j = 0; j < K; ++j) {
            if (!seen[ids[t * K + j]]) {
                seen[ids[t * K + j]] = 1;
                predicted[count++] = ids[t * K + j];
            }
        }
    }
    experts_->prefetch(layer + 1, std::span<const int32_t>(predicted, static_cast<size_t>(count)));
}

}  // namespace sluice::model
