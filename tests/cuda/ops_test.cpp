// Every CUDA op against its CPU reference (kernels::reference) over shape sweeps, in the spirit of
// ggml's test-backend-ops: random inputs, the same call on both sides, max |difference| relative
// to the output's scale. Run by tools/gpu_check.sh on a machine with a GPU (also under
// compute-sanitizer); skipped when no device is present.
#include "kernels/cuda/ops.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "gguf_bytes.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kernels/weight_format.h"

namespace sluice::cuda {
namespace {

struct LinearCase {
    kernels::WeightType type;
    int64_t rows, cols;
    int group;
};

const std::vector<LinearCase>& linear_cases() {
    using T = kernels::WeightType;
    static const std::vector<LinearCase> cases = {
        {T::kF32, 37, 40, 0},
        {T::kF32, 256, 2048, 0},
        {T::kBF16, 67, 2048, 0},
        {T::kBF16, 5, 36, 0},
        {T::kF16, 130, 512, 0},
        {T::kQ4, 100, 2048, 64},
        {T::kQ4, 33, 64, 32},
        {T::kQ4, 9, 48, 16},
        {T::kQ8, 70, 512, 64},
        {T::kQ8, 17, 96, 32},
        {T::kQ4, 512, 4096, 128},
        {T::kQ8, 3, 16, 8},
        // ggml's block formats (GGUF): every one, rows off the warp tile, 32-block and 256-block widths.
        {T::kGgmlQ4_0, 70, 512, 0},
        {T::kGgmlQ4_1, 9, 64, 0},
        {T::kGgmlQ5_0, 33, 96, 0},
        {T::kGgmlQ5_1, 5, 32, 0},
        {T::kGgmlQ8_0, 130, 2048, 0},
        {T::kGgmlQ4_K, 67, 512, 0},
        {T::kGgmlQ5_K, 17, 256, 0},
        {T::kGgmlQ6_K, 40, 768, 0},
        {T::kGgmlIQ4_NL, 21, 128, 0},
        {T::kGgmlIQ4_XS, 12, 512, 0},
        {T::kGgmlMXFP4, 31, 2880, 0},
    };
    return cases;
}

TEST(CudaOps, MatvecMatchesReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    using T = kernels::WeightType;
    uint32_t seed = 1;
    std::vector<LinearCase> cases = linear_cases();
    // Row counts off the 4-row warp tile, and many rows of the model's hidden size (the lm_head's
    // shape class: 248k × 2048 4-bit for Qwen3.6, cut to 32k rows to keep the CPU side quick).
    // Inputs wider than 48 KB of staged x, which take the chunk path only by opting in to more shared
    // memory: GLM-4.5's out projection (12,288 columns) and DeepSeek-V3's (16,384); past the limit
    // (24,576 columns: 110 KB) the generic row path.
    cases.insert(cases.end(), {{T::kQ4, 4099, 2048, 64},
                               {T::kQ8, 1001, 2048, 64},
                               {T::kQ4, 32771, 2048, 64},
                               {T::kQ4, 70, 12288, 32},
                               {T::kQ8, 33, 16384, 64},
                               {T::kQ4, 9, 24576, 64}});
    for (const auto& c : cases) {
        auto w = make_weight(c.type, c.rows, c.cols, c.group, seed++);
        std::vector<float> x = randn(static_cast<size_t>(c.cols), seed++);
        std::vector<float> ref(static_cast<size_t>(c.rows));
        kernels::reference::matvec(w->view, x.data(), ref.data(), nullptr);
        Dev<float> dx(x), dy(static_cast<size_t>(c.rows));
        for (int split : {0, 1, 2, 4, 8}) {
            lc.forced_split = split;
            matvec(lc, w->dev, dx.get(), dy.get(), nullptr);
            EXPECT_LT(rel_err(dy.host(), ref), 1e-5)
                << kernels::weight_type_name(c.type) << " " << c.rows << "x" << c.cols << " g" << c.group
                << " split " << split;
        }
        lc.forced_split = 0;
    }
}

TEST(CudaOps, MatmulMatchesReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    uint32_t seed = 100;
    for (const auto& c : linear_cases()) {
        for (int64_t n : {2, 5, 64, 130}) {
            auto w = make_weight(c.type, c.rows, c.cols, c.group, seed++);
            std::vector<float> x = randn(static_cast<size_t>(n * c.cols), seed++);
            std::vector<float> ref(static_cast<size_t>(n * c.rows));
            kernels::reference::matmul(w->view, x.data(), n, ref.data(), nullptr);
            Dev<float> dx(x), dy(static_cast<size_t>(n * c.rows));
            for (bool tensor_cores : {true, false}) {  // 3xTF32 and its SIMT twin
                lc.tensor_cores = tensor_cores;
                matmul(lc, w->dev, dx.get(), n, dy.get(), nullptr);
                EXPECT_LT(rel_err(dy.host(), ref), 1e-5)
                    << kernels::weight_type_name(c.type) << " " << c.rows << "x" << c.cols << " n=" << n
                    << " tensor cores " << tensor_cores;
            }
            lc.tensor_cores = true;
        }
    }
}

// The int8 tensor-core products against the reference's definition of the int8-activation product
// (the CPU's Activations::kInt8): the same quantised codes, so only f32 summation order differs.
TEST(CudaOps, Int8MatmulMatchesInt8Reference) {
    REQUIRE_GPU();
    uint32_t seed = 300;
    int tested = 0;
    std::vector<LinearCase> cases = linear_cases();
    cases.push_back({kernels::WeightType::kQ4, 300, 96, 32});  // a stage of one 32-input block
    cases.push_back({kernels::WeightType::kQ8, 130, 1024, 128});
    for (const auto& c : cases) {
        for (int64_t n : {1, 17, 64, 130, 257}) {
            auto w = make_weight(c.type, c.rows, c.cols, c.group, seed++);
            if (!int8_products(w->dev)) continue;
            w->view.activations = kernels::Activations::kInt8;
            ASSERT_TRUE(w->view.int8_activations());
            std::vector<float> x = randn(static_cast<size_t>(n * c.cols), seed++);
            x[0] = 0.0f;  // a block with a zero and (below) an all-zero block
            if (n > 1) std::fill(x.begin() + c.cols, x.begin() + c.cols + 32, 0.0f);
            std::vector<float> ref(static_cast<size_t>(n * c.rows)), f32(ref.size());
            kernels::reference::matmul(w->view, x.data(), n, ref.data(), nullptr);
            w->view.activations = kernels::Activations::kF32;
            kernels::reference::matmul(w->view, x.data(), n, f32.data(), nullptr);
            Dev<float> dx(x), dy(ref.size()), dd(static_cast<size_t>(int8_scale_elements(n * c.cols))),
                ds(static_cast<size_t>(int8_scale_elements(n * c.cols)));
            Dev<int8_t> dq(static_cast<size_t>(n * c.cols));
            const Int8Rows xq{dq.get(), dd.get(), ds.get(), n * c.cols};
            quantize_rows_int8(dx.get(), n, c.cols, xq, nullptr);
            matmul_int8(w->dev, xq, n, dy.get(), nullptr);
            const std::vector<float> got = dy.host();
            const std::string what = std::string(kernels::weight_type_name(c.type)) + " " +
                                     std::to_string(c.rows) + "x" + std::to_string(c.cols) + " g" +
                                     std::to_string(c.group) + " n=" + std::to_string(n);
            EXPECT_LT(rel_err(got, ref), 2e-5) << what;
            EXPECT_GT(rel_err(got, f32), 1e-5) << what << ": the int8 rounding is visible against f32";
            ++tested;
        }
    }
    EXPECT_GE(tested, 30);
}

TEST(CudaOps, DequantizeRowsMatchesReference) {
    REQUIRE_GPU();
    for (const auto& c : linear_cases()) {
        auto w = make_weight(c.type, c.rows, c.cols, c.group, 7);
        std::vector<int32_t> ids = {0, static_cast<int32_t>(c.rows - 1), static_cast<int32_t>(c.rows / 2)};
        std::vector<float> ref(ids.size() * static_cast<size_t>(c.cols));
        for (size_t i = 0; i < ids.size(); ++i)
            kernels::reference::dequantize_row(w->view, ids[i], ref.data() + i * static_cast<size_t>(c.cols));
        Dev<int32_t> did(ids);
        Dev<float> dy(ref.size());
        dequantize_rows(w->dev, did.get(), static_cast<int64_t>(ids.size()), dy.get(), nullptr);
        EXPECT_LT(rel_err(dy.host(), ref), 1e-6) << kernels::weight_type_name(c.type);
    }
}

// Σ over a token's experts of weight · down(silu(gate · x) ⊙ up · x), by the reference ops (each expert's
// gate, up and down at ws[3e], ws[3e + 1], ws[3e + 2], their views' activations as set).
std::vector<float> composed_moe_reference(const std::vector<std::unique_ptr<TestWeight>>& ws,
                                          const std::vector<float>& x, const std::vector<int32_t>& ids,
                                          const std::vector<float>& wts, int64_t n, int64_t K, int64_t H,
                                          int64_t I) {
    std::vector<float> ref(static_cast<size_t>(n * H), 0.0f), g(I), u(I), act(I), out(H);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < K; ++j) {
            const int64_t e = ids[t * K + j];
            kernels::reference::matvec(ws[e * 3]->view, x.data() + t * H, g.data(), nullptr);
            kernels::reference::matvec(ws[e * 3 + 1]->view, x.data() + t * H, u.data(), nullptr);
            kernels::reference::swiglu(g.data(), u.data(), I, act.data());
            kernels::reference::matvec(ws[e * 3 + 2]->view, act.data(), out.data(), nullptr);
            kernels::reference::axpy(wts[t * K + j], out.data(), H, ref.data() + t * H);
        }
    return ref;
}

// The grouped MoE products against the composed reference: per (token, slot) the expert's
// SwiGLU MLP, weighted and summed — both the decode (matvec) and prefill (grouped matmul) forms.
TEST(CudaOps, GroupedMoeMatchesComposedReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    for (auto type :
         {kernels::WeightType::kQ4, kernels::WeightType::kQ8, kernels::WeightType::kBF16,
          kernels::WeightType::kGgmlQ4_0, kernels::WeightType::kGgmlQ8_0, kernels::WeightType::kGgmlMXFP4})
        for (int64_t K : {4, 10}) {  // 10: more experts than a block has warps (the split down projection)
            const int64_t E = 16, H = 256, I = 128;
            std::vector<std::unique_ptr<TestWeight>> ws;
            std::vector<DevWeight> table;
            for (int64_t e = 0; e < E; ++e) {
                ws.push_back(make_weight(type, I, H, 64, static_cast<uint32_t>(1000 + 3 * e)));
                ws.push_back(make_weight(type, I, H, 64, static_cast<uint32_t>(1001 + 3 * e)));
                ws.push_back(make_weight(type, H, I, 64, static_cast<uint32_t>(1002 + 3 * e)));
                for (int j = 0; j < 3; ++j) table.push_back(ws[static_cast<size_t>(3 * e + j)]->dev);
            }
            Dev<DevWeight> dtable(table);
            const DevWeight* dt = dtable.get();
            for (int64_t n : {1, 3, 50, 130}) {
                std::vector<float> x = randn(static_cast<size_t>(n * H), 5);
                const auto [ids, wts] = random_routing(n, K, E, 9);
                const std::vector<float> ref = composed_moe_reference(ws, x, ids, wts, n, K, H, I);
                Dev<float> dx(x), dw(wts), dg(static_cast<size_t>(n * K * I)),
                    du(static_cast<size_t>(n * K * I)), da(static_cast<size_t>(n * K * I)),
                    dpo(static_cast<size_t>(n * K * H)), dmix(static_cast<size_t>(n * H));
                Dev<int32_t> dids(ids), doff(static_cast<size_t>(E + 1)), dord(static_cast<size_t>(n * K));
                if (n == 1) {
                    // Unfused: gate and up, SwiGLU, the down projection; every column split, the
                    // code-word instances (4/8-bit) and the generic ones (every type).
                    const bool vec = vector_layout(ws[0]->dev);
                    for (int split : {0, 1, 2, 4, 8})
                        for (bool qv : {false, vec}) {
                            lc.forced_split = split;
                            const std::string what = std::string(kernels::weight_type_name(type)) +
                                                     " K=" + std::to_string(K) + " split " +
                                                     std::to_string(split) + (qv ? " words" : " generic");
                            moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), dg.get(), du.get(),
                                               nullptr, nullptr, qv, nullptr);
                            swiglu(dg.get(), du.get(), K * I, da.get(), nullptr);
                            moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, da.get(), nullptr, qv,
                                            dmix.get(), nullptr);
                            EXPECT_LT(rel_err(dmix.host(), ref), 1e-5) << what;
                            // Fused: SwiGLU in the gate/up launch.
                            Dev<float> da2(static_cast<size_t>(K * I)), dmix2(static_cast<size_t>(H));
                            moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), nullptr, nullptr,
                                               da2.get(), nullptr, qv, nullptr);
                            EXPECT_LT(rel_err(da2.host(), da.host()), 1e-5) << what << " fused act";
                            moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, da2.get(), nullptr, qv,
                                            dmix2.get(), nullptr);
                            EXPECT_LT(rel_err(dmix2.host(), ref), 1e-5) << what << " fused";
                        }
                    lc.forced_split = 0;
                } else {
                    lc.tensor_cores = n != 50;  // 50: the SIMT kernel, else tensor cores
                    moe_group(dids.get(), n * K, E, doff.get(), dord.get(), nullptr);
                    moe_matmul(lc, dt, 0, E, doff.get(), dord.get(), n * K, true, K, false, I, H, dx.get(),
                               dg.get(), nullptr);
                    moe_matmul(lc, dt, 1, E, doff.get(), dord.get(), n * K, true, K, false, I, H, dx.get(),
                               du.get(), nullptr);
                    swiglu(dg.get(), du.get(), n * K * I, da.get(), nullptr);
                    moe_matmul(lc, dt, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I, da.get(),
                               dpo.get(), nullptr);
                    moe_combine(dpo.get(), dw.get(), n, K, H, dmix.get(), nullptr);
                    // The ranks of an expert-parallel group (R = 2, 3): each groups and combines only its
                    // own experts' pairs (the rows of the others' it leaves unwritten, so stale values
                    // there must not reach the sum); the ranks' outputs add up to the whole.
                    for (int R : {2, 3}) {
                        std::vector<float> sum(static_cast<size_t>(n * H), 0.0f);
                        for (int r = 0; r < R; ++r) {
                            Dev<float> stale_po(std::vector<float>(static_cast<size_t>(n * K * H), NAN));
                            Dev<float> rmix(static_cast<size_t>(n * H));
                            moe_group(dids.get(), n * K, E, doff.get(), dord.get(), nullptr, R, r);
                            moe_matmul(lc, dt, 0, E, doff.get(), dord.get(), n * K, true, K, false, I, H,
                                       dx.get(), dg.get(), nullptr);
                            moe_matmul(lc, dt, 1, E, doff.get(), dord.get(), n * K, true, K, false, I, H,
                                       dx.get(), du.get(), nullptr);
                            swiglu(dg.get(), du.get(), n * K * I, da.get(), nullptr);
                            moe_matmul(lc, dt, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I,
                                       da.get(), stale_po.get(), nullptr);
                            moe_combine(stale_po.get(), dw.get(), n, K, H, rmix.get(), nullptr, dids.get(), R,
                                        r);
                            const std::vector<float> part = rmix.host();
                            for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
                        }
                        EXPECT_LT(rel_err(sum, ref), 1e-5)
                            << kernels::weight_type_name(type) << " n=" << n << " over " << R << " ranks";
                    }
                    lc.tensor_cores = true;
                }
                EXPECT_LT(rel_err(dmix.host(), ref), 1e-5) << kernels::weight_type_name(type) << " n=" << n;
            }
        }
}

