// The decode products over several rows (matvec_multi_rows, the MoE decode launches over n tokens)
// against the one-row launches they stand for: each row's result must be bit for bit that row's own
// launch, whatever the weight type, the rows per launch, the column split or the tokens' experts. A
// speculative verification then scores its tokens exactly as decoding them one by one would.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/kernels.h"

namespace sluice::cuda {
namespace {

// Whether a and b hold the same bits (NaNs included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The first index where a and b differ, for the failure message.
std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return "at " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

struct RowsCase {
    kernels::WeightType type;
    int64_t rows, cols;
    int group;
};

TEST(CudaOps, MatvecRowsAreEachRowsOwnMatvecBitForBit) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    using T = kernels::WeightType;
    const std::vector<RowsCase> cases = {
        {T::kQ4, 100, 2048, 64},    {T::kQ4, 33, 64, 32},     {T::kQ8, 70, 512, 64},
        {T::kQ8, 17, 96, 32},       {T::kQ4, 512, 4096, 128}, {T::kQ4, 4099, 2048, 64},
        {T::kQ4, 70, 12288, 32},  // 55 KB of staged x a row: one row a launch fits, so one matvec per row
        {T::kQ4, 40, 8192, 64},   // 37 KB a row: two rows a launch
        {T::kF32, 37, 40, 0},       {T::kBF16, 67, 2048, 0},  {T::kGgmlQ4_0, 70, 512, 0},
        {T::kGgmlQ8_0, 33, 2048, 0}};
    uint32_t seed = 1;
    for (const auto& c : cases) {
        auto w = make_weight(c.type, c.rows, c.cols, c.group, seed++);
        for (int64_t n : {1, 2, 3, 4, 5, 8, 11, 16}) {
            const std::vector<float> x = randn(static_cast<size_t>(n * c.cols), seed++);
            Dev<float> dx(x), dy(static_cast<size_t>(n * c.rows)), dref(static_cast<size_t>(n * c.rows));
            for (int split : {0, 1, 2, 4, 8}) {
                lc.forced_split = split;
                for (int64_t t = 0; t < n; ++t)
                    matvec(lc, w->dev, dx.get() + t * c.cols, dref.get() + t * c.rows, nullptr);
                matvec_rows(lc, w->dev, dx.get(), n, dy.get(), nullptr);
                const std::vector<float> got = dy.host(), want = dref.host();
                EXPECT_TRUE(same_bits(got, want))
                    << kernels::weight_type_name(c.type) << " " << c.rows << "x" << c.cols << " n=" << n
                    << " split " << split << " " << first_difference(got, want);
            }
            lc.forced_split = 0;
        }
    }
}

// Several weights of one input in one launch (q / k / v, the DeltaNet inputs): each weight's rows are
// matvec_multi's on each row alone.
TEST(CudaOps, MatvecMultiRowsAreEachRowsOwnMatvecMultiBitForBit) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    for (auto type : {kernels::WeightType::kQ4, kernels::WeightType::kQ8, kernels::WeightType::kBF16}) {
        const int64_t H = 1024;
        auto q = make_weight(type, 1024, H, 64, 11), k = make_weight(type, 130, H, 64, 12),
             v = make_weight(type, 256, H, 64, 13);
        for (int64_t n : {2, 3, 6, 9}) {
            const std::vector<float> x = randn(static_cast<size_t>(n * H), 14);
            Dev<float> dx(x);
            Dev<float> yq(static_cast<size_t>(n * 1024)), yk(static_cast<size_t>(n * 130)),
                yv(static_cast<size_t>(n * 256)), rq(static_cast<size_t>(n * 1024)),
                rk(static_cast<size_t>(n * 130)), rv(static_cast<size_t>(n * 256));
            for (int64_t t = 0; t < n; ++t) {
                MatvecMulti m;
                m.add(q->dev, rq.get() + t * 1024);
                m.add(k->dev, rk.get() + t * 130);
                m.add(v->dev, rv.get() + t * 256);
                matvec_multi(lc, m, dx.get() + t * H, nullptr);
            }
            MatvecMulti m;
            m.add(q->dev, yq.get());
            m.add(k->dev, yk.get());
            m.add(v->dev, yv.get());
            matvec_multi_rows(lc, m, dx.get(), n, nullptr);
            const std::string what = std::string(kernels::weight_type_name(type)) + " n=" + std::to_string(n);
            EXPECT_TRUE(same_bits(yq.host(), rq.host())) << what << " q";
            EXPECT_TRUE(same_bits(yk.host(), rk.host())) << what << " k";
            EXPECT_TRUE(same_bits(yv.host(), rv.host())) << what << " v";
        }
    }
}

