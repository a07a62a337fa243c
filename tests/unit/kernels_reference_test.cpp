// Hand-checked cases for the reference kernels (kernels::reference::*), so the oracle the fast
// paths are compared against is itself verified against values worked out by hand, and the
// recurrent and chunked Gated DeltaNet references are checked against each other; gpt-oss's attention
// (sliding window, sinks) against transformers' eager formulation written out in the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace sluice::kernels {
namespace {

TEST(KernelsReference, Bf16AndF16Conversions) {
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(-2.5f), 0xc020);
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0).
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, rounds up to even
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to infinity
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even (zero)
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 units: tie to even (2)
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
    // Every f16 value round-trips through f32.
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
        ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
    }
}

TEST(KernelsReference, WeightViewHelpers) {
    WeightView w;
    w.cols = 64;
    w.type = WeightType::kQ4;
    EXPECT_EQ(w.row_bytes(), 32u);
    w.type = WeightType::kQ8;
    EXPECT_EQ(w.row_bytes(), 64u);
    w.type = WeightType::kBF16;
    EXPECT_EQ(w.row_bytes(), 128u);
    w.type = WeightType::kF32;
    EXPECT_EQ(w.row_bytes(), 256u);
    EXPECT_STREQ(weight_type_name(WeightType::kQ4), "Q4");
}

TEST(KernelsReference, Q4DequantOfKnownWords) {
    // One row of 32 inputs, group size 32: codes 0..7 in word 0 (LSB first), then 8..15, then
    // 0xF in every nibble, then zeros.
    const uint32_t words[4] = {0x76543210u, 0xfedcba98u, 0xffffffffu, 0u};
    const uint16_t scale = f32_to_bf16(0.5f), bias = f32_to_bf16(-1.0f);
    WeightView w{WeightType::kQ4, 1, 32, words, &scale, &bias, ScaleType::kBF16, 32};
    float out[32];
    reference::dequantize_row(w, 0, out);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 0.5f * i - 1.0f) << i;
    for (int i = 16; i < 24; ++i) EXPECT_EQ(out[i], 6.5f) << i;
    for (int i = 24; i < 32; ++i) EXPECT_EQ(out[i], -1.0f) << i;
    // matvec with x = e_3 + e_17 picks w[3] + w[17] = 0.5 + 6.5.
    float x[32] = {};
    x[3] = 1.0f;
    x[17] = 1.0f;
    float y = 0.0f;
    reference::matvec(w, x, &y, nullptr);
    EXPECT_FLOAT_EQ(y, 7.0f);
}

TEST(KernelsReference, Q8DequantOfKnownWords) {
    // Two rows of 32 inputs, group size 16 (f32 scales): row r, input i has code 4·word + byte.
    std::vector<uint32_t> words(16);
    for (int w = 0; w < 16; ++w) words[w] = 0x03020100u + 0x04040404u * static_cast<uint32_t>(w % 8);
    const float scales[4] = {1.0f, 2.0f, 0.25f, -1.0f}, biases[4] = {0.0f, 1.0f, -2.0f, 3.0f};
    WeightView w{WeightType::kQ8, 2, 32, words.data(), scales, biases, ScaleType::kF32, 16};
    float out[32];
    reference::dequantize_row(w, 1, out);
    for (int i = 0; i < 32; ++i) {
        const float s = i < 16 ? 0.25f : -1.0f, b = i < 16 ? -2.0f : 3.0f;
        EXPECT_EQ(out[i], s * static_cast<float>(i) + b) << i;
    }
}

TEST(KernelsReference, RmsNormAndGatedNorm) {
    const float x[4] = {1, -2, 3, -4};  // mean square 7.5
    const float wt[4] = {1, 2, 0.5f, 1};
    float y[4];
    reference::rms_norm(x, wt, 4, 0.0f, y);
    const float inv = 1.0f / std::sqrt(7.5f);
    EXPECT_NEAR(y[0], 1 * inv, 1e-6);
    EXPECT_NEAR(y[1], -4 * inv, 1e-6);
    EXPECT_NEAR(y[2], 1.5f * inv, 1e-6);
    const float z[4] = {0, 1, -1, 20};
    reference::rms_norm_gated(x, z, wt, 4, 0.0f, y);
    EXPECT_NEAR(y[0], 0.0f, 1e-7);  // silu(0) = 0
    EXPECT_NEAR(y[1], -4 * inv * (1.0f / (1.0f + std::exp(-1.0f))), 1e-6);
    EXPECT_NEAR(y[3], -4 * inv * 20.0f / (1.0f + std::exp(-20.0f)), 1e-5);
}