// The routed decode launches when the down projection's staged inputs pass 48 KB (8 experts of
// 1408 inputs, GLM-4.5-Air's shape: 50 KB), so the down launch opts in to more shared memory.
TEST(CudaOps, MoeDecodeWithWideStagedDownInputsMatchesComposedReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    const int64_t E = 8, H = 256, I = 1408, K = 8;
    std::vector<std::unique_ptr<TestWeight>> ws;
    std::vector<DevWeight> table;
    for (int64_t e = 0; e < E; ++e) {
        ws.push_back(make_weight(kernels::WeightType::kQ4, I, H, 64, static_cast<uint32_t>(700 + 3 * e)));
        ws.push_back(make_weight(kernels::WeightType::kQ4, I, H, 64, static_cast<uint32_t>(701 + 3 * e)));
        ws.push_back(make_weight(kernels::WeightType::kQ4, H, I, 32, static_cast<uint32_t>(702 + 3 * e)));
        for (int j = 0; j < 3; ++j) table.push_back(ws[static_cast<size_t>(3 * e + j)]->dev);
    }
    Dev<DevWeight> dtable(table);
    const DevWeight* dt = dtable.get();
    std::vector<float> x = randn(static_cast<size_t>(H), 5);
    const auto [ids, wts] = random_routing(1, K, E, 11);
    const std::vector<float> ref = composed_moe_reference(ws, x, ids, wts, 1, K, H, I);
    Dev<float> dx(x), dw(wts), dact(static_cast<size_t>(K * I)), dmix(static_cast<size_t>(H));
    Dev<int32_t> dids(ids);
    for (int split : {0, 1, 8}) {
        lc.forced_split = split;
        moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), nullptr, nullptr, dact.get(), nullptr, true,
                           nullptr);
        moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, dact.get(), nullptr, true, dmix.get(),
                        nullptr);
        EXPECT_LT(rel_err(dmix.host(), ref), 1e-5) << "split " << split;
    }
    lc.forced_split = 0;
}

// The grouped int8 MoE products (prefill) against the composed int8 reference: each expert's
// SwiGLU MLP with its products' activations quantised per block of 32.
TEST(CudaOps, GroupedMoeInt8MatchesComposedInt8Reference) {
    REQUIRE_GPU();
    for (auto type : {kernels::WeightType::kQ4, kernels::WeightType::kQ8})
        for (int64_t K : {4, 10}) {
            const int64_t E = 16, H = 256, I = 128;
            std::vector<std::unique_ptr<TestWeight>> ws;
            std::vector<DevWeight> table;
            for (int64_t e = 0; e < E; ++e) {
                ws.push_back(make_weight(type, I, H, 64, static_cast<uint32_t>(2000 + 3 * e)));
                ws.push_back(make_weight(type, I, H, 64, static_cast<uint32_t>(2001 + 3 * e)));
                ws.push_back(make_weight(type, H, I, 64, static_cast<uint32_t>(2002 + 3 * e)));
                for (size_t j = ws.size() - 3; j < ws.size(); ++j)
                    ws[j]->view.activations = kernels::Activations::kInt8;
                for (int j = 0; j < 3; ++j) table.push_back(ws[static_cast<size_t>(3 * e + j)]->dev);
            }
            Dev<DevWeight> dtable(table);
            const DevWeight* dt = dtable.get();
            const int bits = type == kernels::WeightType::kQ4 ? 4 : 8;
            for (int64_t n : {17, 130, 300}) {
                std::vector<float> x = randn(static_cast<size_t>(n * H), 6);
                const auto [ids, wts] = random_routing(n, K, E, 11);
                for (int32_t e : ids) ASSERT_TRUE(ws[e * 3]->view.int8_activations());
                const std::vector<float> ref = composed_moe_reference(ws, x, ids, wts, n, K, H, I);
                const int64_t cap = n * K * std::max(H, I);
                Dev<float> dx(x), dw(wts), dg(static_cast<size_t>(n * K * I)),
                    du(static_cast<size_t>(n * K * I)), da(static_cast<size_t>(n * K * I)),
                    dpo(static_cast<size_t>(n * K * H)), dmix(static_cast<size_t>(n * H)),
                    dd(static_cast<size_t>(int8_scale_elements(cap))),
                    ds(static_cast<size_t>(int8_scale_elements(cap)));
                Dev<int8_t> dq(static_cast<size_t>(cap));
                Dev<int32_t> dids(ids), doff(static_cast<size_t>(E + 1)), dord(static_cast<size_t>(n * K));
                const Int8Rows xq{dq.get(), dd.get(), ds.get(), cap};
                moe_group(dids.get(), n * K, E, doff.get(), dord.get(), nullptr);
                quantize_rows_int8(dx.get(), n, H, xq, nullptr);
                moe_matmul_int8(bits, 64, dt, 0, E, doff.get(), dord.get(), n * K, true, K, false, I, H, xq,
                                dg.get(), nullptr);
                moe_matmul_int8(bits, 64, dt, 1, E, doff.get(), dord.get(), n * K, true, K, false, I, H, xq,
                                du.get(), nullptr);
                swiglu(dg.get(), du.get(), n * K * I, da.get(), nullptr);
                quantize_rows_int8(da.get(), n * K, I, xq, nullptr);
                moe_matmul_int8(bits, 64, dt, 2, E, doff.get(), dord.get(), n * K, false, 1, true, H, I, xq,
                                dpo.get(), nullptr);
                moe_combine(dpo.get(), dw.get(), n, K, H, dmix.get(), nullptr);
                // A near-tie in the SwiGLU output's rounding to int8 may land on the other code than
                // the reference's (f32 sums in another order): allow a few such flips' worth.
                EXPECT_LT(rel_err(dmix.host(), ref), 2e-3) << kernels::weight_type_name(type) << " n=" << n;
            }
        }
}

