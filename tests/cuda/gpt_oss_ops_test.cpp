// gpt-oss's ops on the GPU against their CPU twins (kernels::reference), as ops_test.cpp does for the
// rest: attention with a sliding window and per-head sink logits (kernels::AttentionExtras) in every
// kernel that attends over the KV cache — kv.cu's per-query and split kernels, attention_decode.cu's
// flash-decoding, flash_attention.cu's tensor-core prefill — for every KV type, with and without a
// --kv-window ring; MXFP4 products (ggml_dot.cuh's fast sub-block dot, scales down to e8m0's subnormal
// ones); and the routed experts' biases and clamped SwiGLU (cuda::expert_swiglu,
// cuda::moe_add_expert_bias) in the decode and grouped prefill forms the backend runs them in.
// Skipped when no device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/ops.h"
#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"

namespace sluice::cuda {
namespace {

using kernels::KvType;

// The f16 ring of a --kv-window holding the last `slots` of `rows` positions (kernels::KvRing's layout:
// [slots] K rows, as many V rows, then the int64 tags), with the slot of position rows − 3 taken by a
// later one (a cut-back: that key is read from the cache) — ops_test.cpp's window_ring.
std::vector<uint8_t> ring_of(const std::vector<float>& k, const std::vector<float>& v, int64_t rows,
                             int64_t nkv, int64_t hd, int64_t slots) {
    const int64_t ring_row = nkv * hd * 2;
    std::vector<uint8_t> ring(static_cast<size_t>(slots * (2 * ring_row + 8)));
    auto* tags = reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row);
    std::fill(tags, tags + slots, int64_t{-1});
    for (int64_t p = std::max<int64_t>(0, rows - slots); p < rows; ++p) {
        const int64_t slot = p % slots;
        kernels::reference::kv_store(KvType::kF16, k.data() + p * nkv * hd, 1, nkv, hd,
                                     ring.data() + slot * ring_row);
        kernels::reference::kv_store(KvType::kF16, v.data() + p * nkv * hd, 1, nkv, hd,
                                     ring.data() + (slots + slot) * ring_row);
        tags[slot] = p;
    }
    if (rows > 3) tags[(rows - 3) % slots] = rows - 3 + slots;
    return ring;
}

// Sink logits of n heads: Gaussian with a spread of 2, head 0's far above any score (its softmax is
// then mostly the sink: the max taken over the sink as well as the scores).
std::vector<float> sink_logits(int64_t n, uint32_t seed) {
    std::vector<float> s = randn(static_cast<size_t>(n), seed, 2.0f);
    s[0] = 30.0f;
    return s;
}

// What gpt-oss adds to one attention call: the sliding window (0: none) and whether heads have sinks.
struct Extras {
    int64_t sliding;
    bool sinks;
};
constexpr Extras kExtras[] = {{0, true}, {6, true}, {128, false}, {128, true}, {1, true}};

std::string extras_name(const Extras& x) {
    return "sliding " + std::to_string(x.sliding) + (x.sinks ? " with sinks" : "");
}

// attention_kv with a sliding window and sinks against reference::attention_kv with the same
// AttentionExtras, over the cache as stored, every KV type: the per-query kernel (no scratch, or
// more than 16 queries), kv.cu's split kernel (one query at widths without an attention_decode.cu
// instance: 16, the goldens' heads, and 96), attention_decode.cu's splits (up to 16 queries at 32-256;
// few splits and many), each with a ring (--kv-window) for the compressed types and without. Windows
// of 1 (only the query's own key), 6 (the goldens'), 128 (more than one split of 64 keys, past some
// contexts' length); head 0's sink above every score.
TEST(CudaOps, AttentionWithSinksAndSlidingWindowMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
    };
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (const Case& c : {Case{1, 0, 4, 2, 64}, Case{1, 300, 8, 2, 64}, Case{5, 90, 4, 2, 64},
                              Case{16, 700, 16, 2, 128}, Case{3, 1000, 2, 2, 32}, Case{1, 4000, 16, 2, 256},
                              Case{1, 500, 8, 2, 96}, Case{1, 200, 4, 2, 16}, Case{7, 40, 4, 2, 16},
                              Case{70, 0, 4, 1, 128}, Case{40, 1000, 8, 2, 64}}) {
            if (kernels::kv_shape_error(type, c.hd) != nullptr) continue;
            for (const Extras& x : kExtras) {
                for (int64_t window : {0, 48}) {  // the --kv-window ring: compressed types only
                    if (window > 0 && (type == KvType::kF32 || type == KvType::kF16)) continue;
                    const int64_t rows = c.start + c.n_q, row = c.nkv * kernels::kv_head_bytes(type, c.hd);
                    std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1),
                                       k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                                       v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3),
                                       sinks = sink_logits(c.nh, 4);
                    std::vector<uint8_t> ck(static_cast<size_t>(rows * row)), cv(ck.size());
                    kernels::reference::kv_store(type, k.data(), rows, c.nkv, c.hd, ck.data());
                    kernels::reference::kv_store(type, v.data(), rows, c.nkv, c.hd, cv.data());
                    const int64_t slots = window + 64, ring_row = c.nkv * c.hd * 2;
                    std::vector<uint8_t> ring = ring_of(k, v, rows, c.nkv, c.hd, slots);
                    const kernels::KvRing host_ring{
                        window, slots, reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row),
                        ring.data(), ring.data() + slots * ring_row};
                    const kernels::AttentionExtras extras{x.sliding, x.sinks ? sinks.data() : nullptr};
                    std::vector<float> ref(q.size());
                    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
                    kernels::reference::attention_kv(type, q.data(), ck.data(), cv.data(),
                                                     window > 0 ? &host_ring : nullptr, c.n_q, c.start, c.nh,
                                                     c.nkv, c.hd, scale, ref.data(), nullptr, extras);
                    Dev<float> dq(q), dout(q.size()), dsinks(sinks);
                    Dev<uint8_t> dk(ck), dv(cv), dring(ring);
                    const int64_t offset = std::min<int64_t>(c.start, 3);
                    Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start - offset)});
                    KvCache cache;
                    cache.type = type;
                    cache.k = dk.get();
                    cache.v = dv.get();
                    if (window > 0) {
                        cache.window = window;
                        cache.slots = slots;
                        cache.ring = dring.get();
                    }
                    cache.sliding = x.sliding;
                    cache.sinks = x.sinks ? dsinks.get() : nullptr;
                    const std::string what = std::string(kernels::kv_type_name(type)) + " " + extras_name(x) +
                                             " ring " + std::to_string(window) + " n_q " +
                                             std::to_string(c.n_q) + " start " + std::to_string(c.start) +
                                             " heads " + std::to_string(c.nh) + "/" + std::to_string(c.nkv) +
                                             " hd " + std::to_string(c.hd);
                    const double tol = type == KvType::kQ3 ? 2e-5 : 1e-5;
                    attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd, scale,
                                 nullptr, dout.get(), nullptr, 0, nullptr);
                    EXPECT_LT(rel_err(dout.host(), ref), tol) << "per query, " << what;
                    if (c.n_q > 16) continue;
                    for (int64_t cap : {rows + 64, 40 * rows + 4096}) {
                        Dev<float> split(
                            static_cast<size_t>(attention_split_scratch_floats(c.nh, c.hd, cap))),
                            dout2(q.size());
                        attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd, scale,
                                     nullptr, dout2.get(), split.get(), cap, nullptr);
                        EXPECT_LT(rel_err(dout2.host(), ref), tol)
                            << "split (" << decode_attention_splits(c.n_q, c.hd, cap) << "), capacity " << cap
                            << ", " << what;
                    }
                }
            }
        }
    }
}