TEST(KernelsReference, RopeOfKnownVector) {
    // head_dim 6, rot_dim 4 (pairs (0,2) and (1,3)), theta 100, position 2: f0 = 1, f1 = 0.1.
    float x[6] = {1, 2, 3, 4, 5, 6};
    reference::rope_neox(x, 1, 6, 4, 2, 100.0f);
    const double c0 = std::cos(2.0), s0 = std::sin(2.0), c1 = std::cos(0.2), s1 = std::sin(0.2);
    EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-6);
    EXPECT_NEAR(x[2], 3 * c0 + 1 * s0, 1e-6);
    EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-6);
    EXPECT_NEAR(x[3], 4 * c1 + 2 * s1, 1e-6);
    EXPECT_EQ(x[4], 5.0f);
    EXPECT_EQ(x[5], 6.0f);
    float y[4] = {1, 2, 3, 4};  // position 0 is the identity
    reference::rope_neox(y, 1, 4, 4, 0, 10000.0f);
    EXPECT_EQ(y[1], 2.0f);
    EXPECT_EQ(y[3], 4.0f);
}

TEST(KernelsReference, RouterTopkWithAndWithoutRenormalisation) {
    const float logits[5] = {0.0f, std::log(4.0f), std::log(2.0f), std::log(2.0f), std::log(1.0f)};
    // p = {1, 4, 2, 2, 1} / 10; top-3 = expert 1, then the tie 2 before 3.
    int32_t ids[3];
    float w[3];
    RouterSpec r;
    r.n_experts = 5;
    r.k = 3;
    reference::router_topk(logits, r, ids, w);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 2);
    EXPECT_EQ(ids[2], 3);
    EXPECT_NEAR(w[0], 0.4f, 1e-6);
    EXPECT_NEAR(w[1], 0.2f, 1e-6);
    EXPECT_NEAR(w[2], 0.2f, 1e-6);
    r.renormalize = true;
    reference::router_topk(logits, r, ids, w);
    EXPECT_NEAR(w[0], 0.5f, 1e-6);
    EXPECT_NEAR(w[1], 0.25f, 1e-6);
    EXPECT_NEAR(w[2], 0.25f, 1e-6);
    r.scale = 2.5f;  // routed_scaling_factor multiplies after the renormalisation
    reference::router_topk(logits, r, ids, w);
    EXPECT_NEAR(w[0], 1.25f, 1e-6);
}