TEST(CudaOps, NormsMatchReference) {
    REQUIRE_GPU();
    for (int64_t dim : {16, 128, 2048, 4096}) {
        const int64_t n = 5;
        std::vector<float> x = randn(static_cast<size_t>(n * dim), 3), w = randn(static_cast<size_t>(dim), 4),
                           z = randn(static_cast<size_t>(n * dim), 6);
        std::vector<float> ref(x.size()), ref_g(x.size()), ref_l2(x.size());
        for (int64_t t = 0; t < n; ++t) {
            kernels::reference::rms_norm(x.data() + t * dim, w.data(), dim, 1e-6f, ref.data() + t * dim);
            kernels::reference::rms_norm_gated(x.data() + t * dim, z.data() + t * dim, w.data(), dim, 1e-6f,
                                               ref_g.data() + t * dim);
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[t * dim + i]) * x[t * dim + i];
            const float inv = 0.5f / std::sqrt(static_cast<float>(ss) + 1e-6f);
            for (int64_t i = 0; i < dim; ++i) ref_l2[t * dim + i] = x[t * dim + i] * inv;
        }
        Dev<float> dx(x), dw(w), dz(z), dy(x.size()), dg(x.size()), dl(x.size());
        const HeadLayout L{n, 1, dim, dim, 0, dim, 0};
        row_norm(dx.get(), dw.get(), L, 1e-6f, false, 1.0f, dy.get(), nullptr);
        rms_norm_gated(dx.get(), dz.get(), dw.get(), n, dim, 1e-6f, dg.get(), nullptr);
        row_norm(dx.get(), nullptr, L, 1e-6f, true, 0.5f, dl.get(), nullptr);
        EXPECT_LT(rel_err(dy.host(), ref), 1e-5) << dim;
        EXPECT_LT(rel_err(dg.host(), ref_g), 1e-5) << dim;
        EXPECT_LT(rel_err(dl.host(), ref_l2), 1e-5) << dim;
    }
}

TEST(CudaOps, RopeMatchesReference) {
    REQUIRE_GPU();
    for (int64_t pos0 : {0, 7, 40000}) {
        for (auto [hd, rot] : {std::pair<int64_t, int64_t>{128, 128}, {256, 64}, {64, 32}}) {
            const int64_t n = 3, heads = 4;
            std::vector<float> x = randn(static_cast<size_t>(n * heads * hd), 11), ref = x;
            for (int64_t t = 0; t < n; ++t)
                kernels::reference::rope_neox(ref.data() + t * heads * hd, heads, hd, rot, pos0 + t, 1e7f);
            Dev<float> dx(x);
            Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
            rope_neox(dx.get(), n, heads, hd, rot, dpos.get(), RopeParams{1e7f}, nullptr);
            EXPECT_LT(rel_err(dx.host(), ref), 1e-5) << "pos " << pos0 << " hd " << hd;
            // Scaled (YaRN-style frequencies and attention factor) against rope_neox_table.
            std::vector<float> inv(static_cast<size_t>(rot / 2));
            for (size_t i = 0; i < inv.size(); ++i)
                inv[i] = 1.0f / std::pow(1e6f, 2.0f * i / rot) / (i > 3 ? 4.0f : 1.0f);
            std::vector<float> ref_y = x;
            for (int64_t t = 0; t < n; ++t)
                kernels::reference::rope_neox_table(ref_y.data() + t * heads * hd, heads, hd, rot, pos0 + t,
                                                    inv.data(), 1.1386f);
            Dev<float> dy(x), dinv(inv);
            rope_neox(dy.get(), n, heads, hd, rot, dpos.get(), RopeParams{1e7f, dinv.get(), 1.1386f},
                      nullptr);
            EXPECT_LT(rel_err(dy.host(), ref_y), 1e-5) << "yarn pos " << pos0 << " hd " << hd;
        }
    }
}

TEST(CudaOps, AttentionMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
    };
    for (const Case& c :
         {Case{1, 0, 4, 2, 64}, Case{1, 300, 16, 2, 256}, Case{7, 5, 8, 8, 128}, Case{70, 0, 4, 1, 128},
          Case{3, 1000, 2, 2, 32}, Case{1, 4000, 16, 2, 256}, Case{1, 63, 4, 4, 24}, Case{5, 9, 4, 2, 40}}) {
        const int64_t rows = c.start + c.n_q;
        std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1),
                           k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                           v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3);
        std::vector<float> ref(q.size());
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
        kernels::reference::attention(q.data(), k.data(), v.data(), c.n_q, c.start, c.nh, c.nkv, c.hd, scale,
                                      ref.data(), nullptr);
        Dev<float> dq(q), dk(k), dv(v), dout(q.size());
        Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start)});
        attention(dq.get(), dk.get(), dv.get(), c.n_q, dpos.get(), c.nh, c.nkv, c.hd, scale, nullptr,
                  dout.get(), nullptr, 0, nullptr);
        EXPECT_LT(rel_err(dout.host(), ref), 1e-5) << c.n_q << " " << c.start << " " << c.hd;
        if (c.n_q == 1) {  // the split (flash-decoding) form, with a capacity beyond the keys
            const int64_t cap = rows + 500;
            Dev<float> split(static_cast<size_t>(attention_split_scratch_floats(c.nh, c.hd, cap))),
                dout2(q.size());
            attention(dq.get(), dk.get(), dv.get(), 1, dpos.get(), c.nh, c.nkv, c.hd, scale, nullptr,
                      dout2.get(), split.get(), cap, nullptr);
            EXPECT_LT(rel_err(dout2.host(), ref), 1e-5) << "split, start " << c.start << " hd " << c.hd;
        }
    }
}

TEST(CudaOps, Conv1dSiluMatchesReference) {
    REQUIRE_GPU();
    for (int64_t n : {1, 6, 100}) {
        for (int64_t kernel : {2, 4}) {
            const int64_t ch = 300;
            std::vector<float> x = randn(static_cast<size_t>(n * ch), 1),
                               w = randn(static_cast<size_t>(ch * kernel), 2),
                               state = randn(static_cast<size_t>((kernel - 1) * ch), 3);
            std::vector<float> ref_y(x.size()), ref_state = state;
            kernels::reference::conv1d_silu(x.data(), n, ch, kernel, w.data(), ref_state.data(),
                                            ref_state.data(), ref_y.data());
            Dev<float> dx(x), dw(w), ds(state), dy(x.size());
            conv1d_silu(dx.get(), n, ch, kernel, dw.get(), ds.get(), ds.get(), dy.get(), nullptr);
            EXPECT_LT(rel_err(dy.host(), ref_y), 1e-5) << n;
            EXPECT_LT(rel_err(ds.host(), ref_state), 1e-6) << n;
            // Out of place: the new state elsewhere, the old one untouched.
            Dev<float> ds_in(state), ds_out(state.size()), dy2(x.size());
            conv1d_silu(dx.get(), n, ch, kernel, dw.get(), ds_in.get(), ds_out.get(), dy2.get(), nullptr);
            EXPECT_EQ(dy2.host(), dy.host()) << n;
            EXPECT_EQ(ds_out.host(), ds.host()) << n;
            EXPECT_EQ(ds_in.host(), state) << n;
        }
    }
}

