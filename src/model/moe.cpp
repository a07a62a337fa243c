// The feed-forward block (models.md §1.6, §1.7, §3.6): a top-k router over E experts (softmax,
// renormalised when norm_topk_prob; or GLM's sigmoid with a selection bias and groups:
// kernels::RouterSpec; gpt-oss's logits with a bias of their own), routed SwiGLU experts (gpt-oss's with
// biases and a clamped activation), and a shared expert — for Qwen3-Next / Qwen3.5 scaled
// by σ(shared_expert_gate · x), for GLM added as it is. Non-MoE layers run a dense SwiGLU MLP.
//
// A batch's tokens — of every sequence in a batched forward — are grouped by expert (counting sort
// over expert ids), so each routed expert's weights are acquired and read once per batch and applied
// to all its tokens — the per-chunk expert union that makes prefill fast when experts stream from
// disk, and lets one expert read serve every sequence of a batched step.
//
// Exactness in a batch: an expert that gets one token of a step's 64-position block (positions
// [64 b, 64 b + 64) of its sequence) runs it through matvec, one that gets several a matmul. So each
// expert's rows are split by step and block: a lone token joins the expert's matvec_batch, the others
// its matmul (linear_rows), and every token gets what it gets alone. Each token's experts add into it
// in ascending expert order, as alone. Deciding per block rather than per step also makes a prompt's
// prefill give the same bits however it is cut into forwards at multiples of 64 positions (the matmul
// computes each row alone, and the DeltaNet's chunks are those 64-position blocks): a prefix restored
// from the engine's prefix cache then resumes a cold prefill exactly (runtime/prefix_cache.h).
#include <algorithm>
#include <cstring>

#include "core/assert.h"
#include "model/model.h"
#include "model/workspace.h"

namespace sluice::model {

namespace {

// Lone-token decisions are taken per block of this many sequence positions: the CPU DeltaNet's chunks
// (kernels/cpu/isa_table.h kDeltaChunk) and the prefix cache's blocks (runtime/prefix_cache.h).
constexpr int64_t kMoeBlockTokens = 64;

// What a routed expert adds to the plain SwiGLU (gpt-oss): its biases after gate, up and down (null: none)
// and the clamped activation (limit > 0).
struct ExpertExtras {
    const float* gate_bias = nullptr;  // [I]
    const float* up_bias = nullptr;    // [I]
    const float* down_bias = nullptr;  // [H]
    float limit = 0.0f, alpha = 1.0f;

    // Expert e's under plan P with the layer's weights m.
    static ExpertExtras of(const MoePlan& P, const MoeWeights& m, int32_t e) {
        ExpertExtras x;
        x.limit = P.swiglu_limit;
        x.alpha = P.swiglu_alpha;
        if (P.expert_bias) {
            x.gate_bias = m.expert_gate_bias.data() + static_cast<int64_t>(e) * P.expert_ffn;
            x.up_bias = m.expert_up_bias.data() + static_cast<int64_t>(e) * P.expert_ffn;
            x.down_bias =
                m.expert_down_bias.data() +
                static_cast<int64_t>(e) * (m.expert_down_bias.size() / static_cast<size_t>(P.experts));
        }
        return x;
    }
};

// The activation of `count` rows of I values: silu(g) · u, or the clamped variant.
void activate(const float* g, const float* u, int64_t count, const ExpertExtras& x, float* act) {
    if (x.limit > 0.0f)
        kernels::swiglu_clamped(g, u, count, x.alpha, x.limit, act);
    else
        kernels::swiglu(g, u, count, act);
}

// y[n, H] = down(silu(gate·x) ⊙ up·x) for a SwiGLU MLP with weights `w` (with a routed expert's
// extras, when given); the first `singles` rows take the matvec path (workspace.h, linear_rows).
void swiglu_mlp(const ExpertWeights& w, const float* x, int64_t n, int64_t singles, float* y, Workspace& ws,
                ThreadPool* pool, const ExpertExtras& extras = {}) {
    const int64_t I = w.gate.rows;
    float* g = grow(ws.expert_gate, n * I);
    float* u = grow(ws.expert_up, n * I);
    float* act = grow(ws.expert_act, n * I);
    linear_rows(w.gate, x, n, singles, g, pool);
    linear_rows(w.up, x, n, singles, u, pool);
    add_bias(g, n, I, extras.gate_bias);
    add_bias(u, n, I, extras.up_bias);
    activate(g, u, n * I, extras, act);
    linear_rows(w.down, act, n, singles, y, pool);
    add_bias(y, n, w.down.rows, extras.down_bias);
}

// The block of sequence positions a row's token is in (MoE lone-token decisions are taken per block).
int64_t block_of_row(const BatchLayout& b, int32_t part, int32_t row) {
    const BatchLayout::Part& p = b.parts[static_cast<size_t>(part)];
    return (p.state->n_past + (row - p.row0)) / kMoeBlockTokens;
}

// Orders expert e's `count` rows (ascending, so each step's are consecutive) as indices into them,
// in `order`: the rows that are their step's only token in their 64-position block for this expert
// (or of a decode_rows step, whose every row is alone) first, then the runs of two or more, each in
// row order. Returns how many come first.
int64_t order_expert_rows(const int32_t* rows, int64_t count, const BatchLayout& b, int32_t* order) {
    int64_t lone = 0, at = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int64_t j = 0; j < count;) {
            int64_t end = j + 1;
            const int32_t part = b.part_of_row[static_cast<size_t>(rows[j])];
            if (!b.parts[static_cast<size_t>(part)].decode_rows) {
                const int64_t block = block_of_row(b, part, rows[j]);
                while (end < count && b.part_of_row[static_cast<size_t>(rows[end])] == part &&
                       block_of_row(b, part, rows[end]) == block)
                    ++end;
            }
            if ((end - j == 1) == (pass == 0))
                for (int64_t i = j; i < end; ++i) order[at++] = static_cast<int32_t>(i);
            j = end;
        }
        if (pass == 0) lone = at;
    }
    return lone;
}