// GLM-4.5 / DeepSeek-V3 routing: the bias chooses, the sigmoid weighs; groups scored by their top two.
TEST(KernelsReference, SigmoidRouterWithBiasAndGroups) {
    auto logit = [](double s) { return static_cast<float>(std::log(s / (1.0 - s))); };  // σ⁻¹
    // Sigmoid scores s and a bias that promotes expert 5 over expert 0.
    const double s[8] = {0.9, 0.2, 0.3, 0.4, 0.8, 0.1, 0.7, 0.6};
    float logits[8], bias[8] = {0, 0, 0, 0, 0, 0.5f, 0, 0};
    for (int e = 0; e < 8; ++e) logits[e] = logit(s[e]);
    RouterSpec r;
    r.scoring = RouterSpec::Scoring::kSigmoid;
    r.n_experts = 8;
    r.k = 2;
    r.bias = bias;
    int32_t ids[2];
    float w[2];
    reference::router_topk(logits, r, ids, w);
    // c = s + bias = {.9 .2 .3 .4 .8 .6 .7 .6}: experts 0 and 4; weights are s, not c.
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 4);
    EXPECT_NEAR(w[0], 0.9f, 1e-6);
    EXPECT_NEAR(w[1], 0.8f, 1e-6);
    bias[0] = -0.5f;  // c[0] = 0.4: now 4 (0.8), then 6 (0.7)
    reference::router_topk(logits, r, ids, w);
    EXPECT_EQ(ids[0], 4);
    EXPECT_EQ(ids[1], 6);
    EXPECT_NEAR(w[1], 0.7f, 1e-6);
    // Four groups of two; group scores (top two of c) = {.6, .7, 1.4, 1.3}: the best two groups are
    // 2 and 3, so expert 5 (c .6) competes and expert 1... is masked to 0.
    r.groups = 4;
    r.topk_groups = 2;
    r.k = 3;
    r.renormalize = true;
    r.scale = 2.0f;
    int32_t ids3[3];
    float w3[3];
    reference::router_topk(logits, r, ids3, w3);
    EXPECT_EQ(ids3[0], 4);
    EXPECT_EQ(ids3[1], 6);
    EXPECT_TRUE(ids3[2] == 5 || ids3[2] == 7) << ids3[2];  // c 0.6 each: the lower index first
    EXPECT_EQ(ids3[2], 5);
    const double sum = 0.8 + 0.7 + 0.1;
    EXPECT_NEAR(w3[0], 2.0 * 0.8 / sum, 1e-6);
    EXPECT_NEAR(w3[2], 2.0 * 0.1 / sum, 1e-6);
    // Masked experts are out (−∞, as transformers 5 and llama.cpp mask them). c = s − 0.9 =
    // {0, −.7, −.6, −.5, −.1, −.8, −.2, −.3}: groups score {−.7, −1.1, −.9, −.5}, so groups 3 and 0 are
    // kept and the picks are 0, 6, 7 — not expert 4 (−.1), whose group is out; masking with 0.0
    // instead would have picked the masked experts over 6 and 7.
    const float neg[8] = {-0.9f, -0.9f, -0.9f, -0.9f, -0.9f, -0.9f, -0.9f, -0.9f};
    r.bias = neg;
    r.k = 3;
    reference::router_topk(logits, r, ids3, w3);
    EXPECT_EQ(std::vector<int32_t>(ids3, ids3 + 3), (std::vector<int32_t>{0, 6, 7}));
}

TEST(KernelsReference, SwigluAndAxpy) {
    const float g[2] = {0.0f, 2.0f}, u[2] = {3.0f, -1.0f};
    float o[2];
    reference::swiglu(g, u, 2, o);
    EXPECT_EQ(o[0], 0.0f);
    EXPECT_NEAR(o[1], -2.0f / (1.0f + std::exp(-2.0f)), 1e-6);
    float y[2] = {1, 1};
    reference::axpy(2.0f, u, 2, y);
    EXPECT_EQ(y[0], 7.0f);
    EXPECT_EQ(y[1], -1.0f);
}

TEST(KernelsReference, ConvOfKnownSequence) {
    // One channel, K = 3, weights {1, 10, 100} (100 multiplies the current token), state {1, 2}.
    const float wt[3] = {1, 10, 100};
    float state[2] = {1, 2};
    const float x[2] = {3, 4};
    float y[2];
    reference::conv1d_silu(x, 2, 1, 3, wt, state, state, y);
    auto silu = [](double v) { return v / (1 + std::exp(-v)); };
    EXPECT_NEAR(y[0], silu(1 + 20 + 300), 1e-3);
    EXPECT_NEAR(y[1], silu(2 + 30 + 400), 1e-3);
    EXPECT_EQ(state[0], 3.0f);
    EXPECT_EQ(state[1], 4.0f);
    const float x2[1] = {-0.01f};
    reference::conv1d_silu(x2, 1, 1, 3, wt, state, state, y);
    EXPECT_NEAR(y[0], silu(3 + 40 - 1), 1e-4);
    EXPECT_EQ(state[0], 4.0f);
    EXPECT_EQ(state[1], -0.01f);
}