// q, k L2-normalised per head (as the model feeds them), gates in their trained ranges.
TEST(CudaOps, GatedDeltaMatchesRecurrentAndChunkedReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n, nk, nv, dk, dv;
    };
    for (const Case& c : {Case{1, 2, 4, 128, 128}, Case{5, 1, 2, 64, 32}, Case{70, 2, 4, 128, 128},
                          Case{130, 4, 4, 32, 64}, Case{9, 2, 4, 16, 24}, Case{3, 1, 1, 256, 40}}) {
        auto normed = [&](uint32_t seed, float scale) {
            std::vector<float> v = randn(static_cast<size_t>(c.n * c.nk * c.dk), seed);
            for (int64_t r = 0; r < c.n * c.nk; ++r) {
                double ss = 0;
                for (int64_t i = 0; i < c.dk; ++i)
                    ss += static_cast<double>(v[r * c.dk + i]) * v[r * c.dk + i];
                for (int64_t i = 0; i < c.dk; ++i)
                    v[r * c.dk + i] *= static_cast<float>(scale / std::sqrt(ss));
            }
            return v;
        };
        std::vector<float> q = normed(1, 1.0f / std::sqrt(static_cast<float>(c.dk))), k = normed(2, 1.0f);
        std::vector<float> v = randn(static_cast<size_t>(c.n * c.nv * c.dv), 3);
        std::vector<float> beta(static_cast<size_t>(c.n * c.nv)), g(beta.size());
        std::mt19937 rng(4);
        std::uniform_real_distribution<float> ub(0.05f, 0.95f), ug(-2.0f, -0.01f);
        for (auto& b : beta) b = ub(rng);
        for (auto& x : g) x = ug(rng);
        std::vector<float> state0 = randn(static_cast<size_t>(c.nv * c.dk * c.dv), 5, 0.1f);
        std::vector<float> ref_out(v.size()), ref_state = state0;
        std::vector<float> chk_out(v.size()), chk_state = state0;
        kernels::reference::gated_delta_recurrent(q.data(), k.data(), v.data(), beta.data(), g.data(), c.n,
                                                  c.nk, c.nv, c.dk, c.dv, ref_state.data(), ref_state.data(),
                                                  ref_out.data(), nullptr);
        kernels::reference::gated_delta_chunked(q.data(), k.data(), v.data(), beta.data(), g.data(), c.n,
                                                c.nk, c.nv, c.dk, c.dv, chk_state.data(), chk_state.data(),
                                                chk_out.data(), nullptr);
        Dev<float> dq(q), dk(k), dv(v), db(beta), dg(g), ds(state0), dout(v.size());
        gated_delta(dq.get(), dk.get(), dv.get(), db.get(), dg.get(), c.n, c.nk, c.nv, c.dk, c.dv, ds.get(),
                    ds.get(), dout.get(), nullptr);
        const auto out = dout.host(), st = ds.host();
        Dev<float> ds_in(state0), ds_out(state0.size()), dout2(v.size());
        gated_delta(dq.get(), dk.get(), dv.get(), db.get(), dg.get(), c.n, c.nk, c.nv, c.dk, c.dv,
                    ds_in.get(), ds_out.get(), dout2.get(), nullptr);
        EXPECT_EQ(dout2.host(), out) << "out of place, n " << c.n;
        EXPECT_EQ(ds_out.host(), st) << "out of place, n " << c.n;
        EXPECT_EQ(ds_in.host(), state0) << "out of place leaves the old state, n " << c.n;
        EXPECT_LT(rel_err(out, ref_out), 1e-4) << "n " << c.n;
        EXPECT_LT(rel_err(st, ref_state), 1e-4) << "n " << c.n;
        EXPECT_LT(rel_err(out, chk_out), 1e-4) << "chunked, n " << c.n;
        EXPECT_LT(rel_err(st, chk_state), 1e-4) << "chunked, n " << c.n;
        if (c.nk == c.nv) continue;
        // Tiled value heads (a GGUF of Qwen3.5): value head j takes key head j mod nk — the same as
        // running with q and k laid out per value head (head j a copy of key head j mod nk), the CPU's form.
        std::vector<float> qx(static_cast<size_t>(c.n * c.nv * c.dk)), kx(qx.size());
        for (int64_t t = 0; t < c.n; ++t)
            for (int64_t j = 0; j < c.nv; ++j)
                for (int64_t i = 0; i < c.dk; ++i) {
                    qx[(t * c.nv + j) * c.dk + i] = q[(t * c.nk + j % c.nk) * c.dk + i];
                    kx[(t * c.nv + j) * c.dk + i] = k[(t * c.nk + j % c.nk) * c.dk + i];
                }
        Dev<float> dqx(qx), dkx(kx), dst(state0), dsx(state0), dot(v.size()), dox(v.size());
        gated_delta(dq.get(), dk.get(), dv.get(), db.get(), dg.get(), c.n, c.nk, c.nv, c.dk, c.dv, dst.get(),
                    dst.get(), dot.get(), nullptr, /*v_heads_tiled=*/true);
        gated_delta(dqx.get(), dkx.get(), dv.get(), db.get(), dg.get(), c.n, c.nv, c.nv, c.dk, c.dv,
                    dsx.get(), dsx.get(), dox.get(), nullptr);
        EXPECT_EQ(dot.host(), dox.host()) << "tiled, n " << c.n;
        EXPECT_EQ(dst.host(), dsx.host()) << "tiled, n " << c.n;
        if (c.nk > 1) {  // (one key head: both orders give every value head key head 0)
            EXPECT_GT(rel_err(dot.host(), out), 1e-3) << "tiled and grouped heads differ, n " << c.n;
        }
    }
}

// A residual add and RMS norm in a product's prologue (MatvecMulti::norm) against add_rms_norm +
// the plain product: the outputs, the moved residual and the normalised input, for chunk-path
// weights (every split, with and without the fused top-k), a 16-bit weight (add_rms_norm_to runs
// first) and a weight whose columns are off the chunk layout.
TEST(CudaOps, MatvecMultiNormPrologueMatchesAddRmsNorm) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    using T = kernels::WeightType;
    struct Case {
        T type;
        int64_t rows, cols;
        int group;
    };
    uint32_t seed = 300;
    for (const Case& c : {Case{T::kQ4, 1000, 2048, 64}, Case{T::kQ8, 256, 2048, 64},
                          Case{T::kQ4, 64, 4096, 64}, Case{T::kBF16, 70, 512, 0}, Case{T::kQ4, 40, 48, 16}}) {
        for (int split : {0, 1, 2, 4, 8}) {
            for (bool topk : {false, true}) {
                lc.forced_split = split;
                const int64_t H = c.cols, K = 4;
                auto w1 = make_weight(c.type, c.rows, H, c.group, seed++);
                auto w2 = make_weight(c.type, 37, H, c.group, seed++);
                const std::vector<float> resid = randn(static_cast<size_t>(H), seed++),
                                         add = randn(static_cast<size_t>(H), seed++),
                                         weight = randn(static_cast<size_t>(H), seed++);
                // Reference: add_rms_norm in place, then the product of its output.
                Dev<float> rx(resid), radd(add), rw(weight), rnorm(static_cast<size_t>(H)),
                    ry1(static_cast<size_t>(c.rows)), ry2(37);
                add_rms_norm(rx.get(), radd.get(), rw.get(), 1, H, 1e-6f, rnorm.get(), nullptr);
                MatvecMulti ref;
                ref.add(w1->dev, ry1.get());
                ref.add(w2->dev, ry2.get());
                matvec_multi(lc, ref, rnorm.get(), nullptr);
                // Fused.
                Dev<float> fx(resid), fadd(add), fw(weight), fout(static_cast<size_t>(H)),
                    fnorm(static_cast<size_t>(H)), fy1(static_cast<size_t>(c.rows)), fy2(37),
                    tw(static_cast<size_t>(K));
                Dev<int32_t> ti(static_cast<size_t>(K));
                Dev<uint32_t> counter(1);
                MatvecMulti m;
                m.add(w1->dev, fy1.get());
                m.add(w2->dev, fy2.get());
                m.norm = NormIn{fx.get(), fadd.get(), fw.get(), 1e-6f, fout.get(), fnorm.get()};
                if (topk) {
                    m.topk.which = 1;
                    m.topk.router.n_experts = 37;
                    m.topk.router.k = K;
                    m.topk.ids = ti.get();
                    m.topk.weights = tw.get();
                    m.topk.counter = counter.get();
                }
                matvec_multi(lc, m, nullptr, nullptr);
                const std::string what = std::string(kernels::weight_type_name(c.type)) + " " +
                                         std::to_string(c.rows) + "x" + std::to_string(H) + " split " +
                                         std::to_string(split) + (topk ? " top-k" : "");
                EXPECT_LT(rel_err(fy1.host(), ry1.host()), 1e-5) << what;
                EXPECT_LT(rel_err(fy2.host(), ry2.host()), 1e-5) << what;
                EXPECT_LT(rel_err(fout.host(), rx.host()), 1e-6) << what << ": the moved residual";
                EXPECT_LT(rel_err(fnorm.host(), rnorm.host()), 1e-5) << what << ": the normalised input";
                EXPECT_EQ(fx.host(), resid) << what << ": resid_in must stay unchanged";
                if (topk) {
                    Dev<float> w_ref(static_cast<size_t>(K));
                    Dev<int32_t> i_ref(static_cast<size_t>(K));
                    router_topk(fy2.get(), 1, m.topk.router, i_ref.get(), w_ref.get(), nullptr);
                    EXPECT_EQ(ti.host(), i_ref.host()) << what;
                    EXPECT_EQ(counter.host()[0], 0u) << what;
                }
            }
        }
    }
    lc.forced_split = 0;
}

// The shared expert in the routed decode launches (its act as slot n_ids of the gate/up launch,
// its sigmoid-gated output in the down launch) against the separate SwiGLU down projection, for
// code-word and 16-bit shared experts and every column split.
TEST(CudaOps, MoeWithSharedExpertMatchesSeparateForms) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    const int64_t E = 8, H = 256, I = 128, Is = 192, K = 4;
    std::vector<std::unique_ptr<TestWeight>> ws;
    std::vector<DevWeight> table;
    for (int64_t e = 0; e < E; ++e)
        for (int j = 0; j < 3; ++j) {
            const uint32_t seed = static_cast<uint32_t>(50 + 3 * e + j);
            ws.push_back(j < 2 ? make_weight(kernels::WeightType::kQ4, I, H, 64, seed)
                               : make_weight(kernels::WeightType::kQ4, H, I, 64, seed));
            table.push_back(ws.back()->dev);
        }
    Dev<DevWeight> dtable(table);
    const DevWeight* dt = dtable.get();
    const std::vector<int32_t> ids = {3, 0, 7, 5};
    const std::vector<float> wts = {0.4f, 0.3f, 0.2f, 0.1f}, logit = {0.7f};
    const std::vector<float> x = randn(static_cast<size_t>(H), 1);
    for (auto type : {kernels::WeightType::kQ4, kernels::WeightType::kQ8, kernels::WeightType::kBF16}) {
        auto sg = make_weight(type, Is, H, 64, 7), su = make_weight(type, Is, H, 64, 8),
             sd = make_weight(type, H, Is, 64, 9);
        const bool vec = type != kernels::WeightType::kBF16;  // the routed experts are 4-bit
        for (int split : {0, 1, 8})
            for (bool gated : {true, false}) {
                const bool qv = vec && split != 1;  // split 1: also the generic instances
                lc.forced_split = split;
                Dev<int32_t> dids(ids);
                Dev<float> dx(x), dw(wts), dlogit(logit), dact(static_cast<size_t>(K * I)),
                    dact2(static_cast<size_t>(K * I + Is)), dg(static_cast<size_t>(Is)),
                    du(static_cast<size_t>(Is)), dsep(static_cast<size_t>(H)), dfold(static_cast<size_t>(H));
                // Separate: routed experts, then the shared expert's gated add.
                moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), nullptr, nullptr, dact.get(),
                                   nullptr, qv, nullptr);
                moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, dact.get(), nullptr, qv, dsep.get(),
                                nullptr);
                MatvecMulti m;
                m.add(sg->dev, dg.get());
                m.add(su->dev, du.get());
                matvec_multi(lc, m, dx.get(), nullptr);
                if (gated) {
                    swiglu_down_matvec(sd->dev, dg.get(), du.get(), dlogit.get(), dsep.get(), nullptr);
                } else {
                    Dev<float> dsh(static_cast<size_t>(H));
                    swiglu_down_matvec(sd->dev, dg.get(), du.get(), nullptr, dsh.get(), nullptr);
                    axpy(1.0f, dsh.get(), H, dsep.get(), nullptr);
                }
                SharedExpert shared;
                shared.gate = sg->dev;
                shared.up = su->dev;
                shared.down = sd->dev;
                shared.gate_logit = gated ? dlogit.get() : nullptr;
                moe_matvec_gate_up(lc, dt, dids.get(), K, I, H, dx.get(), nullptr, nullptr, dact2.get(),
                                   &shared, qv, nullptr);
                moe_down_matvec(lc, dt, dids.get(), dw.get(), K, H, I, dact2.get(), &shared, qv, dfold.get(),
                                nullptr);
                EXPECT_LT(rel_err(dfold.host(), dsep.host()), 1e-5)
                    << kernels::weight_type_name(type) << " gated " << gated << " split " << split;
            }
    }
    lc.forced_split = 0;
}

