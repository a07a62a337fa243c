// Reference (oracle) elementwise and small ops: norms, RoPE, SwiGLU, axpy, router, conv1d and
// attention, written straight from models.md §1 and §3.5.3. Clarity over speed: double
// accumulators for reductions, std::exp/std::sin, no threading (pool ignored). attention and
// router_topk allocate small std::vectors per call, which the fast path must not do.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels::reference {
namespace {

double silu(double x) {
    return x / (1.0 + std::exp(-x));
}

float rope_angle(int64_t position, int64_t i, int64_t rot_dim, float theta) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
    const float inv_freq = 1.0f / static_cast<float>(std::pow(static_cast<double>(theta), exponent));
    return static_cast<float>(position) * inv_freq;
}

}  // namespace

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * weight[i]);
}

void rms_norm_gated(const float* x, const float* z, const float* weight, int64_t n, float eps, float* y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * weight[i] * silu(z[i]));
}

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position, float theta) {
    SLUICE_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim);
    const int64_t half = rot_dim / 2;
    // Frequencies and angles in f32 exactly as HF computes them (inv_freq = 1/theta^(2i/R) in f32,
    // angle = f32(position) * inv_freq rounded to f32); at long contexts this rounding of the angle
    // is part of the model's behaviour, so the oracle reproduces it instead of using doubles.
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const float angle = rope_angle(position, i, rot_dim, theta);
            const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
            const double a = v[i], b = v[i + half];
            v[i] = static_cast<float>(a * c - b * s);
            v[i + half] = static_cast<float>(b * c + a * s);
        }
    }
}

void rope_neox_table(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position,
                     const float* inv_freq, float mscale) {
    SLUICE_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim);
    const int64_t half = rot_dim / 2;
    // As transformers: angle = f32(position) · inv_freq in f32; cos and sin (f32) times the factor.
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(position) * inv_freq[i];
            const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * mscale;
            const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * mscale;
            const double a = v[i], b = v[i + half];
            v[i] = static_cast<float>(a * c - b * s);
            v[i + half] = static_cast<float>(b * c + a * s);
        }
    }
}

void attention(const float* q, const float* k, const float* v, int64_t n_q, int64_t start_pos,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               ThreadPool* /*pool*/, const AttentionExtras& extras) {
    SLUICE_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && extras.window >= 0);
    const int64_t rep = n_heads / n_kv_heads;
    const int64_t kv_stride = n_kv_heads * head_dim;  // one position's row
    std::vector<double> scores(static_cast<size_t>(start_pos + n_q));
    for (int64_t t = 0; t < n_q; ++t) {
        const int64_t P = start_pos + t;
        // causal: positions lo..P; a sliding window keeps its last `window` (modeling_gpt_oss.py's
        // mask: kv_idx > q_idx - sliding_window).
        const int64_t lo = extras.window > 0 ? std::max<int64_t>(0, P - extras.window + 1) : 0;
        for (int64_t h = 0; h < n_heads; ++h) {
            const int64_t kvh = h / rep;
            const float* qh = q + (t * n_heads + h) * head_dim;
            double max_score = -INFINITY;
            for (int64_t s = lo; s <= P; ++s) {
                const float* ks = k + s * kv_stride + kvh * head_dim;
                double dot = 0.0;
                for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * ks[d];
                scores[s] = dot * scale;
                max_score = std::max(max_score, scores[s]);
            }
            // The sink: one more logit in the softmax (unscaled), whose probability is dropped —
            // modeling_gpt_oss.py's cat([attn_weights, sinks], -1), softmax, [..., :-1].
            const double sink = extras.sinks != nullptr ? extras.sinks[h] : -INFINITY;
            max_score = std::max(max_score, sink);
            double sum = extras.sinks != nullptr ? std::exp(sink - max_score) : 0.0;
            for (int64_t s = lo; s <= P; ++s) {
                scores[s] = std::exp(scores[s] - max_score);
                sum += scores[s];
            }
            float* oh = out + (t * n_heads + h) * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) {
                double acc = 0.0;
                for (int64_t s = lo; s <= P; ++s) acc += scores[s] * v[s * kv_stride + kvh * head_dim + d];
                oh[d] = static_cast<float>(acc / sum);
            }
        }
    }
}

void conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                 const float* state, float* state_out, float* y) {
    SLUICE_ASSERT(kernel >= 1);
    const int64_t hist = kernel - 1;
    // The input sequence seen by the conv: hist state rows followed by the n new rows.
    auto input = [&](int64_t p, int64_t c) -> float {  // p indexes that concatenation
        return p < hist ? state[p * channels + c] : x[(p - hist) * channels + c];
    };
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < channels; ++c) {
            double acc = 0.0;
            for (int64_t i = 0; i < kernel; ++i)
                acc += static_cast<double>(weight[c * kernel + i]) * input(t + i, c);
            y[t * channels + c] = static_cast<float>(silu(acc));
        }
    }
    // New state: the last hist entries of the concatenation (computed before overwriting).
    std::vector<float> next(static_cast<size_t>(hist * channels));
    for (int64_t p = 0; p < hist; ++p)
        for (int64_t c = 0; c < channels; ++c) next[p * channels + c] = input(n + p, c);
    std::copy(next.begin(), next.end(), state_out);
}

void router_topk(const float* logits, const RouterSpec& r, int32_t* ids, float* weights) {
    const int64_t E = r.n_experts, k = r.k;
    SLUICE_ASSERT(k >= 1 && k <= E);
    // The choosing score (double for softmax; f32 for sigmoid, as the references compute it) and the
    // weight of each expert.
    std::vector<double> choice(static_cast<size_t>(E)), weight(static_cast<size_t>(E));
    if (r.scoring == RouterSpec::Scoring::kSoftmax) {
        double max_logit = -INFINITY;
        for (int64_t e = 0; e < E; ++e) max_logit = std::max(max_logit, static_cast<double>(logits[e]));
        double sum = 0.0;
        for (int64_t e = 0; e < E; ++e) {
            weight[e] = std::exp(logits[e] - max_logit);
            sum += weight[e];
        }
        for (int64_t e = 0; e < E; ++e) choice[e] = weight[e] /= sum;
    } else {
        for (int64_t e = 0; e < E; ++e) {
            const float s = 1.0f / (1.0f + std::exp(-logits[e]));
            weight[e] = s;
            choice[e] = static_cast<float>(s + (r.bias != nullptr ? r.bias[e] : 0.0f));
        }
        if (r.groups > 1) {
            SLUICE_ASSERT(E % r.groups == 0 && E / r.groups >= 2 && r.topk_groups >= 1 &&
                          r.topk_groups <= r.groups);
            const int64_t per = E / r.groups;
            std::vector<double> group_score(static_cast<size_t>(r.groups));
            for (int64_t g = 0; g < r.groups; ++g) {
                std::vector<double> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
                std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<>());
                group_score[g] =
                    static_cast<float>(static_cast<float>(members[0]) + static_cast<float>(members[1]));
            }
            std::vector<int64_t> groups(static_cast<size_t>(r.groups));
            std::iota(groups.begin(), groups.end(), 0);
            std::stable_sort(groups.begin(), groups.end(),
                             [&](int64_t a, int64_t b) { return group_score[a] > group_score[b]; });
            std::vector<bool> kept(static_cast<size_t>(r.groups), false);
            for (int64_t j = 0; j < r.topk_groups; ++j) kept[groups[j]] = true;
            for (int64_t e = 0; e < E; ++e)
                if (!kept[e / per]) choice[e] = -INFINITY;
        }
    }
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
    double selected = 0.0;
    for (int64_t j = 0; j < k; ++j) selected += weight[order[j]];
    if (r.scoring == RouterSpec::Scoring::kSigmoid) selected += 1e-20;
    for (int64_t j = 0; j < k; ++j) {
        ids[j] = order[j];
        const double w = r.renormalize ? weight[order[j]] / selected : weight[order[j]];
        weights[j] = static_cast<float>(w * r.scale);
    }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(silu(gate[i]) * up[i]);
}

void swiglu_clamped(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
        out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
    }
}

void axpy(float a, const float* x, int64_t n, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace sluice::kernels::reference