TEST(KernelsReference, AttentionOfKnownCase) {
    // 1 head, head_dim 2, two cached positions, one new query at position 1 (causal: both keys).
    const float q[2] = {1, 0}, k[4] = {0, 0, 1, 0}, v[4] = {1, 2, 3, 4};
    float out[2];
    reference::attention(q, k, v, 1, 1, 1, 1, 2, std::log(3.0f), out, nullptr);
    // scores {0, ln 3} -> weights {1/4, 3/4}
    EXPECT_NEAR(out[0], 0.25f * 1 + 0.75f * 3, 1e-6);
    EXPECT_NEAR(out[1], 0.25f * 2 + 0.75f * 4, 1e-6);
    // Two queries from position 0: the first sees only key 0.
    const float q2[4] = {1, 0, 1, 0};
    float out2[4];
    reference::attention(q2, k, v, 2, 0, 1, 1, 2, std::log(3.0f), out2, nullptr);
    EXPECT_NEAR(out2[0], 1.0f, 1e-6);
    EXPECT_NEAR(out2[1], 2.0f, 1e-6);
    EXPECT_NEAR(out2[2], 2.5f, 1e-6);
}

// gpt-oss's terms by hand: one head, head_dim 2, scores {0, ln 3} as above.
TEST(KernelsReference, AttentionWindowAndSinkOfKnownCase) {
    const float q[2] = {1, 0}, k[4] = {0, 0, 1, 0}, v[4] = {1, 2, 3, 4};
    float out[2];
    // A window of 1: the query at position 1 sees only itself.
    reference::attention(q, k, v, 1, 1, 1, 1, 2, std::log(3.0f), out, nullptr, {1, nullptr});
    EXPECT_NEAR(out[0], 3.0f, 1e-6);
    EXPECT_NEAR(out[1], 4.0f, 1e-6);
    // A sink of ln 4, not scaled: weights exp{0, ln 3, ln 4} / 8 = {1/8, 3/8, (4/8 dropped)}.
    const float sink = std::log(4.0f);
    reference::attention(q, k, v, 1, 1, 1, 1, 2, std::log(3.0f), out, nullptr, {0, &sink});
    EXPECT_NEAR(out[0], (1.0f * 1 + 3.0f * 3) / 8, 1e-6);
    EXPECT_NEAR(out[1], (1.0f * 2 + 3.0f * 4) / 8, 1e-6);
    // Both: key 1 alone against the sink: weights {3/7, (4/7 dropped)}.
    reference::attention(q, k, v, 1, 1, 1, 1, 2, std::log(3.0f), out, nullptr, {1, &sink});
    EXPECT_NEAR(out[0], 3.0f * 3 / 7, 1e-6);
    EXPECT_NEAR(out[1], 3.0f * 4 / 7, 1e-6);
}

