// The router top-k on the device (kernels::RouterSpec: Qwen's softmax, GLM / DeepSeek-V3's grouped
// sigmoid with a selection bias) against kernels::reference::router_topk, alone and fused into the
// last block of a matvec_multi launch. Run by tools/gpu_check.sh on a machine with a GPU; skipped when no
// device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/kernels.h"

namespace sluice::cuda {
namespace {

TEST(CudaOps, RouterTopkMatchesReference) {
    REQUIRE_GPU();
    using Scoring = kernels::RouterSpec::Scoring;
    for (int64_t E : {8, 64, 160, 256, 512, 1024}) {
        for (bool renorm : {false, true}) {
            for (Scoring scoring : {Scoring::kSoftmax, Scoring::kSigmoid}) {
                for (int64_t groups : {1, 8}) {
                    if (scoring == Scoring::kSoftmax && groups > 1) continue;
                    const int64_t n = 37, K = std::min<int64_t>(8, E);
                    const int64_t kept_groups = groups / 2 + (groups == 1);
                    if (E / groups < 2 || K > kept_groups * (E / groups)) continue;
                    std::vector<float> logits =
                        randn(static_cast<size_t>(n * E), static_cast<uint32_t>(E), 2.0f);
                    const std::vector<float> bias =
                        randn(static_cast<size_t>(E), static_cast<uint32_t>(E + 1), 0.3f);
                    Dev<float> db(bias);
                    kernels::RouterSpec r;
                    r.scoring = scoring;
                    r.n_experts = E;
                    r.k = K;
                    r.renormalize = renorm;
                    r.scale = renorm ? 2.5f : 1.0f;
                    r.groups = groups;
                    r.topk_groups = kept_groups;
                    r.bias = scoring == Scoring::kSigmoid ? bias.data() : nullptr;
                    std::vector<int32_t> ref_ids(static_cast<size_t>(n * K));
                    std::vector<float> ref_w(static_cast<size_t>(n * K));
                    for (int64_t t = 0; t < n; ++t)
                        kernels::reference::router_topk(logits.data() + t * E, r, ref_ids.data() + t * K,
                                                        ref_w.data() + t * K);
                    if (r.bias != nullptr) r.bias = db.get();
                    Dev<float> dl(logits), dw(ref_w.size());
                    Dev<int32_t> di(ref_ids.size());
                    router_topk(dl.get(), n, r, di.get(), dw.get(), nullptr);
                    const std::string what = "E " + std::to_string(E) +
                                             (scoring == Scoring::kSigmoid ? " sigmoid" : " softmax") +
                                             " groups " + std::to_string(groups);
                    EXPECT_EQ(di.host(), ref_ids) << what;
                    EXPECT_LT(rel_err(dw.host(), ref_w), 1e-6) << what;
                }
            }
        }
    }
}

// The router top-k run by the last block of a matvec_multi launch against router_topk over the
// same launch's logits, replayed (the counter must come back to 0), beside other slices; an 8-bit router
// (the chunk path) and an F32 one (a GGUF's: the generic path, whose own split rule spreads few rows).
TEST(CudaOps, MatvecMultiFusedTopkMatchesRouterTopk) {
    REQUIRE_GPU();
    LaunchContext lc = launch_context();
    for (auto rtype : {kernels::WeightType::kQ8, kernels::WeightType::kF32})
        for (int64_t E : {32, 64, 256, 512}) {
            for (int split : {0, 1, 8}) {
                lc.forced_split = split;
                const int64_t H = 512, K = 8;
                auto wr = make_weight(rtype, E, H, 64, static_cast<uint32_t>(E));
                auto wg = make_weight(kernels::WeightType::kQ4, 300, H, 64, 2);
                Dev<float> dl(static_cast<size_t>(E)), dg(300), dw(static_cast<size_t>(K)),
                    dw2(static_cast<size_t>(K));
                Dev<int32_t> di(static_cast<size_t>(K)), di2(static_cast<size_t>(K));
                Dev<uint32_t> counter(1);
                Dev<float> dbias(randn(static_cast<size_t>(E), 77, 0.3f));
                for (int rep = 0; rep < 3; ++rep) {
                    std::vector<float> x = randn(static_cast<size_t>(H), static_cast<uint32_t>(10 + rep));
                    Dev<float> dx(x);
                    MatvecMulti m;
                    m.add(wg->dev, dg.get());
                    m.add(wr->dev, dl.get());
                    m.topk.which = 1;
                    // Qwen's softmax router, then GLM / DeepSeek-V3's grouped sigmoid one with a bias.
                    m.topk.router.n_experts = E;
                    m.topk.router.k = K;
                    m.topk.router.renormalize = rep % 2 == 0;
                    if (rep == 2) {
                        m.topk.router.scoring = kernels::RouterSpec::Scoring::kSigmoid;
                        m.topk.router.bias = dbias.get();
                        m.topk.router.groups = 8;
                        m.topk.router.topk_groups = 4;
                        m.topk.router.scale = 2.5f;
                    }
                    m.topk.ids = di.get();
                    m.topk.weights = dw.get();
                    m.topk.counter = counter.get();
                    matvec_multi(lc, m, dx.get(), nullptr);
                    router_topk(dl.get(), 1, m.topk.router, di2.get(), dw2.get(), nullptr);
                    const std::string what = std::string(kernels::weight_type_name(rtype)) + " E " +
                                             std::to_string(E) + " split " + std::to_string(split);
                    EXPECT_EQ(di.host(), di2.host()) << what;
                    EXPECT_EQ(dw.host(), dw2.host()) << what;
                    EXPECT_EQ(counter.host()[0], 0u);
                }
            }
        }
    lc.forced_split = 0;
}

}  // namespace
}  // namespace sluice::cuda