// The device logits summary against a pass over the row: the first index of the maximum (ties
// included), max and Σ exp(l − max).
TEST(CudaOps, LogitsSummaryMatchesHostPass) {
    REQUIRE_GPU();
    for (int64_t V : {7, 1000, 151936, 248320}) {
        std::vector<float> l = randn(static_cast<size_t>(V), static_cast<uint32_t>(V), 3.0f);
        l[static_cast<size_t>(V / 3)] = 20.0f;
        l[static_cast<size_t>(V - 1)] = 20.0f;  // a tie: the first index wins
        if (V > 10) l[5] = -INFINITY;
        float mx = -INFINITY;
        int32_t arg = -1;
        for (int64_t i = 0; i < V; ++i)
            if (l[i] > mx) {
                mx = l[i];
                arg = static_cast<int32_t>(i);
            }
        double sum = 0;
        for (float v : l) sum += std::exp(static_cast<double>(v - mx));
        Dev<float> dl(l), partial(static_cast<size_t>(logits_summary_scratch_floats()));
        Dev<uint32_t> counter(1);
        Dev<uint8_t> dout(sizeof(DevLogitsSummary));
        for (int rep = 0; rep < 2; ++rep) {
            logits_summary(dl.get(), V, partial.get(), counter.get(),
                           reinterpret_cast<DevLogitsSummary*>(dout.get()), nullptr);
            const std::vector<uint8_t> bytes = dout.host();
            DevLogitsSummary got;
            std::memcpy(&got, bytes.data(), sizeof got);
            EXPECT_EQ(got.argmax, arg) << V;
            EXPECT_EQ(got.max, mx) << V;
            EXPECT_NEAR(got.sum_exp, sum, 1e-5 * sum) << V;
            EXPECT_EQ(counter.host()[0], 0u);
        }
    }
}

TEST(CudaOps, ElementwiseMatchReference) {
    REQUIRE_GPU();
    const int64_t n = 1000;
    std::vector<float> a = randn(n, 1), b = randn(n, 2), y = randn(n, 3);
    std::vector<float> ref_sw(n), ref_axpy = y;
    kernels::reference::swiglu(a.data(), b.data(), n, ref_sw.data());
    kernels::reference::axpy(0.7f, a.data(), n, ref_axpy.data());
    Dev<float> da(a), db(b), dy(y), dsw(n);
    swiglu(da.get(), db.get(), n, dsw.get(), nullptr);
    axpy(0.7f, da.get(), n, dy.get(), nullptr);
    EXPECT_LT(rel_err(dsw.host(), ref_sw), 1e-6);
    EXPECT_LT(rel_err(dy.host(), ref_axpy), 1e-6);
}

// The fused decode forms: several projections of one input in one launch, SwiGLU inside the down
// projection with the shared expert's sigmoid-gated add, the residual add inside the norm.
TEST(CudaOps, FusedDecodeFormsMatchReference) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    const int64_t H = 320, I = 96;
    auto wg = make_weight(kernels::WeightType::kQ4, I, H, 64, 1);
    auto wu = make_weight(kernels::WeightType::kQ8, I, H, 32, 2);
    auto wr = make_weight(kernels::WeightType::kBF16, 7, H, 0, 3);
    auto ws = make_weight(kernels::WeightType::kF32, 1, H, 0, 4);
    auto wd = make_weight(kernels::WeightType::kQ4, H, I, 32, 5);
    std::vector<float> x = randn(H, 6), g(I), u(I), r(7), sg(1), act(I), down(H);
    kernels::reference::matvec(wg->view, x.data(), g.data(), nullptr);
    kernels::reference::matvec(wu->view, x.data(), u.data(), nullptr);
    kernels::reference::matvec(wr->view, x.data(), r.data(), nullptr);
    kernels::reference::matvec(ws->view, x.data(), sg.data(), nullptr);
    kernels::reference::swiglu(g.data(), u.data(), I, act.data());
    kernels::reference::matvec(wd->view, act.data(), down.data(), nullptr);
    std::vector<float> mix0 = randn(H, 7), mix_ref = mix0;
    kernels::reference::axpy(1.0f / (1.0f + std::exp(-sg[0])), down.data(), H, mix_ref.data());
    Dev<float> dx(x), dg(I), du(I), dr(7), dsg(1), dmix(mix0), dout(H);
    MatvecMulti m;
    m.add(wg->dev, dg.get());
    m.add(wu->dev, du.get());
    m.add(wr->dev, dr.get());
    m.add(ws->dev, dsg.get());
    matvec_multi(lc, m, dx.get(), nullptr);
    EXPECT_LT(rel_err(dg.host(), g), 1e-5);
    EXPECT_LT(rel_err(du.host(), u), 1e-5);
    EXPECT_LT(rel_err(dr.host(), r), 1e-5);
    EXPECT_LT(rel_err(dsg.host(), sg), 1e-5);
    swiglu_down_matvec(wd->dev, dg.get(), du.get(), dsg.get(), dmix.get(), nullptr);
    EXPECT_LT(rel_err(dmix.host(), mix_ref), 1e-5);
    swiglu_down_matvec(wd->dev, dg.get(), du.get(), nullptr, dout.get(), nullptr);
    EXPECT_LT(rel_err(dout.host(), down), 1e-5);

    const int64_t n = 3, dim = 2048;
    std::vector<float> xs = randn(n * dim, 8), add = randn(n * dim, 9), w = randn(dim, 10), ref(n * dim),
                       xsum = xs;
    for (int64_t i = 0; i < n * dim; ++i) xsum[i] += add[i];
    for (int64_t t = 0; t < n; ++t)
        kernels::reference::rms_norm(xsum.data() + t * dim, w.data(), dim, 1e-6f, ref.data() + t * dim);
    Dev<float> dxs(xs), dadd(add), dw(w), dy(n * dim);
    add_rms_norm(dxs.get(), dadd.get(), dw.get(), n, dim, 1e-6f, dy.get(), nullptr);
    EXPECT_LT(rel_err(dxs.host(), xsum), 1e-6);
    EXPECT_LT(rel_err(dy.host(), ref), 1e-5);
}

// ---- fused forms against the unfused kernel sequences they replace --------------------------------

// Qwen2's prep: q/k/v biases and no q/k norm (PrepWeights with null norms), fused against the unfused
// sequence (add_bias_rows ×3 + copy_heads + rope_neox ×2 + write_rows_at ×2) and the CPU reference.
TEST(CudaOps, AttentionPrepWithBiasesAndNoNormMatchesReference) {
    REQUIRE_GPU();
    const int64_t nh = 4, nkv = 2, hd = 64, rot = 64, kvw = nkv * hd;
    const float theta = 1e6f;
    for (int64_t n : {1, 3}) {
        for (int64_t pos0 : {0, 100}) {
            const int64_t rows = pos0 + n;
            std::vector<float> qg = randn(static_cast<size_t>(n * nh * hd), 11),
                               k = randn(static_cast<size_t>(n * kvw), 12),
                               v = randn(static_cast<size_t>(n * kvw), 13),
                               qb = randn(static_cast<size_t>(nh * hd), 14),
                               kb = randn(static_cast<size_t>(kvw), 15),
                               vb = randn(static_cast<size_t>(kvw), 16),
                               cache0 = randn(static_cast<size_t>(rows * kvw), 17);
            Dev<float> dqg(qg), dk(k), dv(v), dqb(qb), dkb(kb), dvb(vb);
            Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
            Dev<float> fq(static_cast<size_t>(n * nh * hd)), fkc(cache0), fvc(cache0);
            attention_prep(dqg.get(), dk.get(), dv.get(),
                           PrepWeights{nullptr, nullptr, dqb.get(), dkb.get(), dvb.get()}, n, nh, nkv, hd,
                           rot, false, 1e-6f, dpos.get(), RopeParams{theta}, fq.get(), nullptr, fkc.get(),
                           fvc.get(), nullptr);
            Dev<float> uqg(qg), uk(k), uv(v), uq(static_cast<size_t>(n * nh * hd)), ukc(cache0), uvc(cache0);
            add_bias_rows(uqg.get(), dqb.get(), n, nh * hd, nullptr);
            add_bias_rows(uk.get(), dkb.get(), n, kvw, nullptr);
            add_bias_rows(uv.get(), dvb.get(), n, kvw, nullptr);
            copy_heads(uqg.get(), HeadLayout{n, nh, hd, nh * hd, hd, nh * hd, hd}, uq.get(), nullptr);
            rope_neox(uq.get(), n, nh, hd, rot, dpos.get(), RopeParams{theta}, nullptr);
            rope_neox(uk.get(), n, nkv, hd, rot, dpos.get(), RopeParams{theta}, nullptr);
            write_rows_at(uk.get(), n, kvw, dpos.get(), ukc.get(), nullptr);
            write_rows_at(uv.get(), n, kvw, dpos.get(), uvc.get(), nullptr);
            const std::string what = "n " + std::to_string(n) + " pos " + std::to_string(pos0);
            const auto q_out = fq.host(), k_cache = fkc.host(), v_cache = fvc.host();
            EXPECT_LT(rel_err(q_out, uq.host()), 1e-6) << what;
            EXPECT_LT(rel_err(k_cache, ukc.host()), 1e-6) << what;
            EXPECT_EQ(v_cache, uvc.host()) << what;
            std::vector<float> ref_q(q_out.size()), ref_k(static_cast<size_t>(n * kvw)), ref_v(ref_k.size());
            for (int64_t t = 0; t < n; ++t) {
                for (int64_t i = 0; i < nh * hd; ++i) ref_q[t * nh * hd + i] = qg[t * nh * hd + i] + qb[i];
                for (int64_t i = 0; i < kvw; ++i) {
                    ref_k[t * kvw + i] = k[t * kvw + i] + kb[i];
                    ref_v[t * kvw + i] = v[t * kvw + i] + vb[i];
                }
                kernels::reference::rope_neox(ref_q.data() + t * nh * hd, nh, hd, rot, pos0 + t, theta);
                kernels::reference::rope_neox(ref_k.data() + t * kvw, nkv, hd, rot, pos0 + t, theta);
            }
            EXPECT_LT(rel_err(q_out, ref_q), 1e-5) << what;
            EXPECT_LT(rel_err(std::vector<float>(k_cache.begin() + pos0 * kvw, k_cache.end()), ref_k), 1e-5)
                << what;
            EXPECT_EQ(std::vector<float>(v_cache.begin() + pos0 * kvw, v_cache.end()), ref_v) << what;
        }
    }
}