// The reference against transformers' eager_attention_forward of modeling_gpt_oss.py, written out
// as it is there (in double): scores q·kᵀ·scaling, the causal and sliding mask (kv_idx > q_idx −
// sliding_window), cat with the head's sink, minus the row max, softmax, the sink's column dropped,
// times v. Over GQA rep 1 and 3, windows 0 (none), 1, 3 and longer than the context, sinks none,
// moderate, very negative (no effect) and large (the sink takes nearly all the mass), several
// queries after a prefix.
TEST(KernelsReference, AttentionWindowAndSinksMatchTransformers) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto random = [&](int64_t n) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& e : x) e = nd(rng);
        return x;
    };
    const int64_t hd = 16;
    const float scaling = 0.25f;
    for (const auto& hp : {std::array<int64_t, 2>{2, 2}, std::array<int64_t, 2>{6, 2}})
        for (const auto& qs :
             {std::array<int64_t, 2>{1, 0}, std::array<int64_t, 2>{4, 5}, std::array<int64_t, 2>{9, 0}})
            for (int64_t window : {0, 1, 3, 100})
                for (int sink_kind = 0; sink_kind < 4; ++sink_kind) {
                    const int64_t nh = hp[0], nkv = hp[1], n_q = qs[0], start = qs[1], rows = start + n_q;
                    const auto q = random(n_q * nh * hd), k = random(rows * nkv * hd),
                               v = random(rows * nkv * hd);
                    std::vector<float> sinks(static_cast<size_t>(nh));
                    for (int64_t h = 0; h < nh; ++h)
                        sinks[h] = sink_kind == 1   ? 0.5f * static_cast<float>(h) - 1.0f
                                   : sink_kind == 2 ? -1e4f
                                                    : 40.0f + static_cast<float>(h);
                    const AttentionExtras extras{window, sink_kind == 0 ? nullptr : sinks.data()};
                    std::vector<float> got(q.size(), NAN);
                    reference::attention(q.data(), k.data(), v.data(), n_q, start, nh, nkv, hd, scaling,
                                         got.data(), nullptr, extras);
                    std::vector<float> want(q.size());
                    for (int64_t t = 0; t < n_q; ++t)
                        for (int64_t h = 0; h < nh; ++h) {
                            const int64_t q_idx = start + t, kvh = h / (nh / nkv);
                            std::vector<double> combined;  // [rows + 1]: the masked scores, then the sink
                            for (int64_t kv_idx = 0; kv_idx < rows; ++kv_idx) {
                                double w = 0.0;
                                for (int64_t d = 0; d < hd; ++d)
                                    w += double(q[(t * nh + h) * hd + d]) * k[(kv_idx * nkv + kvh) * hd + d];
                                const bool seen = kv_idx <= q_idx && (window == 0 || kv_idx > q_idx - window);
                                combined.push_back(seen ? w * scaling : -INFINITY);
                            }
                            combined.push_back(sink_kind == 0 ? -INFINITY : double(sinks[h]));
                            const double mx = *std::max_element(combined.begin(), combined.end());
                            double total = 0.0;
                            for (double& c : combined) total += (c = std::exp(c - mx));
                            for (int64_t d = 0; d < hd; ++d) {
                                double o = 0.0;
                                for (int64_t kv_idx = 0; kv_idx < rows; ++kv_idx)
                                    o += combined[kv_idx] / total * v[(kv_idx * nkv + kvh) * hd + d];
                                want[(t * nh + h) * hd + d] = static_cast<float>(o);
                            }
                        }
                    for (size_t i = 0; i < want.size(); ++i)
                        ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i])))
                            << "nh=" << nh << " n_q=" << n_q << " start=" << start << " window=" << window
                            << " sinks=" << sink_kind << " i=" << i;
                    if (sink_kind == 3) {  // the sink dominates: almost nothing of the values is left
                        for (float o : got) ASSERT_LT(std::fabs(o), 1e-10f);
                    }
                    // attention_kv over an f32 cache without a ring is attention() itself, extras included.
                    std::vector<float> kv(q.size(), NAN);
                    reference::attention_kv(KvType::kF32, q.data(), k.data(), v.data(), nullptr, n_q, start,
                                            nh, nkv, hd, scaling, kv.data(), nullptr, extras);
                    ASSERT_EQ(0, std::memcmp(kv.data(), got.data(), got.size() * sizeof(float)));
                }
}

TEST(KernelsReference, GatedDeltaOneStepByHand) {
    // dk = dv = 1: S = a·S0; kv = S·k; S += k·b·(v − kv); o = S·q.
    const float q = 2, k = 0.5f, v = 3, beta = 0.5f, g = std::log(0.5f);
    float S = 4, o = 0;
    reference::gated_delta_recurrent(&q, &k, &v, &beta, &g, 1, 1, 1, 1, 1, &S, &S, &o, nullptr);
    const float s1 = 2.0f, expect_s = s1 + 0.5f * 0.5f * (3 - s1 * 0.5f);
    EXPECT_NEAR(S, expect_s, 1e-6);
    EXPECT_NEAR(o, expect_s * 2, 1e-6);
}