// flash_attention_kv with a sliding window and sinks against reference::attention_kv with the same
// AttentionExtras, every KV type, heads of 32, 64 (gpt-oss's) and 128: a row block whose first rows'
// windows start tiles later than its last rows' (the block starts at its first row's first tile),
// keys split over blocks at a long context (splits before every row's window hold no keys) and
// not, the sinks applied in the kernel (one split) and in the combine (several), and with a
// --kv-window ring (steps of at most model::kKvRingSlack rows, as attention_layer calls it). Its
// arithmetic rounds q, k, v and p to f16: within 3e-3 of the f32 reference, as
// FlashAttentionMatchesReference.
TEST(CudaOps, FlashAttentionWithSinksAndSlidingWindowMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
    };
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (const Case& c : {Case{64, 0, 8, 2, 64}, Case{40, 3000, 8, 2, 64}, Case{137, 0, 4, 2, 32},
                              Case{60, 200, 16, 2, 128}, Case{33, 5, 64, 8, 64}}) {
            for (const Extras& x : kExtras) {
                for (int64_t window : {0, 48}) {
                    const bool ring_type = type != KvType::kF32 && type != KvType::kF16;
                    if (window > 0 && (!ring_type || c.n_q > 64)) continue;
                    const int64_t rows = c.start + c.n_q, row = c.nkv * kernels::kv_head_bytes(type, c.hd);
                    std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1),
                                       k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                                       v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3),
                                       sinks = sink_logits(c.nh, 4);
                    std::vector<uint8_t> ck(static_cast<size_t>(rows * row)), cv(ck.size());
                    kernels::reference::kv_store(type, k.data(), rows, c.nkv, c.hd, ck.data());
                    kernels::reference::kv_store(type, v.data(), rows, c.nkv, c.hd, cv.data());
                    const int64_t slots = window + 64, ring_row = c.nkv * c.hd * 2;
                    std::vector<uint8_t> ring = ring_of(k, v, rows, c.nkv, c.hd, slots);
                    const kernels::KvRing host_ring{
                        window, slots, reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row),
                        ring.data(), ring.data() + slots * ring_row};
                    const kernels::AttentionExtras extras{x.sliding, x.sinks ? sinks.data() : nullptr};
                    std::vector<float> ref(q.size());
                    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
                    kernels::reference::attention_kv(type, q.data(), ck.data(), cv.data(),
                                                     window > 0 ? &host_ring : nullptr, c.n_q, c.start, c.nh,
                                                     c.nkv, c.hd, scale, ref.data(), nullptr, extras);
                    Dev<float> dq(q), dout(q.size()), dout2(q.size()), dsinks(sinks);
                    Dev<uint8_t> dk(ck), dv(cv), dring(ring);
                    const int64_t offset = std::min<int64_t>(c.start, 3);
                    Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start - offset)});
                    KvCache cache;
                    cache.type = type;
                    cache.k = dk.get();
                    cache.v = dv.get();
                    if (window > 0) {
                        cache.window = window;
                        cache.slots = slots;
                        cache.ring = dring.get();
                    }
                    cache.sliding = x.sliding;
                    cache.sinks = x.sinks ? dsinks.get() : nullptr;
                    ASSERT_TRUE(flash_attention_fits(cache, c.hd));
                    const int64_t scratch_floats = attention_split_scratch_floats(c.nh, c.hd, 64 * rows);
                    Dev<float> scratch(static_cast<size_t>(scratch_floats));
                    const std::string what = std::string(kernels::kv_type_name(type)) + " " + extras_name(x) +
                                             " ring " + std::to_string(window) + " n_q " +
                                             std::to_string(c.n_q) + " start " + std::to_string(c.start) +
                                             " heads " + std::to_string(c.nh) + "/" + std::to_string(c.nkv) +
                                             " hd " + std::to_string(c.hd);
                    ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv,
                                                   c.hd, scale, nullptr, dout.get(), nullptr, 0, rows,
                                                   nullptr));
                    EXPECT_LT(rel_err(dout.host(), ref), 3e-3) << what;
                    ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv,
                                                   c.hd, scale, nullptr, dout2.get(), scratch.get(),
                                                   scratch_floats, rows, nullptr));
                    EXPECT_LT(rel_err(dout2.host(), ref), 3e-3) << "split, " << what;
                }
            }
        }
    }
}