// attention_prep against row_norm(q) + copy_heads(gate) + row_norm(k) + rope_neox ×2 +
// write_rows_at ×2 (and, for q and the written k rows, the CPU rms_norm + rope_neox).
TEST(CudaOps, AttentionPrepMatchesUnfusedSequence) {
    REQUIRE_GPU();
    struct Case {
        int64_t nh, nkv, hd, rot;
        bool gated;
    };
    const float eps = 1e-6f, theta = 1e7f;
    // Qwen3.6-35B and Qwen3-Next-80B (16 × 256, 2 kv heads, rotary 64, gated), then other shapes.
    for (const Case& c : {Case{16, 2, 256, 64, true}, Case{8, 8, 128, 128, false}, Case{4, 1, 64, 32, true},
                          Case{2, 2, 40, 20, false}}) {
        for (int64_t n : {1, 3}) {
            for (int64_t pos0 : {0, 1, 40000}) {
                const int64_t qw = c.hd * (c.gated ? 2 : 1), kvw = c.nkv * c.hd, rows = pos0 + n;
                std::vector<float> qg = randn(static_cast<size_t>(n * c.nh * qw), 1),
                                   k = randn(static_cast<size_t>(n * kvw), 2),
                                   v = randn(static_cast<size_t>(n * kvw), 3),
                                   qn = randn(static_cast<size_t>(c.hd), 4),
                                   kn = randn(static_cast<size_t>(c.hd), 5),
                                   cache0 = randn(static_cast<size_t>(rows * kvw), 6);
                Dev<float> dqg(qg), dk(k), dv(v), dqn(qn), dkn(kn);
                Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
                // Unfused, as backend.cpp ran it.
                Dev<float> uq(static_cast<size_t>(n * c.nh * c.hd)),
                    ugate(static_cast<size_t>(n * c.nh * c.hd)), ukc(cache0), uvc(cache0), uk(k);
                const HeadLayout qh{n, c.nh, c.hd, c.nh * qw, qw, c.nh * c.hd, c.hd};
                row_norm(dqg.get(), dqn.get(), qh, eps, false, 1.0f, uq.get(), nullptr);
                if (c.gated) copy_heads(dqg.get() + c.hd, qh, ugate.get(), nullptr);
                const HeadLayout kh{n, c.nkv, c.hd, kvw, c.hd, kvw, c.hd};
                row_norm(uk.get(), dkn.get(), kh, eps, false, 1.0f, uk.get(), nullptr);
                rope_neox(uq.get(), n, c.nh, c.hd, c.rot, dpos.get(), RopeParams{theta}, nullptr);
                rope_neox(uk.get(), n, c.nkv, c.hd, c.rot, dpos.get(), RopeParams{theta}, nullptr);
                write_rows_at(uk.get(), n, kvw, dpos.get(), ukc.get(), nullptr);
                write_rows_at(dv.get(), n, kvw, dpos.get(), uvc.get(), nullptr);
                // Fused.
                Dev<float> fq(static_cast<size_t>(n * c.nh * c.hd)),
                    fgate(static_cast<size_t>(n * c.nh * c.hd)), fkc(cache0), fvc(cache0);
                attention_prep(dqg.get(), dk.get(), dv.get(), PrepWeights{dqn.get(), dkn.get()}, n, c.nh,
                               c.nkv, c.hd, c.rot, c.gated, eps, dpos.get(), RopeParams{theta}, fq.get(),
                               fgate.get(), fkc.get(), fvc.get(), nullptr);
                const std::string what = "heads " + std::to_string(c.nh) + "/" + std::to_string(c.nkv) +
                                         " hd " + std::to_string(c.hd) + " n " + std::to_string(n) + " pos " +
                                         std::to_string(pos0);
                const auto q_out = fq.host(), k_cache = fkc.host();
                EXPECT_LT(rel_err(q_out, uq.host()), 1e-6) << what;
                if (c.gated) {
                    EXPECT_LT(rel_err(fgate.host(), ugate.host()), 1e-6) << what;
                }
                EXPECT_LT(rel_err(k_cache, ukc.host()), 1e-6) << what;
                EXPECT_EQ(fvc.host(), uvc.host()) << what;
                // CPU reference for q and the new key rows.
                std::vector<float> ref_q(q_out.size()), ref_k(static_cast<size_t>(n * kvw)),
                    got_k(k_cache.begin() + pos0 * kvw, k_cache.end());
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t h = 0; h < c.nh; ++h)
                        kernels::reference::rms_norm(qg.data() + (t * c.nh + h) * qw, qn.data(), c.hd, eps,
                                                     ref_q.data() + (t * c.nh + h) * c.hd);
                    for (int64_t h = 0; h < c.nkv; ++h)
                        kernels::reference::rms_norm(k.data() + (t * c.nkv + h) * c.hd, kn.data(), c.hd, eps,
                                                     ref_k.data() + (t * c.nkv + h) * c.hd);
                    kernels::reference::rope_neox(ref_q.data() + t * c.nh * c.hd, c.nh, c.hd, c.rot, pos0 + t,
                                                  theta);
                    kernels::reference::rope_neox(ref_k.data() + t * kvw, c.nkv, c.hd, c.rot, pos0 + t,
                                                  theta);
                }
                EXPECT_LT(rel_err(q_out, ref_q), 1e-5) << what;
                EXPECT_LT(rel_err(got_k, ref_k), 1e-5) << what;
            }
        }
    }
}

// attention with the output gate in its epilogue against attention + mul_sigmoid, for the
// per-query kernel and the split (flash-decoding) decode form.
TEST(CudaOps, AttentionGateEpilogueMatchesMulSigmoid) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
    };
    for (const Case& c : {Case{1, 0, 16, 2, 256}, Case{1, 1, 16, 2, 256}, Case{1, 5000, 16, 2, 256},
                          Case{4, 30, 16, 2, 256}, Case{1, 70, 4, 4, 24}, Case{3, 2, 8, 2, 128}}) {
        const int64_t rows = c.start + c.n_q, width = c.n_q * c.nh * c.hd;
        std::vector<float> q = randn(static_cast<size_t>(width), 1),
                           k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                           v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3),
                           gate = randn(static_cast<size_t>(width), 4);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
        Dev<float> dq(q), dk(k), dv(v), dgate(gate);
        Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start)});
        for (bool split : {false, true}) {
            if (split && c.n_q != 1) continue;
            const int64_t cap = rows + 300;
            Dev<float> scratch(static_cast<size_t>(attention_split_scratch_floats(c.nh, c.hd, cap)));
            float* sp = split ? scratch.get() : nullptr;
            Dev<float> unfused(static_cast<size_t>(width)), fused(static_cast<size_t>(width));
            attention(dq.get(), dk.get(), dv.get(), c.n_q, dpos.get(), c.nh, c.nkv, c.hd, scale, nullptr,
                      unfused.get(), sp, cap, nullptr);
            mul_sigmoid(unfused.get(), dgate.get(), width, nullptr);
            attention(dq.get(), dk.get(), dv.get(), c.n_q, dpos.get(), c.nh, c.nkv, c.hd, scale, dgate.get(),
                      fused.get(), sp, cap, nullptr);
            EXPECT_LT(rel_err(fused.host(), unfused.host()), 1e-6)
                << (split ? "split " : "") << c.n_q << " " << c.start << " " << c.hd;
        }
    }
}

// ---- the KV cache types (kv.cu) ----

using kernels::KvType;

// Heads of every shape a store must get right: Gaussian, a few outlier channels, an all-zero head,
// equal magnitudes of both signs (q4's first-of-equals scale), huge values (saturated f16 scales).
std::vector<float> kv_rows(int64_t rows, int64_t nkv, int64_t hd, uint32_t seed) {
    std::vector<float> x = randn(static_cast<size_t>(rows * nkv * hd), seed);
    for (int64_t r = 0; r < rows * nkv; ++r) {
        float* h = x.data() + r * hd;
        switch (r % 5) {
            case 1: h[3] = 40.0f, h[hd - 1] = -25.0f; break;
            case 2: std::fill(h, h + hd, 0.0f); break;
            case 3:
                for (int64_t i = 0; i < hd; ++i) h[i] = i % 3 == 0 ? -2.0f : (i % 3 == 1 ? 2.0f : 0.5f);
                break;
            case 4: h[1] = 3e6f; break;
            default: break;
        }
    }
    return x;
}

// Where two byte strings first differ ("" when equal): the head and byte in it, both bytes.
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                             int64_t head_bytes) {
    if (got.size() != want.size())
        return "sizes " + std::to_string(got.size()) + " / " + std::to_string(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i]) continue;
        const int64_t head = static_cast<int64_t>(i) / head_bytes;
        std::string out = "head " + std::to_string(head) + " byte " +
                          std::to_string(static_cast<int64_t>(i) % head_bytes) + "; the head's bytes:\n";
        for (const auto* bytes : {&got, &want}) {
            for (int64_t b = 0; b < head_bytes; ++b)
                out += std::to_string((*bytes)[static_cast<size_t>(head * head_bytes + b)]) + " ";
            out += bytes == &got ? "(got)\n" : "(want)";
        }
        return out;
    }
    return "";
}