TEST(KernelsReference, GatedDeltaRecurrentMatchesChunked) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    const int64_t n = 130, n_k = 2, n_v = 4, dk = 16, dv = 8;
    std::vector<float> q(n * n_k * dk), k(n * n_k * dk), v(n * n_v * dv), beta(n * n_v), g(n * n_v);
    auto l2 = [&](std::vector<float>& a, int64_t d, float scale) {
        for (size_t h = 0; h < a.size() / d; ++h) {
            double ss = 0;
            for (int64_t i = 0; i < d; ++i) ss += a[h * d + i] * a[h * d + i];
            for (int64_t i = 0; i < d; ++i)
                a[h * d + i] = static_cast<float>(a[h * d + i] / std::sqrt(ss) * scale);
        }
    };
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    l2(q, dk, 1.0f / std::sqrt(static_cast<float>(dk)));
    l2(k, dk, 1.0f);
    for (auto& x : beta) x = ud(rng);
    for (auto& x : g) x = -0.3f * ud(rng);
    std::vector<float> s0(n_v * dk * dv);
    for (auto& x : s0) x = 0.5f * nd(rng);
    std::vector<float> s_rec = s0, s_chunk = s0, o_rec(n * n_v * dv), o_chunk(n * n_v * dv);
    reference::gated_delta_recurrent(q.data(), k.data(), v.data(), beta.data(), g.data(), n, n_k, n_v, dk, dv,
                                     s_rec.data(), s_rec.data(), o_rec.data(), nullptr);
    reference::gated_delta_chunked(q.data(), k.data(), v.data(), beta.data(), g.data(), n, n_k, n_v, dk, dv,
                                   s_chunk.data(), s_chunk.data(), o_chunk.data(), nullptr);
    for (size_t i = 0; i < o_rec.size(); ++i) ASSERT_NEAR(o_rec[i], o_chunk[i], 1e-5) << i;
    for (size_t i = 0; i < s_rec.size(); ++i) ASSERT_NEAR(s_rec[i], s_chunk[i], 1e-5) << i;
    // The state actually moved away from the initial one.
    double diff = 0;
    for (size_t i = 0; i < s0.size(); ++i) diff += std::abs(s0[i] - s_rec[i]);
    EXPECT_GT(diff, 1.0);
}

// gpt-oss's clamped SwiGLU against GptOssExperts' lines written out in double: gate = gate.clamp(max=limit),
// up = up.clamp(-limit, limit), glu = gate · sigmoid(gate · alpha), out = (up + 1) · glu. Gates and ups
// at, just inside and just outside ±limit, and far beyond it; past the clamp the output is exactly the
// one at the limit.
TEST(KernelsReference, SwigluClampedIsGptOssExpertsFormula) {
    const float alpha = 1.702f, limit = 7.0f;
    const float above = std::nextafter(limit, INFINITY), below = std::nextafter(limit, 0.0f);
    const std::vector<float> values = {-1e30f, -100.0f, -7.5f, -above, -limit, -below, -3.0f,
                                       -1.0f,  -0.0f,   0.0f,  0.25f,  1.0f,   3.0f,   below,
                                       limit,  above,   7.5f,  100.0f, 1e30f};
    std::vector<float> gate, up;
    for (float g : values)
        for (float u : values) {
            gate.push_back(g);
            up.push_back(u);
        }
    const auto n = static_cast<int64_t>(gate.size());
    std::vector<float> out(gate.size(), NAN);
    reference::swiglu_clamped(gate.data(), up.data(), n, alpha, limit, out.data());
    for (size_t i = 0; i < gate.size(); ++i) {
        const double g = std::min(static_cast<double>(gate[i]), static_cast<double>(limit));
        const double u =
            std::clamp(static_cast<double>(up[i]), -static_cast<double>(limit), static_cast<double>(limit));
        const double want = (u + 1.0) * (g / (1.0 + std::exp(-static_cast<double>(alpha) * g)));
        EXPECT_NEAR(out[i], want, 1e-6 * (1.0 + std::fabs(want))) << "gate " << gate[i] << " up " << up[i];
        // Clamped inputs give the output of the limit itself, bit for bit.
        const float gc = std::min(gate[i], limit), uc = std::clamp(up[i], -limit, limit);
        float at_limit = NAN;
        reference::swiglu_clamped(&gc, &uc, 1, alpha, limit, &at_limit);
        EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(at_limit))
            << "gate " << gate[i] << " up " << up[i];
    }
    // The values named: a gate past the limit is the limit (7 · σ(11.914) · (u + 1)), an up past −limit
    // is −limit (out = −6 · glu), and a very negative gate gives 0, not NaN.
    const float g[] = {1e30f, 1.0f, -1e30f}, u[] = {0.0f, -1e30f, 2.0f};
    float o[3];
    reference::swiglu_clamped(g, u, 3, alpha, limit, o);
    EXPECT_NEAR(o[0], 7.0 / (1.0 + std::exp(-7.0 * 1.702)), 1e-5);
    EXPECT_NEAR(o[1], -6.0 / (1.0 + std::exp(-1.702)), 1e-6);
    EXPECT_EQ(o[2], 0.0f);
}

}  // namespace
}  // namespace sluice::kernels