// Every block of an MXFP4 test weight given the e8m0 scale byte scale(block index), host and device.
template <typename F>
void set_mxfp4_scales(TestWeight& w, F scale) {
    const int64_t blocks = w.view.rows * w.view.cols / 32;
    for (int64_t b = 0; b < blocks; ++b) w.data[static_cast<size_t>(b * 17)] = scale(b);
    ASSERT_EQ(cudaMemcpy(w.d_data->get(), w.data.data(), w.data.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

// max |a − b| / max |b| (rel_err's floor of 1 would hide results of tiny scale).
double rel_to_own_scale(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, mag = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
        mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
    }
    return mag > 0 ? diff / mag : diff;
}

// MXFP4 products (ggml_dot.cuh's sub-block dot for decode; the prefill tiles' ggml_value) against the
// reference, rows of 2880 (gpt-oss's hidden size) and 64, and blocks whose e8m0 scales are e8m0's
// extremes: 0 and 1 (subnormal halves, 2^-128 and 2^-127), 2, 127 and 200 — each result compared at
// its own scale (254, 2^126 times a code of 12, is past f32's range: 200 stands for the large ones).
TEST(CudaOps, Mxfp4ProductsMatchReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    uint32_t seed = 700;
    const std::vector<std::pair<int64_t, int64_t>> shapes{{37, 2880}, {64, 64}, {5, 32}};
    for (const auto& [rows, cols] : shapes) {
        for (int scales : {0, 1}) {  // random scales (118..133), then e8m0's extremes
            auto w = make_weight(kernels::WeightType::kGgmlMXFP4, rows, cols, 0, seed++);
            if (scales == 1) {
                // Rows 0-4 of one extreme each (the tiny ones not swamped by the others), then mixed.
                constexpr uint8_t kScale[] = {0, 1, 2, 127, 200};
                const int64_t per_row = cols / 32;
                set_mxfp4_scales(*w, [&](int64_t b) {
                    return b / per_row < 5 ? kScale[b / per_row] : kScale[(b / 7) % 5];
                });
            }
            const std::string what = std::to_string(rows) + "x" + std::to_string(cols) +
                                     (scales == 1 ? " extreme scales" : " random scales");
            std::vector<float> x = randn(static_cast<size_t>(cols), seed++);
            std::vector<float> ref(static_cast<size_t>(rows));
            kernels::reference::matvec(w->view, x.data(), ref.data(), nullptr);
            Dev<float> dx(x), dy(static_cast<size_t>(rows));
            matvec(lc, w->dev, dx.get(), dy.get(), nullptr);
            const std::vector<float> got = dy.host();
            const kernels::WeightFormat& format = kernels::weight_format(w->view.type);
            for (int64_t r = 0; r < rows; ++r) {  // each row at its own scale
                double mag = 0;                   // Σ|w·x|: the scale the sum's rounding is relative to
                for (int64_t i = 0; i < cols; ++i)
                    mag += std::fabs(static_cast<double>(format.reference_element(w->view, r, i)) *
                                     x[static_cast<size_t>(i)]);
                EXPECT_LE(
                    std::fabs(static_cast<double>(got[static_cast<size_t>(r)]) - ref[static_cast<size_t>(r)]),
                    1e-5 * mag)
                    << what << " matvec row " << r;
            }
            for (int64_t n : {3, 70}) {
                std::vector<float> xs = randn(static_cast<size_t>(n * cols), seed++);
                std::vector<float> mref(static_cast<size_t>(n * rows));
                kernels::reference::matmul(w->view, xs.data(), n, mref.data(), nullptr);
                Dev<float> dxs(xs), dys(mref.size());
                matmul(lc, w->dev, dxs.get(), n, dys.get(), nullptr);
                if (scales == 0)
                    EXPECT_LT(rel_err(dys.host(), mref), 1e-5) << what << " matmul n=" << n;
                else
                    EXPECT_LT(rel_to_own_scale(dys.host(), mref), 1e-5) << what << " matmul n=" << n;
            }
        }
    }
}

// gpt-oss's routed experts (model/moe.cpp: biases after gate, up and down, kernels::swiglu_clamped with
// alpha 1.702 and limit 7) against their composition by the reference ops, in the forms the backend
// runs (layers.cpp moe_routed): decode — moe_matvec_gate_up's unfused outputs, expert_swiglu over the
// token's slots, moe_down_matvec, then moe_add_expert_bias; prefill — moe_group, the grouped gate and up
// products, expert_swiglu over the permuted pairs (each row's expert through `order`), the grouped down
// product, moe_combine, moe_add_expert_bias. MXFP4 experts (the Hub's) and bf16 ones; inputs large
// enough that the clamp at ±7 bites.
TEST(CudaOps, GptOssExpertsMatchComposedReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    const float alpha = 1.702f, limit = 7.0f;
    for (auto type : {kernels::WeightType::kGgmlMXFP4, kernels::WeightType::kBF16}) {
        const int64_t E = 8, K = 4, H = 256, I = 128;
        std::vector<std::unique_ptr<TestWeight>> ws;
        std::vector<DevWeight> table;
        for (int64_t e = 0; e < E; ++e) {
            ws.push_back(make_weight(type, I, H, 0, static_cast<uint32_t>(2000 + 3 * e)));
            ws.push_back(make_weight(type, I, H, 0, static_cast<uint32_t>(2001 + 3 * e)));
            ws.push_back(make_weight(type, H, I, 0, static_cast<uint32_t>(2002 + 3 * e)));
            for (int j = 0; j < 3; ++j) {
                // MXFP4 at the bf16 weights' scale (|w| ≤ 12 · 2^-6): scales 2^-8 .. 2^-6.
                if (type == kernels::WeightType::kGgmlMXFP4)
                    set_mxfp4_scales(*ws[static_cast<size_t>(3 * e + j)],
                                     [](int64_t b) { return static_cast<uint8_t>(120 + b % 3); });
                table.push_back(ws[static_cast<size_t>(3 * e + j)]->dev);
            }
        }
        Dev<DevWeight> dtable(table);
        const DevWeight* dt = dtable.get();
        const std::vector<float> gate_bias = randn(static_cast<size_t>(E * I), 21),
                                 up_bias = randn(static_cast<size_t>(E * I), 22),
                                 down_bias = randn(static_cast<size_t>(E * H), 23);
        Dev<float> dgb(gate_bias), dub(up_bias), ddb(down_bias);
        // Gate and up outputs of about ±8: the clamp at 7 bites on a good share of them.
        const float x_scale = 10.0f;
        int64_t clamped = 0;
        for (int64_t n : {1, 3, 50, 130}) {
            std::vector<float> x = randn(static_cast<size_t>(n * H), 5, x_scale);
            // Each token's K distinct experts in a random order, weighted 0.1, 0.3, 0.5, 0.7.
            const auto [ids, wts] = random_routing(n, K, E, 9);
            // The composed reference: model/moe.cpp's swiglu_mlp with ExpertExtras.
            std::vector<float> ref(static_cast<size_t>(n * H), 0.0f), g(I), u(I), act(I), out(H);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t j = 0; j < K; ++j) {
                    const int64_t e = ids[static_cast<size_t>(t * K + j)];
                    kernels::reference::matvec(ws[e * 3]->view, x.data() + t * H, g.data(), nullptr);
                    kernels::reference::matvec(ws[e * 3 + 1]->view, x.data() + t * H, u.data(), nullptr);
                    for (int64_t i = 0; i < I; ++i) {
                        g[i] += gate_bias[static_cast<size_t>(e * I + i)];
                        u[i] += up_bias[static_cast<size_t>(e * I + i)];
                        clamped += g[i] > limit || std::fabs(u[i]) > limit;
                    }
                    kernels::reference::swiglu_clamped(g.data(), u.data(), I, alpha, limit, act.data());
                    kernels::reference::matvec(ws[e * 3 + 2]->view, act.data(), out.data(), nullptr);
                    for (int64_t i = 0; i < H; ++i) out[i] += down_bias[static_cast<size_t>(e * H + i)];
                    kernels::reference::axpy(wts[static_cast<size_t>(t * K + j)], out.data(), H,
                                             ref.data() + t * H);
                }
            Dev<float> dx(x), dw(wts), dg(static_cast<size_t>(n * K * I)), du(static_cast<size_t>(n * K * I)),
                da(static_cast<size_t>(n * K * I)), dpo(static_cast<size_t>(n * K * H)),
                dmix(static_cast<size_t>(n * H));
            Dev<int32_t> dids(ids), doff(static_cast<size_t>(E + 1)), dord(static_cast<size_t>(n * K));
            const std::string what = std::string(kernels::weight_type_name(type)) + " n=" + std::to_string(n);
            if (n <= 16) {  // token by token through the decode kernels (kMatvecRows)
                for (int64_t t = 0; t < n; ++t) {
                    const int32_t* t_ids = dids.get() + t * K;
                    moe_matvec_gate_up(lc, dt, t_ids, K, I, H, dx.get() + t * H, dg.get(), du.get(), nullptr,
                                       nullptr, false, nullptr);
                    expert_swiglu(dg.get(), du.get(), t_ids, nullptr, dgb.get(), dub.get(), K, I, alpha,
                                  limit, da.get(), nullptr);
                    moe_down_matvec(lc, dt, t_ids, dw.get() + t * K, K, H, I, da.get(), nullptr, false,
                                    dmix.get() + t * H, nullptr);
                }
            } else {
                moe_group(dids.get(), n * K, E, doff.get(), dord.get(), nullptr);
                moe_matmul(lc, dt, 0, E, doff.get(), dord.get(), n * K, true, K, false, I, H, dx.get(),
                           dg.get(), nullptr);
                moe_matmul(lc, dt, 1, E, doff.get(), dord.get(), n * K, true, K, false, I, H, dx.get(),
                           du.get(), nullptr);
                expert_swiglu(dg.get(), du.get(), dids.get(), dord.get(), dgb.get(), dub.get(), n * K, I,
                              alpha, limit, da.get(), nullptr);
                moe_matmul(lc, dt, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I, da.get(),
                           dpo.get(), nullptr);
                moe_combine(dpo.get(), dw.get(), n, K, H, dmix.get(), nullptr);
            }
            moe_add_expert_bias(dids.get(), dw.get(), ddb.get(), n, K, H, dmix.get(), nullptr);
            // f32 sums against the reference's; the activations reach ±50 at gate and up outputs of ±8.
            EXPECT_LT(rel_err(dmix.host(), ref), 2e-5) << what;
        }
        EXPECT_GT(clamped, 0) << kernels::weight_type_name(type) << ": the clamp never bit";
    }
}

// ggml's e2m1 values doubled (kvalues_mxfp4), by nibble.
constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// An MXFP4 test weight as the MLX affine 8-bit rows moe_mxfp4_int8 converts it to (code + 12, scale
// 2^(e−128), bias −12·scale, groups of 32, f32 scales), made on the host.
std::unique_ptr<TestWeight> mxfp4_as_q8(const TestWeight& mx) {
    auto w = std::make_unique<TestWeight>();
    const int64_t rows = mx.view.rows, cols = mx.view.cols, blocks = rows * cols / 32;
    w->data.resize(static_cast<size_t>(rows * cols));
    w->scales.resize(static_cast<size_t>(blocks * 4));
    w->biases.resize(static_cast<size_t>(blocks * 4));
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* src = mx.data.data() + b * 17;
        for (int j = 0; j < 16; ++j) {
            w->data[static_cast<size_t>(b * 32 + j)] =
                static_cast<uint8_t>(kMxfp4Doubled[src[1 + j] & 15] + 12);
            w->data[static_cast<size_t>(b * 32 + 16 + j)] =
                static_cast<uint8_t>(kMxfp4Doubled[src[1 + j] >> 4] + 12);
        }
        const float scale = kernels::e8m0_to_f32_half(src[0]), bias = -12.0f * scale;
        std::memcpy(w->scales.data() + b * 4, &scale, 4);
        std::memcpy(w->biases.data() + b * 4, &bias, 4);
    }
    kernels::WeightView& v = w->view;
    v.type = kernels::WeightType::kQ8;
    v.rows = rows;
    v.cols = cols;
    v.group_size = 32;
    v.scale_type = kernels::ScaleType::kF32;
    v.data = w->data.data();
    v.scales = w->scales.data();
    v.biases = w->biases.data();
    w->d_data = std::make_unique<Dev<uint8_t>>(w->data);
    w->d_scales = std::make_unique<Dev<uint8_t>>(w->scales);
    w->d_biases = std::make_unique<Dev<uint8_t>>(w->biases);
    w->dev = dev_weight(v, w->d_data->get(), w->d_scales->get(), w->d_biases->get());
    return w;
}