// Every KV type and head width CUDA serves: kv_store's bytes equal the reference's, K and V, at an
// offset past a device-held first position, and the ring's f16 rows and tags.
TEST(CudaOps, KvStoreMatchesReferenceBitForBit) {
    REQUIRE_GPU();
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (int64_t hd : {8, 16, 32, 64, 128, 256}) {
            if (kernels::kv_shape_error(type, hd) != nullptr) continue;
            const int64_t nkv = 3, n = 7, pos0 = 5, offset = 2, positions = pos0 + offset + n;
            const int64_t row = nkv * kernels::kv_head_bytes(type, hd);
            std::vector<float> k = kv_rows(n, nkv, hd, 11), v = kv_rows(n, nkv, hd, 12);
            std::vector<uint8_t> ref_k(static_cast<size_t>(positions * row)), ref_v(ref_k.size());
            kernels::reference::kv_store(type, k.data(), n, nkv, hd, ref_k.data() + (pos0 + offset) * row);
            kernels::reference::kv_store(type, v.data(), n, nkv, hd, ref_v.data() + (pos0 + offset) * row);
            const int64_t slots = 4 + 64, ring_row = nkv * hd * 2;
            const bool windowed = type != KvType::kF32 && type != KvType::kF16;
            Dev<float> dk(k), dv(v);
            Dev<uint8_t> ck(ref_k.size()), cv(ref_v.size());
            Dev<uint8_t> ring(static_cast<size_t>(slots * (2 * ring_row + 8)));
            Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
            KvCache cache;
            cache.type = type;
            cache.k = ck.get();
            cache.v = cv.get();
            if (windowed) {
                cache.window = 4;
                cache.slots = slots;
                cache.ring = ring.get();
            }
            kv_store(dk.get(), dv.get(), n, offset, dpos.get(), nkv, hd, cache, nullptr);
            const std::string what = std::string(kernels::kv_type_name(type)) + " hd " + std::to_string(hd);
            EXPECT_EQ(first_difference(ck.host(), ref_k, row / nkv), "") << what << ", K";
            EXPECT_EQ(first_difference(cv.host(), ref_v, row / nkv), "") << what << ", V";
            if (!windowed) continue;
            const std::vector<uint8_t> r = ring.host();
            for (int64_t t = 0; t < n; ++t) {
                const int64_t p = pos0 + offset + t, slot = p % slots;
                std::vector<uint8_t> fk(static_cast<size_t>(ring_row)), fv(fk.size());
                kernels::reference::kv_store(KvType::kF16, k.data() + t * nkv * hd, 1, nkv, hd, fk.data());
                kernels::reference::kv_store(KvType::kF16, v.data() + t * nkv * hd, 1, nkv, hd, fv.data());
                EXPECT_EQ(0, std::memcmp(r.data() + slot * ring_row, fk.data(), fk.size())) << what;
                EXPECT_EQ(0, std::memcmp(r.data() + (slots + slot) * ring_row, fv.data(), fv.size())) << what;
                int64_t tag;
                std::memcpy(&tag, r.data() + 2 * slots * ring_row + slot * 8, 8);
                EXPECT_EQ(tag, p) << what;
            }
        }
    }
}

// The f16 ring of a --kv-window as a sequence of `rows` positions leaves it (the last rows' copies,
// tags −1 elsewhere), with the slot of position rows − 3 taken by a later one (a cut-back: that key
// is read from the cache). [slots] rows of K, as many of V, then the int64 tags.
std::vector<uint8_t> window_ring(const std::vector<float>& k, const std::vector<float>& v, int64_t rows,
                                 int64_t nkv, int64_t hd, int64_t window, int64_t slots) {
    const int64_t ring_row = nkv * hd * 2;
    std::vector<uint8_t> ring(static_cast<size_t>(slots * (2 * ring_row + 8)));
    auto* tags = reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row);
    std::fill(tags, tags + slots, int64_t{-1});
    for (int64_t p = std::max<int64_t>(0, rows - slots); p < rows && window > 0; ++p) {
        const int64_t slot = p % slots;
        kernels::reference::kv_store(KvType::kF16, k.data() + p * nkv * hd, 1, nkv, hd,
                                     ring.data() + slot * ring_row);
        kernels::reference::kv_store(KvType::kF16, v.data() + p * nkv * hd, 1, nkv, hd,
                                     ring.data() + (slots + slot) * ring_row);
        tags[slot] = p;
    }
    if (window > 0 && rows > 3) tags[(rows - 3) % slots] = rows - 3 + slots;
    return ring;
}

// Attention read straight from every compressed type against reference::attention_kv (which
// decodes the whole cache), for the per-query kernel and the split forms (steps of up to 16 queries:
// attention_decode.cu at head widths 32-256, with the splits the scratch allows, few and many; one query at
// width 96: the first split kernel), without and with a --kv-window ring (window_ring).
TEST(CudaOps, AttentionOnCompressedKvMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
    };
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (const Case& c : {Case{1, 0, 4, 2, 64}, Case{1, 300, 16, 2, 256}, Case{7, 5, 8, 8, 128},
                              Case{70, 0, 4, 1, 128}, Case{3, 1000, 2, 2, 32}, Case{1, 4000, 16, 2, 256},
                              Case{5, 90, 4, 2, 64}, Case{9, 2000, 16, 2, 256}, Case{16, 700, 32, 4, 128},
                              Case{1, 1500, 12, 4, 128}, Case{1, 500, 8, 2, 96}}) {
            if (kernels::kv_shape_error(type, c.hd) != nullptr) continue;
            // Windows of one split's keys and of three (past some contexts' whole length).
            for (int64_t window : {0, 48, 300}) {
                if (window > 0 && (type == KvType::kF32 || type == KvType::kF16)) continue;
                const int64_t rows = c.start + c.n_q, row = c.nkv * kernels::kv_head_bytes(type, c.hd);
                std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1),
                                   k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                                   v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3);
                std::vector<uint8_t> ck(static_cast<size_t>(rows * row)), cv(ck.size());
                kernels::reference::kv_store(type, k.data(), rows, c.nkv, c.hd, ck.data());
                kernels::reference::kv_store(type, v.data(), rows, c.nkv, c.hd, cv.data());
                const int64_t slots = window + 64, ring_row = c.nkv * c.hd * 2;
                std::vector<uint8_t> ring = window_ring(k, v, rows, c.nkv, c.hd, window, slots);
                const kernels::KvRing host_ring{
                    window, slots, reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row),
                    ring.data(), ring.data() + slots * ring_row};
                std::vector<float> ref(q.size());
                const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
                kernels::reference::attention_kv(type, q.data(), ck.data(), cv.data(),
                                                 window > 0 ? &host_ring : nullptr, c.n_q, c.start, c.nh,
                                                 c.nkv, c.hd, scale, ref.data(), nullptr);
                Dev<float> dq(q), dout(q.size());
                Dev<uint8_t> dk(ck), dv(cv), dring(ring);
                // The first position split between device memory and the offset, as sub-steps pass it.
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
                const std::string what = std::string(kernels::kv_type_name(type)) + " window " +
                                         std::to_string(window) + " n_q " + std::to_string(c.n_q) +
                                         " start " + std::to_string(c.start) + " hd " + std::to_string(c.hd);
                const double tol = type == KvType::kQ3 ? 2e-5 : 1e-5;
                attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd, scale, nullptr,
                             dout.get(), nullptr, 0, nullptr);
                EXPECT_LT(rel_err(dout.host(), ref), tol) << what;
                if (c.n_q > 16) continue;
                // Capacities: a little past the keys (few splits), and far past them (many).
                for (int64_t cap : {rows + 64, 40 * rows + 4096}) {
                    Dev<float> split(static_cast<size_t>(attention_split_scratch_floats(c.nh, c.hd, cap))),
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

// The tensor-core prefill attention (flash_attention_kv) against reference::attention_kv over the
// same stored cache, for every KV type: GQA groups of 8, 4 and 1 heads per block (rep 3: one), a
// last row block cut short, queries after a prefix, head_dim 64/128/256, the gate epilogue, and
// keys split over blocks (with scratch) against one block per row (without), head_dim 32 (the
// goldens' heads: q8 and q4 heads of 34 and 18 bytes). Its arithmetic rounds
// q, k, v and p to f16: within 3e-3 of the f32 reference; on an f16 cache with queries already
// f16, only p's rounding and the summation order remain (1e-3). The ring: the next test.
TEST(CudaOps, FlashAttentionMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd;
        float q_scale;  // larger: a peakier softmax
    };
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (const Case& c :
             {Case{70, 0, 4, 1, 128, 1.0f}, Case{33, 5, 16, 2, 256, 1.0f}, Case{200, 1000, 16, 2, 256, 3.0f},
              Case{64, 0, 8, 8, 64, 1.0f}, Case{17, 300, 32, 4, 128, 2.0f}, Case{130, 700, 12, 4, 128, 1.0f},
              Case{40, 3000, 16, 2, 256, 1.0f}, Case{137, 0, 4, 2, 32, 1.0f}, Case{90, 50, 8, 2, 32, 2.0f}}) {
            const int64_t rows = c.start + c.n_q, row = c.nkv * kernels::kv_head_bytes(type, c.hd);
            std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1, c.q_scale),
                               k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                               v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3),
                               gate = randn(q.size(), 4);
            if (type == KvType::kF16)  // queries exactly f16: the tight comparison below
                for (float& x : q) x = kernels::f16_to_f32(kernels::f32_to_f16(x));
            std::vector<uint8_t> ck(static_cast<size_t>(rows * row)), cv(ck.size());
            kernels::reference::kv_store(type, k.data(), rows, c.nkv, c.hd, ck.data());
            kernels::reference::kv_store(type, v.data(), rows, c.nkv, c.hd, cv.data());
            const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
            std::vector<float> ref(q.size());
            kernels::reference::attention_kv(type, q.data(), ck.data(), cv.data(), nullptr, c.n_q, c.start,
                                             c.nh, c.nkv, c.hd, scale, ref.data(), nullptr);
            std::vector<float> ref_gated = ref;
            for (size_t i = 0; i < ref.size(); ++i) ref_gated[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
            Dev<float> dq(q), dgate(gate), dout(q.size()), dout2(q.size()), dout3(q.size());
            Dev<uint8_t> dk(ck), dv(cv);
            const int64_t offset = std::min<int64_t>(c.start, 3);
            Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start - offset)});
            KvCache cache;
            cache.type = type;
            cache.k = dk.get();
            cache.v = dv.get();
            ASSERT_TRUE(flash_attention_fits(cache, c.hd));
            const int64_t scratch_floats = attention_split_scratch_floats(c.nh, c.hd, 64 * rows);
            Dev<float> scratch(static_cast<size_t>(scratch_floats));
            const std::string what = std::string(kernels::kv_type_name(type)) + " n_q " +
                                     std::to_string(c.n_q) + " start " + std::to_string(c.start) + " heads " +
                                     std::to_string(c.nh) + "/" + std::to_string(c.nkv) + " hd " +
                                     std::to_string(c.hd);
            const double tol = type == KvType::kF16 ? 1e-3 : 3e-3;
            ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd,
                                           scale, nullptr, dout.get(), nullptr, 0, rows, nullptr));
            EXPECT_LT(rel_err(dout.host(), ref), tol) << what;
            ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd,
                                           scale, nullptr, dout2.get(), scratch.get(), scratch_floats, rows,
                                           nullptr));
            EXPECT_LT(rel_err(dout2.host(), ref), tol) << "split, " << what;
            ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd,
                                           scale, dgate.get(), dout3.get(), scratch.get(), scratch_floats,
                                           rows, nullptr));
            EXPECT_LT(rel_err(dout3.host(), ref_gated), tol) << "gated, " << what;
        }
    }
    // Not its case: a head_dim it has no instance for; nothing is launched.
    EXPECT_FALSE(flash_attention_fits(KvCache{}, 96));
    EXPECT_FALSE(flash_attention_kv(nullptr, KvCache{}, 20, 0, nullptr, 8, 2, 96, 1.0f, nullptr, nullptr,
                                    nullptr, 0, 20, nullptr));
}