constexpr int64_t kDecodeGroupRows = 16;

// The routed experts of a decode step: each expert's rows are single tokens of distinct steps, so
// alone each takes matvec_batch (the rows in order, as order_expert_rows gives them), which
// matvec_jobs reproduces bit for bit; the weighted sums then go into `mix` in the same order (experts
// ascending, rows in order) as the per-expert path.
void routed_decode(const ExpertWeights* views, std::span<const int32_t> ids, const int32_t* offsets,
                   const int32_t* tok, const float* tok_w, const float* x, float* mix, int64_t H,
                   const MoePlan& P, const MoeWeights& m, Workspace& ws, ThreadPool* pool) {
    const auto count_ids = static_cast<int64_t>(ids.size());
    int64_t total = 0;
    for (int32_t e : ids) total += offsets[e + 1] - offsets[e];
    const int64_t I = views[0].gate.rows;
    float* in = grow(ws.expert_in, total * H);
    float* g = grow(ws.expert_gate, total * I);
    float* u = grow(ws.expert_up, total * I);
    float* act = grow(ws.expert_act, total * I);
    float* out = grow(ws.expert_out, total * H);
    kernels::MatvecJob* jobs = grow(ws.jobs, 2 * count_ids);
    int64_t at = 0;
    for (int64_t i = 0; i < count_ids; ++i) {
        const int64_t begin = offsets[ids[i]], count = offsets[ids[i] + 1] - begin;
        // One token: its row of x itself, so every expert it routes to shares one preparation of it.
        const float* xi = x + tok[begin] * H;
        if (count > 1) {
            for (int64_t j = 0; j < count; ++j)
                std::memcpy(in + (at + j) * H, x + tok[begin + j] * H, sizeof(float) * H);
            xi = in + at * H;
        }
        jobs[2 * i] = kernels::MatvecJob{&views[i].gate, xi, count, g + at * I};
        jobs[2 * i + 1] = kernels::MatvecJob{&views[i].up, xi, count, u + at * I};
        at += count;
    }
    kernels::matvec_jobs(jobs, 2 * count_ids, pool);
    const bool extras = P.expert_bias || P.swiglu_limit > 0.0f;
    if (!extras) {
        kernels::swiglu(g, u, total * I, act);
    } else {
        at = 0;
        for (int64_t i = 0; i < count_ids; ++i) {
            const int64_t count = offsets[ids[i] + 1] - offsets[ids[i]];
            const ExpertExtras x_e = ExpertExtras::of(P, m, ids[i]);
            add_bias(g + at * I, count, I, x_e.gate_bias);
            add_bias(u + at * I, count, I, x_e.up_bias);
            activate(g + at * I, u + at * I, count * I, x_e, act + at * I);
            at += count;
        }
    }
    at = 0;
    for (int64_t i = 0; i < count_ids; ++i) {
        const int64_t count = offsets[ids[i] + 1] - offsets[ids[i]];
        jobs[i] = kernels::MatvecJob{&views[i].down, act + at * I, count, out + at * H};
        at += count;
    }
    kernels::matvec_jobs(jobs, count_ids, pool);
    at = 0;
    for (int64_t i = 0; i < count_ids; ++i) {
        const int64_t begin = offsets[ids[i]], count = offsets[ids[i] + 1] - begin;
        if (extras) add_bias(out + at * H, count, H, ExpertExtras::of(P, m, ids[i]).down_bias);
        for (int64_t j = 0; j < count; ++j)
            kernels::axpy(tok_w[begin + j], out + (at + j) * H, H, mix + tok[begin + j] * H);
        at += count;
    }
}