// MXFP4 experts on the int8 prefill kernels (moe_mxfp4_int8, layers.cpp's prefill for gpt-oss): the 8-bit
// rows it converts to are the MXFP4 weights exactly (checked on the host's copy, element by element), and
// its products, in groups of 3 of 8 experts (a short last group), are bit for bit moe_matmul_int8's over
// those rows (which CudaOps.GroupedMoeInt8MatchesComposedInt8Reference holds to the reference).
TEST(CudaOps, Mxfp4ExpertsOnInt8KernelsAreTheInt8ProductsOfTheirExactRows) {
    REQUIRE_GPU();
    const int64_t E = 8, K = 4, H = 256, I = 128;
    std::vector<std::unique_ptr<TestWeight>> mx, q8;
    std::vector<DevWeight> mx_table, q8_table;
    for (int64_t e = 0; e < E; ++e)
        for (int j = 0; j < 3; ++j) {
            mx.push_back(make_weight(kernels::WeightType::kGgmlMXFP4, j == 2 ? H : I, j == 2 ? I : H, 0,
                                     static_cast<uint32_t>(3000 + 3 * e + j)));
            // e8m0's subnormal halves (0, 1) and ordinary scales.
            set_mxfp4_scales(
                *mx.back(), [](int64_t b) { return static_cast<uint8_t>(b % 7 == 0 ? b % 2 : 118 + b % 5); });
            q8.push_back(mxfp4_as_q8(*mx.back()));
            mx_table.push_back(mx.back()->dev);
            q8_table.push_back(q8.back()->dev);
            const kernels::WeightFormat& fm = kernels::weight_format(mx.back()->view.type);
            const kernels::WeightFormat& fq = kernels::weight_format(q8.back()->view.type);
            for (int64_t r = 0; r < mx.back()->view.rows; ++r)
                for (int64_t i = 0; i < mx.back()->view.cols; ++i)
                    ASSERT_EQ(fq.reference_element(q8.back()->view, r, i),
                              fm.reference_element(mx.back()->view, r, i))
                        << "expert " << e << " projection " << j << " element " << r << "," << i;
        }
    auto upload = [](const std::vector<DevWeight>& t) {
        std::vector<uint8_t> bytes(t.size() * sizeof(DevWeight));
        std::memcpy(bytes.data(), t.data(), bytes.size());
        return std::make_unique<Dev<uint8_t>>(bytes);
    };
    auto dmx = upload(mx_table), dq8 = upload(q8_table);
    const auto* tmx = reinterpret_cast<const DevWeight*>(dmx->get());
    const auto* tq8 = reinterpret_cast<const DevWeight*>(dq8->get());
    const int64_t group = 3, slab = mxfp4_q8_slab_bytes(H, I);
    Dev<uint8_t> dslabs(static_cast<size_t>(group * slab));
    auto dscratch_table = upload(mxfp4_q8_table(dslabs.get(), group, slab, H, I));
    const Mxfp4Q8Scratch scratch{group, slab, dslabs.get(),
                                 reinterpret_cast<const DevWeight*>(dscratch_table->get())};
    for (int64_t n : {17, 130}) {
        std::vector<float> x = randn(static_cast<size_t>(n * H), 41);
        std::vector<int32_t> ids(static_cast<size_t>(n * K));
        std::mt19937 rng(static_cast<uint32_t>(n));
        for (int64_t t = 0; t < n; ++t) {
            std::vector<int32_t> perm(static_cast<size_t>(E));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int64_t j = 0; j < K; ++j)
                ids[static_cast<size_t>(t * K + j)] = perm[static_cast<size_t>(j)];
        }
        const int64_t cap = n * K * std::max(H, I);
        Dev<float> dx(x), dd(static_cast<size_t>(int8_scale_elements(cap))),
            ds(static_cast<size_t>(int8_scale_elements(cap)));
        Dev<int8_t> dq(static_cast<size_t>(cap));
        Dev<int32_t> dids(ids), doff(static_cast<size_t>(E + 1)), dord(static_cast<size_t>(n * K));
        const Int8Rows xq{dq.get(), dd.get(), ds.get(), cap};
        moe_group(dids.get(), n * K, E, doff.get(), dord.get(), nullptr);
        quantize_rows_int8(dx.get(), n, H, xq, nullptr);
        const std::string what = "n=" + std::to_string(n);
        for (int which = 0; which < 2; ++which) {
            Dev<float> want(static_cast<size_t>(n * K * I)), got(static_cast<size_t>(n * K * I));
            moe_matmul_int8(8, 32, tq8, which, E, doff.get(), dord.get(), n * K, true, K, false, I, H, xq,
                            want.get(), nullptr);
            moe_mxfp4_int8(scratch, tmx, which, E, doff.get(), dord.get(), n * K, true, K, false, I, H, xq,
                           got.get(), nullptr);
            const std::vector<float> a = got.host(), b = want.host();
            EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                << what << " which " << which;
        }
        // Down: the pairs' rows in, scattered out.
        std::vector<float> act = randn(static_cast<size_t>(n * K * I), 43);
        Dev<float> dact(act), want(static_cast<size_t>(n * K * H)), got(static_cast<size_t>(n * K * H));
        quantize_rows_int8(dact.get(), n * K, I, xq, nullptr);
        moe_matmul_int8(8, 32, tq8, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I, xq, want.get(),
                        nullptr);
        moe_mxfp4_int8(scratch, tmx, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I, xq, got.get(),
                       nullptr);
        const std::vector<float> a = got.host(), b = want.host();
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << " down";
    }
}