// The tensor-core prefill attention over a cache with a --kv-window ring, called as attention_layer
// calls it (at most model::kKvRingSlack rows per call): the tiles reaching into a row's window take
// the ring's f16 rows for the keys inside it (q3: rotated into the cache's domain as they load) and
// the cache's rows for the rest and for a cut-back slot — against reference::attention_kv with the
// same ring (window_ring), split over blocks and not.
TEST(CudaOps, FlashAttentionWithWindowMatchesReference) {
    REQUIRE_GPU();
    struct Case {
        int64_t n_q, start, nh, nkv, hd, window;
    };
    for (KvType type : {KvType::kQ8, KvType::kQ4, KvType::kQ3}) {
        for (const Case& c :
             {Case{64, 0, 16, 2, 256, 48}, Case{64, 1000, 16, 2, 256, 256}, Case{37, 300, 8, 2, 128, 100},
              Case{20, 3000, 4, 1, 64, 32}, Case{64, 200, 4, 2, 32, 256}, Case{50, 5, 12, 4, 128, 300}}) {
            const int64_t rows = c.start + c.n_q, row = c.nkv * kernels::kv_head_bytes(type, c.hd);
            const int64_t slots = c.window + 64, ring_row = c.nkv * c.hd * 2;
            std::vector<float> q = randn(static_cast<size_t>(c.n_q * c.nh * c.hd), 1),
                               k = randn(static_cast<size_t>(rows * c.nkv * c.hd), 2),
                               v = randn(static_cast<size_t>(rows * c.nkv * c.hd), 3);
            std::vector<uint8_t> ck(static_cast<size_t>(rows * row)), cv(ck.size());
            kernels::reference::kv_store(type, k.data(), rows, c.nkv, c.hd, ck.data());
            kernels::reference::kv_store(type, v.data(), rows, c.nkv, c.hd, cv.data());
            std::vector<uint8_t> ring = window_ring(k, v, rows, c.nkv, c.hd, c.window, slots);
            const kernels::KvRing host_ring{c.window, slots,
                                            reinterpret_cast<int64_t*>(ring.data() + 2 * slots * ring_row),
                                            ring.data(), ring.data() + slots * ring_row};
            std::vector<float> ref(q.size());
            const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
            kernels::reference::attention_kv(type, q.data(), ck.data(), cv.data(), &host_ring, c.n_q, c.start,
                                             c.nh, c.nkv, c.hd, scale, ref.data(), nullptr);
            Dev<float> dq(q), dout(q.size()), dout2(q.size());
            Dev<uint8_t> dk(ck), dv(cv), dring(ring);
            const int64_t offset = std::min<int64_t>(c.start, 3);
            Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.start - offset)});
            KvCache cache;
            cache.type = type;
            cache.k = dk.get();
            cache.v = dv.get();
            cache.window = c.window;
            cache.slots = slots;
            cache.ring = dring.get();
            const int64_t scratch_floats = attention_split_scratch_floats(c.nh, c.hd, 64 * rows);
            Dev<float> scratch(static_cast<size_t>(scratch_floats));
            const std::string what = std::string(kernels::kv_type_name(type)) + " window " +
                                     std::to_string(c.window) + " n_q " + std::to_string(c.n_q) + " start " +
                                     std::to_string(c.start) + " hd " + std::to_string(c.hd);
            ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd,
                                           scale, nullptr, dout.get(), nullptr, 0, rows, nullptr));
            EXPECT_LT(rel_err(dout.host(), ref), 3e-3) << what;
            ASSERT_TRUE(flash_attention_kv(dq.get(), cache, c.n_q, offset, dpos.get(), c.nh, c.nkv, c.hd,
                                           scale, nullptr, dout2.get(), scratch.get(), scratch_floats, rows,
                                           nullptr));
            EXPECT_LT(rel_err(dout2.host(), ref), 3e-3) << "split, " << what;
        }
    }
}

// deltanet_fused against row_norm (l2) ×2 + copy_heads + deltanet_gates + gated_delta +
// rms_norm_gated, the sequence it replaces in backend.cpp, for both l2 eps conventions.
TEST(CudaOps, DeltaNetFusedMatchesUnfusedSequence) {
    REQUIRE_GPU();
    struct Case {
        int64_t n, nk, nv, dk, dv;
    };
    // Qwen3.6-35B / Qwen3-Next-80B (16 k-heads, 32 v-heads, 128 × 128), then other shapes.
    for (const Case& c :
         {Case{1, 16, 32, 128, 128}, Case{1, 2, 4, 64, 32}, Case{1, 1, 2, 256, 128}, Case{1, 2, 2, 16, 24},
          Case{4, 2, 4, 128, 128}, Case{3, 1, 3, 32, 100}, Case{2, 1, 2, 64, 160}}) {
        ASSERT_TRUE(deltanet_fused_fits(c.dk, c.dv));
        for (bool mlx_eps : {false, true}) {
            const int64_t kd = c.nk * c.dk, vd = c.nv * c.dv, cd = 2 * kd + vd;
            const float l2_eps = mlx_eps ? 1e-6f * static_cast<float>(c.dk) : 1e-6f, norm_eps = 1e-6f;
            const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
            std::vector<float> conv = randn(static_cast<size_t>(c.n * cd), 1),
                               b = randn(static_cast<size_t>(c.n * c.nv), 2),
                               a = randn(static_cast<size_t>(c.n * c.nv), 3),
                               z = randn(static_cast<size_t>(c.n * vd), 4),
                               dt_bias = randn(static_cast<size_t>(c.nv), 5),
                               norm_w = randn(static_cast<size_t>(c.dv), 6),
                               state0 = randn(static_cast<size_t>(c.nv * c.dk * c.dv), 7, 0.1f),
                               neg_a(static_cast<size_t>(c.nv));
            std::mt19937 rng(8);
            std::uniform_real_distribution<float> ua(0.5f, 8.0f);
            for (auto& x : neg_a) x = -ua(rng);
            // A large a + dt_bias takes softplus's x > 20 branch.
            a[0] = 30.0f;
            Dev<float> dconv(conv), db(b), da(a), dz(z), ddt(dt_bias), dnw(norm_w), dneg(neg_a);
            // Unfused.
            Dev<float> uq(static_cast<size_t>(c.n * kd)), uk(static_cast<size_t>(c.n * kd)),
                uv(static_cast<size_t>(c.n * vd)), ub(b), ua0(a), ustate(state0),
                uout(static_cast<size_t>(c.n * vd)), uy(static_cast<size_t>(c.n * vd));
            const HeadLayout qk{c.n, c.nk, c.dk, cd, c.dk, kd, c.dk};
            row_norm(dconv.get(), nullptr, qk, l2_eps, true, q_scale, uq.get(), nullptr);
            row_norm(dconv.get() + kd, nullptr, qk, l2_eps, true, 1.0f, uk.get(), nullptr);
            copy_heads(dconv.get() + 2 * kd, HeadLayout{c.n, 1, vd, cd, 0, vd, 0}, uv.get(), nullptr);
            deltanet_gates(ub.get(), ua0.get(), dneg.get(), ddt.get(), c.n, c.nv, nullptr);
            gated_delta(uq.get(), uk.get(), uv.get(), ub.get(), ua0.get(), c.n, c.nk, c.nv, c.dk, c.dv,
                        ustate.get(), ustate.get(), uout.get(), nullptr);
            rms_norm_gated(uout.get(), dz.get(), dnw.get(), c.n * c.nv, c.dv, norm_eps, uy.get(), nullptr);
            // Fused.
            // Out of place, as the backend runs it (the old state is kept until the forward commits).
            Dev<float> fstate_in(state0), fstate(state0.size()), fy(static_cast<size_t>(c.n * vd)),
                fraw(static_cast<size_t>(c.n * vd));
            Dev<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(c.nv), 0u));
            deltanet_fused(dconv.get(), db.get(), da.get(), dz.get(), dneg.get(), ddt.get(), dnw.get(), c.n,
                           c.nk, c.nv, c.dk, c.dv, l2_eps, q_scale, norm_eps, fstate_in.get(), fstate.get(),
                           fraw.get(), counters.get(), fy.get(), nullptr);
            EXPECT_EQ(fstate_in.host(), state0) << "the fused kernel must leave the old state";
            const std::string what = "n " + std::to_string(c.n) + " heads " + std::to_string(c.nk) + "/" +
                                     std::to_string(c.nv) + " " + std::to_string(c.dk) + "x" +
                                     std::to_string(c.dv) + (mlx_eps ? " mlx eps" : "");
            EXPECT_LT(rel_err(fy.host(), uy.host()), 1e-5) << what;
            EXPECT_LT(rel_err(fstate.host(), ustate.host()), 1e-5) << what;
            EXPECT_EQ(db.host(), b) << "the fused kernel must leave b unchanged";
            EXPECT_EQ(da.host(), a) << "the fused kernel must leave a unchanged";
            EXPECT_EQ(counters.host(), std::vector<unsigned>(static_cast<size_t>(c.nv), 0u))
                << "the fused kernel must leave its counters 0";
        }
    }
}

}  // namespace
}  // namespace sluice::cuda