// The routed experts of a prefill or multi-token step, `ids` (ascending) of one round: each expert
// computes as soon as its weights are readable — in the order its reads land (ExpertSource::acquire_each),
// so this layer's reads and compute overlap — and is released at once, its slot free for the next layer's
// prefetch. Each token must still get its experts' sums in ascending expert order (exactness, above): an
// expert that lands ahead of the lowest one not yet added (the frontier) keeps its output rows in a ring of
// 2n rows until the frontier passes it; one that does not fit there waits, its weights held, and computes
// when the frontier nears. Where every expert is at hand (resident weights) they come in order and nothing
// waits.
Status routed_each(ExpertSource* source, kernels::Activations activations, int64_t layer,
                   std::span<const int32_t> ids, ExpertWeights* views, const int32_t* offsets,
                   const int32_t* tok, const float* tok_w, const float* x, float* mix, int64_t H,
                   const MoePlan& P, const MoeWeights& m, Workspace& ws, ThreadPool* pool) {
    enum : int32_t { kWaiting = 0, kHeld, kInRing, kAdded };
    const auto count_ids = static_cast<int64_t>(ids.size());
    const int64_t ring_rows = 2 * ws.batch.rows;
    float* ring = grow(ws.expert_ring, ring_rows * H);
    int32_t* state = grow(ws.expert_state, count_ids);
    std::fill(state, state + count_ids, kWaiting);
    int64_t frontier = 0, held = 0;
    auto ring_row = [&](int64_t r) { return ring + (r % ring_rows) * H; };
    auto id = [&](int64_t i) { return ids[static_cast<size_t>(i)]; };
    // Computes expert i and releases it; adds its rows into mix (at the frontier) or keeps them in the
    // ring, at their places in the expert-grouped order (offsets) modulo the ring.
    auto compute = [&](int64_t i, bool add) {
        const int32_t e = id(i);
        const int64_t begin = offsets[e], count = offsets[e + 1] - offsets[e];
        for (WeightView* w : {&views[i].gate, &views[i].up, &views[i].down}) w->activations = activations;
        // Each step's rows that are alone in their block first (matvec), then the others (matmul).
        int32_t* order = grow(ws.expert_rows, count);
        int64_t lone = 1;
        order[0] = 0;
        if (count > 1) lone = order_expert_rows(tok + begin, count, ws.batch, order);
        float* in = grow(ws.expert_in, count * H);
        for (int64_t j = 0; j < count; ++j)
            std::memcpy(in + j * H, x + tok[begin + order[j]] * H, sizeof(float) * H);
        float* out = grow(ws.expert_out, count * H);
        swiglu_mlp(views[i], in, count, lone, out, ws, pool, ExpertExtras::of(P, m, e));
        source->release(layer, ids.subspan(static_cast<size_t>(i), 1));
        for (int64_t j = 0; j < count; ++j) {
            const int64_t r = begin + order[j];
            if (add)
                kernels::axpy(tok_w[r], out + j * H, H, mix + tok[r] * H);
            else
                std::memcpy(ring_row(r), out + j * H, sizeof(float) * H);
        }
        state[i] = add ? kAdded : kInRing;
    };
    // Whether expert i's rows fit the ring beside those of every expert from the frontier up to it.
    auto fits = [&](int64_t i) { return offsets[id(i) + 1] - offsets[id(frontier)] <= ring_rows; };
    // Adds what the frontier reaches (experts in the ring; held ones computed straight into mix), then
    // computes the held experts that now fit the ring.
    auto advance = [&] {
        while (frontier < count_ids && state[frontier] != kWaiting) {
            if (state[frontier] == kInRing) {
                const int32_t e = id(frontier);
                for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r)
                    kernels::axpy(tok_w[r], ring_row(r), H, mix + tok[r] * H);
                state[frontier] = kAdded;
            } else if (state[frontier] == kHeld) {
                --held;
                compute(frontier, true);
            }
            ++frontier;
        }
        for (int64_t i = frontier + 1; held > 0 && i < count_ids && fits(i); ++i) {
            if (state[i] != kHeld) continue;
            --held;
            compute(i, false);
        }
    };
    Status st = source->acquire_each(layer, ids, views, [&](size_t index) {
        if (ws.deferred_prefetch_layer >= 0) {  // this layer's experts hold their slots now
            source->prefetch(ws.deferred_prefetch_layer,
                             std::span<const int32_t>(ws.predicted_ids.data(),
                                                      static_cast<size_t>(ws.deferred_prefetch_count)),
                             /*chunk=*/true);
            ws.deferred_prefetch_layer = -1;
        }
        const auto i = static_cast<int64_t>(index);
        if (i == frontier) {
            compute(i, true);
            ++frontier;
            advance();
        } else if (fits(i)) {
            compute(i, false);
        } else {
            state[i] = kHeld;
            ++held;
        }
    });
    if (!st.is_ok()) {
        for (int64_t i = 0; i < count_ids; ++i)  // the held experts are still ours to release
            if (state[i] == kHeld) source->release(layer, ids.subspan(static_cast<size_t>(i), 1));
        return st;
    }
    advance();
    SLUICE_ASSERT(frontier == count_ids && held == 0);
    return Status::ok();
}

}  // namespace