// expert_swiglu without biases and limit is cuda::swiglu; with a limit alone, reference::swiglu_clamped.
TEST(CudaOps, ExpertSwigluMatchesReference) {
    REQUIRE_GPU();
    const int64_t rows = 6, cols = 300;
    std::vector<float> g = randn(static_cast<size_t>(rows * cols), 31, 6.0f),
                       u = randn(static_cast<size_t>(rows * cols), 32, 6.0f);
    std::vector<int32_t> ids(static_cast<size_t>(rows), 0);
    std::vector<float> plain(g.size()), clamped(g.size());
    kernels::reference::swiglu(g.data(), u.data(), rows * cols, plain.data());
    kernels::reference::swiglu_clamped(g.data(), u.data(), rows * cols, 1.702f, 7.0f, clamped.data());
    Dev<float> dg(g), du(u), da(g.size()), db(g.size());
    Dev<int32_t> dids(ids);
    expert_swiglu(dg.get(), du.get(), dids.get(), nullptr, nullptr, nullptr, rows, cols, 1.0f, 0.0f, da.get(),
                  nullptr);
    EXPECT_LT(rel_err(da.host(), plain), 1e-6);
    expert_swiglu(dg.get(), du.get(), dids.get(), nullptr, nullptr, nullptr, rows, cols, 1.702f, 7.0f,
                  db.get(), nullptr);
    EXPECT_LT(rel_err(db.host(), clamped), 1e-6);
}

}  // namespace
}  // namespace sluice::cuda