// The MoE decode launches over n tokens, each with its own experts (and, folded, the shared expert with
// its own gate logit), against one launch pair per token.
TEST(CudaOps, MoeDecodeOverTokensIsEachTokensOwnLaunchBitForBit) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    for (auto type : {kernels::WeightType::kQ4, kernels::WeightType::kQ8, kernels::WeightType::kBF16,
                      kernels::WeightType::kGgmlQ4_0})
        for (int64_t K : {4, 10}) {
            const int64_t E = 16, H = 256, I = 128, Is = 192;
            std::vector<std::unique_ptr<TestWeight>> ws;
            std::vector<DevWeight> table;
            for (int64_t e = 0; e < E; ++e)
                for (int j = 0; j < 3; ++j) {
                    const auto seed = static_cast<uint32_t>(300 + 3 * e + j);
                    ws.push_back(j < 2 ? make_weight(type, I, H, 64, seed)
                                       : make_weight(type, H, I, 64, seed));
                    table.push_back(ws.back()->dev);
                }
            Dev<DevWeight> dtable(table);
            const DevWeight* dt = dtable.get();
            auto sg = make_weight(type, Is, H, 64, 7), su = make_weight(type, Is, H, 64, 8),
                 sd = make_weight(type, H, Is, 64, 9);
            const bool vec = vector_layout(ws[0]->dev);
            for (int64_t n : {2, 5, 16})
                for (int mode = 0; mode < 3; ++mode) {  // fused, fused with the shared expert, unfused
                    const bool fused = mode < 2, with_shared = mode == 1;
                    const auto [ids, wts] = random_routing(n, K, E, static_cast<uint32_t>(n * 31 + K));
                    const std::vector<float> x = randn(static_cast<size_t>(n * H), 21),
                                             logits = randn(static_cast<size_t>(n), 22);
                    SharedExpert shared;
                    Dev<float> dlogit(logits);
                    if (with_shared) {
                        shared.gate = sg->dev;
                        shared.up = su->dev;
                        shared.down = sd->dev;
                        shared.gate_logit = dlogit.get();
                    }
                    const int64_t stride = K * I + (with_shared ? Is : 0);
                    Dev<int32_t> dids(ids);
                    Dev<float> dx(x), dw(wts), da(static_cast<size_t>(n * stride)),
                        dg(static_cast<size_t>(n * K * I)), du(static_cast<size_t>(n * K * I)),
                        dy(static_cast<size_t>(n * H)), ra(static_cast<size_t>(n * stride)),
                        rg(static_cast<size_t>(n * K * I)), ru(static_cast<size_t>(n * K * I)),
                        ry(static_cast<size_t>(n * H));
                    for (int split : {0, 2, 8}) {
                        lc.forced_split = split;
                        for (bool qv : {false, vec}) {
                            const std::string what = std::string(kernels::weight_type_name(type)) +
                                                     " K=" + std::to_string(K) + " n=" + std::to_string(n) +
                                                     " mode " + std::to_string(mode) + " split " +
                                                     std::to_string(split) + (qv ? " words" : " generic");
                            for (int64_t t = 0; t < n; ++t) {
                                SharedExpert one = shared;
                                if (with_shared) one.gate_logit = dlogit.get() + t;
                                if (fused) {
                                    moe_matvec_gate_up(lc, dt, dids.get() + t * K, K, I, H, dx.get() + t * H,
                                                       nullptr, nullptr, ra.get() + t * stride,
                                                       with_shared ? &one : nullptr, qv, nullptr);
                                } else {
                                    moe_matvec_gate_up(lc, dt, dids.get() + t * K, K, I, H, dx.get() + t * H,
                                                       rg.get() + t * K * I, ru.get() + t * K * I, nullptr,
                                                       nullptr, qv, nullptr);
                                    swiglu(rg.get() + t * K * I, ru.get() + t * K * I, K * I,
                                           ra.get() + t * stride, nullptr);
                                }
                                moe_down_matvec(lc, dt, dids.get() + t * K, dw.get() + t * K, K, H, I,
                                                ra.get() + t * stride, with_shared ? &one : nullptr, qv,
                                                ry.get() + t * H, nullptr);
                            }
                            if (fused) {
                                moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), nullptr, nullptr,
                                                   da.get(), with_shared ? &shared : nullptr, qv, nullptr, n);
                            } else {
                                moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), dg.get(), du.get(),
                                                   nullptr, nullptr, qv, nullptr, n);
                                EXPECT_TRUE(same_bits(dg.host(), rg.host())) << what << " gate";
                                EXPECT_TRUE(same_bits(du.host(), ru.host())) << what << " up";
                                swiglu(dg.get(), du.get(), n * K * I, da.get(), nullptr);
                            }
                            EXPECT_TRUE(same_bits(da.host(), ra.host())) << what << " act";
                            moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, da.get(),
                                            with_shared ? &shared : nullptr, qv, dy.get(), nullptr, n);
                            const std::vector<float> got = dy.host(), want = ry.host();
                            EXPECT_TRUE(same_bits(got, want)) << what << " " << first_difference(got, want);
                        }
                    }
                    lc.forced_split = 0;
                }
        }
}