void Model::moe_layer(const LayerPlan& plan, const LayerWeights& lw, int64_t layer, Workspace& ws,
                      ThreadPool* pool) const {
    const int64_t H = plan_.hidden;
    const int64_t n = ws.batch.rows, singles = ws.batch.singles;
    const float* x = ws.norm.data();  // [n, H]
    float* mix = ws.mix.data();       // [n, H] output

    if (plan.ffn == FfnKind::kDense) {
        swiglu_mlp(lw.dense_mlp, x, n, singles, mix, ws, pool);
        return;
    }
    const MoePlan& P = plan.moe;
    const MoeWeights& m = lw.moe_w;
    const int64_t E = P.experts, K = P.top_k;
    // A deferred next-layer prefetch (predict_next_experts) goes out with this layer's first expert, or not
    // at all (a failed acquire): never into a later forward.
    struct ClearDeferred {
        Workspace& ws;
        ~ClearDeferred() { ws.deferred_prefetch_layer = -1; }
    } clear_deferred{ws};

    float* logits = grow(ws.router, n * E);  // [n, E]
    linear_rows(m.router, x, n, singles, logits, pool);
    add_bias(logits, n, E, m.router_logit_bias.empty() ? nullptr : m.router_logit_bias.data());
    int32_t* ids = grow(ws.topk_ids, n * K);        // [n, K]
    float* weights = grow(ws.topk_weights, n * K);  // [n, K]
    const kernels::RouterSpec router = P.router_spec(m.router_bias.empty() ? nullptr : m.router_bias.data());
    for (int64_t t = 0; t < n; ++t)
        kernels::router_topk(logits + t * E, router, ids + t * K, weights + t * K);

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
    // A decode step (every row a sequence's only token, a few of them): every expert's gate and up in
    // one dispatch, every down in another, instead of three per expert.
    const bool decode = singles == n && n <= kDecodeGroupRows;
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
        if (decode) {
            Status st = experts_->acquire(layer, batch_ids, views);
            if (!st.is_ok()) {
                if (ws.moe_status.is_ok()) ws.moe_status = st;
                return;
            }
            for (int64_t i = 0; i < count_ids; ++i)  // a streamed expert's views come from its source
                for (WeightView* w : {&views[i].gate, &views[i].up, &views[i].down})
                    w->activations = activations_;
            routed_decode(views, batch_ids, offsets, tok, tok_w, x, mix, H, P, m, ws, pool);
            experts_->release(layer, batch_ids);
            continue;
        }
        Status st = routed_each(experts_, activations_, layer, batch_ids, views, offsets, tok, tok_w, x, mix,
                                H, P, m, ws, pool);
        if (!st.is_ok()) {
            if (ws.moe_status.is_ok()) ws.moe_status = st;
            return;
        }
    }

    if (P.shared_expert) {
        float* out = grow(ws.expert_out, n * H);
        swiglu_mlp(m.shared, x, n, singles, out, ws, pool);
        if (!P.shared_gate) {
            for (int64_t i = 0; i < n * H; ++i) mix[i] += out[i];
            return;
        }
        float* sg = grow(ws.expert_in, n);  // [n, 1] shared-expert gate logits
        linear_rows(m.shared_gate, x, n, singles, sg, pool);
        for (int64_t t = 0; t < n; ++t) kernels::axpy(sigmoid(sg[t]), out + t * H, H, mix + t * H);
    }
}

// Prefetch (lessons.md: next-layer experts are predictable from the current hidden state): apply
// layer+1's post-attention norm and router to the residual stream after layer's mixer, and tell
// the expert source which experts that predicts, while layer's own experts compute.
void Model::predict_next_experts(int64_t layer, const float* x, Workspace& ws, ThreadPool* pool) const {
    const int64_t n = ws.batch.rows;
    // The main decoder's last layer predicts nothing (the MTP layer runs in a forward of its own).
    if (layer + 1 >= config_.n_layers || !experts_->wants_prefetch()) return;
    const LayerPlan& plan = plan_.layers[static_cast<size_t>(layer + 1)];
    const LayerWeights& next = weights_.layers[static_cast<size_t>(layer + 1)];
    if (plan.ffn != FfnKind::kMoe) return;
    const int64_t H = plan_.hidden, E = plan.moe.experts, K = plan.moe.top_k;
    float* normed = grow(ws.tmp, n * H);
    for (int64_t t = 0; t < n; ++t)
        kernels::rms_norm(x + t * H, next.post_norm.data(), H, plan.norm_eps, normed + t * H);
    float* logits = grow(ws.router, n * E);
    linear_rows(next.moe_w.router, normed, n, ws.batch.singles, logits, pool);
    const std::vector<float>& logit_bias = next.moe_w.router_logit_bias;
    add_bias(logits, n, E, logit_bias.empty() ? nullptr : logit_bias.data());
    int32_t* ids = grow(ws.topk_ids, n * K);
    float* weights = grow(ws.topk_weights, n * K);
    int32_t* predicted = grow(ws.predicted_ids, E);
    int32_t* seen = grow(ws.expert_fill, E);
    std::fill(seen, seen + E, 0);
    int64_t count = 0;
    const std::vector<float>& bias = next.moe_w.router_bias;
    const kernels::RouterSpec router = plan.moe.router_spec(bias.empty() ? nullptr : bias.data());
    for (int64_t t = 0; t < n; ++t) {
        kernels::router_topk(logits + t * E, router, ids + t * K, weights + t * K);
        for (int64_t j = 0; j < K; ++j)
            if (seen[ids[t * K + j]]++ == 0) predicted[count++] = ids[t * K + j];
    }
    // A multi-token step (a prefill chunk) routes to most of this layer's experts, and a cache little larger
    // than one layer's union would let the next layer's prefetch take the slots this layer is about to
    // claim, then evict those reads before they are used: the hint waits until this layer's experts hold
    // their slots (routed_each), and the source starts its reads as this layer releases them. Most-
    // predicted first, since a source drops the reads it has not started when the layer comes.
    const LayerPlan& here = plan_.layers[static_cast<size_t>(layer)];
    if (here.ffn == FfnKind::kMoe && !(ws.batch.singles == n && n <= kDecodeGroupRows)) {
        std::stable_sort(predicted, predicted + count,
                         [&](int32_t a, int32_t b) { return seen[a] > seen[b]; });
        ws.deferred_prefetch_layer = layer + 1;
        ws.deferred_prefetch_count = count;
        return;
    }
    experts_->prefetch(layer + 1, std::span<const int32_t>(predicted, static_cast<size_t>(count)));
}

}  // namespace sluice::model