// The DeltaNet conv and fused step over several sequences in one launch each (a batch of decode rows, and
// sequences of several rows) against one launch per sequence: outputs and new states bit for bit, the old
// states untouched, the counters left 0.
TEST(CudaOps, DeltaNetPartsAreEachSequencesOwnLaunchBitForBit) {
    REQUIRE_GPU();
    const int64_t nk = 16, nv = 32, dk = 128, dv = 128, kernel = 4;  // Qwen3.6-35B / Qwen3-Next-80B
    const int64_t kd = nk * dk, vd = nv * dv, cd = 2 * kd + vd, hist = kernel - 1;
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
          std::vector<int64_t>{1, 3, 1, 2}, std::vector<int64_t>{5, 1}}) {
        const auto P = static_cast<int64_t>(rows.size());
        int64_t n = 0, max_rows = 0;
        for (int64_t r : rows) {
            n += r;
            max_rows = std::max(max_rows, r);
        }
        const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk)), l2_eps = 1e-6f, norm_eps = 1e-6f;
        std::vector<float> conv_in = randn(static_cast<size_t>(n * cd), 1),
                           b = randn(static_cast<size_t>(n * nv), 2),
                           a = randn(static_cast<size_t>(n * nv), 3),
                           z = randn(static_cast<size_t>(n * vd), 4),
                           dt_bias = randn(static_cast<size_t>(nv), 5),
                           norm_w = randn(static_cast<size_t>(dv), 6),
                           conv_w = randn(static_cast<size_t>(cd * kernel), 9, 0.3f),
                           neg_a(static_cast<size_t>(nv));
        std::mt19937 rng(8);
        std::uniform_real_distribution<float> ua(0.5f, 8.0f);
        for (auto& x : neg_a) x = -ua(rng);
        Dev<float> dconv_in(conv_in), db(b), da(a), dz(z), ddt(dt_bias), dnw(norm_w), dneg(neg_a),
            dcw(conv_w);
        // Each sequence's states: conv [hist, cd] and recurrent [nv, dk, dv], read and written out of place.
        std::vector<std::unique_ptr<Dev<float>>> cs, cs_out, rs, rs_out, ref_cs, ref_rs;
        std::vector<DeltaPart> parts;
        for (int64_t p = 0, row0 = 0; p < P; ++p) {
            const std::vector<float> c0 = randn(static_cast<size_t>(hist * cd), 20 + p),
                                     s0 = randn(static_cast<size_t>(nv * dk * dv), 40 + p, 0.1f);
            cs.push_back(std::make_unique<Dev<float>>(c0));
            rs.push_back(std::make_unique<Dev<float>>(s0));
            cs_out.push_back(std::make_unique<Dev<float>>(c0.size()));
            rs_out.push_back(std::make_unique<Dev<float>>(s0.size()));
            ref_cs.push_back(std::make_unique<Dev<float>>(c0.size()));
            ref_rs.push_back(std::make_unique<Dev<float>>(s0.size()));
            parts.push_back({row0, rows[static_cast<size_t>(p)], cs[p]->get(), cs_out[p]->get(), rs[p]->get(),
                             rs_out[p]->get()});
            row0 += rows[static_cast<size_t>(p)];
        }
        Dev<DeltaPart> dparts(parts);
        // One launch per sequence.
        Dev<float> ref_conv(static_cast<size_t>(n * cd)), ref_raw(static_cast<size_t>(n * vd)),
            ref_y(static_cast<size_t>(n * vd));
        Dev<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(P * nv), 0u));
        for (int64_t p = 0; p < P; ++p) {
            const DeltaPart& q = parts[static_cast<size_t>(p)];
            conv1d_silu(dconv_in.get() + q.row0 * cd, q.n, cd, kernel, dcw.get(), q.conv_state,
                        ref_cs[p]->get(), ref_conv.get() + q.row0 * cd, nullptr);
            deltanet_fused(ref_conv.get() + q.row0 * cd, db.get() + q.row0 * nv, da.get() + q.row0 * nv,
                           dz.get() + q.row0 * vd, dneg.get(), ddt.get(), dnw.get(), q.n, nk, nv, dk, dv,
                           l2_eps, q_scale, norm_eps, q.state, ref_rs[p]->get(), ref_raw.get() + q.row0 * vd,
                           counters.get(), ref_y.get() + q.row0 * vd, nullptr);
        }
        // One launch for all of them.
        Dev<float> conv(static_cast<size_t>(n * cd)), raw(static_cast<size_t>(n * vd)),
            y(static_cast<size_t>(n * vd));
        conv1d_silu_parts(dconv_in.get(), dparts.get(), P, max_rows, cd, kernel, dcw.get(), conv.get(),
                          nullptr);
        deltanet_fused_parts(conv.get(), db.get(), da.get(), dz.get(), dneg.get(), ddt.get(), dnw.get(),
                             dparts.get(), P, nk, nv, dk, dv, l2_eps, q_scale, norm_eps, raw.get(),
                             counters.get(), y.get(), nullptr);
        const std::string what = std::to_string(P) + " sequences, " + std::to_string(n) + " rows";
        EXPECT_TRUE(same_bits(conv.host(), ref_conv.host())) << what << " conv";
        const std::vector<float> got = y.host(), want = ref_y.host();
        EXPECT_TRUE(same_bits(got, want)) << what << " y " << first_difference(got, want);
        for (int64_t p = 0; p < P; ++p) {
            EXPECT_TRUE(same_bits(cs_out[p]->host(), ref_cs[p]->host())) << what << " conv state " << p;
            EXPECT_TRUE(same_bits(rs_out[p]->host(), ref_rs[p]->host())) << what << " state " << p;
        }
        EXPECT_EQ(counters.host(), std::vector<unsigned>(static_cast<size_t>(P * nv), 0u));
    }
}

}  // namespace
}  // namespace sluice::cuda
