// gpt-oss on the CUDA backend against the CPU backend, beyond the goldens (tests/unit/golden_test.cpp
// runs those on the GPU, resident and tiered): the KV cache types its 16-wide heads take (f32, f16, q3;
// q8 and q4 want multiples of 32) with and without a --kv-window ring, multi-turn rewinds, the batched
// forward, and a packed gpt-oss (its MXFP4 experts kept as ggml blocks) through all three expert tiers.
// CudaSession (session_gpu_test.cpp) runs the same checks on the other families; its KV sweep includes
// q8 and q4, which these heads cannot take.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>

#include "batch_schedule.h"
#include "convert/packer.h"
#include "session_util.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::greedy;
using testing::max_diff;
using testing::prompt;

bool has_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::shared_ptr<Engine> load(const std::string& dir, const std::string& device, int kv_bits = 32,
                             int64_t kv_window = 0) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.device = device;
    eo.context_tokens = 256;
    eo.kv_bits = kv_bits;
    eo.kv_window = kv_window;
    eo.cpu_int8_activations = false;  // compared with the GPU's f32 (3xTF32) arithmetic: the exact path
    eo.gpu_int8_prefill = false;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

std::string golden_dir(const std::string& name) {
    return sluice::testing::test_data_dir() + "/goldens/" + name;
}

class CudaGptOss : public ::testing::TestWithParam<std::string> {};

// Every KV type the heads take, with and without a ring: a 100-token prefill (every row's logits, in
// chunks of 64: sub-steps of the ring's slack, queries whose sliding window of 6 spans two chunks),
// decode steps, greedy continuations and a second turn that rewinds into the first, against the CPU.
// A quantized cache's logits may differ by a code step (CudaSession.CompressedKvCacheMatchesCpu).
TEST_P(CudaGptOss, KvTypesPrefillDecodeAndTurnsMatchCpu) {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    for (int bits : {32, 16, 3}) {
        for (int64_t window : {0, 8}) {
            if (window > 0 && bits != 3) continue;
            auto cpu = load(golden_dir(GetParam()), "cpu", bits, window);
            auto gpu = load(golden_dir(GetParam()), "cuda", bits, window);
            ASSERT_TRUE(cpu && gpu);
            const std::string what = "kv_bits " + std::to_string(bits) + " window " + std::to_string(window);
            const float tol = bits == 3 ? 1e-2f : 2e-3f;
            const auto p = prompt(100, 5);
            auto sc = cpu->new_session(), sg = gpu->new_session();
            auto lc = sc->evaluate(p, true, 64);
            auto lg = sg->evaluate(p, true, 64);
            ASSERT_TRUE(lc.has_value() && lg.has_value()) << what << ": " << lg.status().message();
            // A 3-bit cache's codes flip where the backends' projections round apart (a key on a code
            // boundary), and on these 16-wide heads one flip moves a logit by up to ~1 (the MXFP4
            // golden's prefill: 1.18; its bf16 twin stays within 1e-2). So a q3 cache is held to its own
            // error: each backend's q3 logits against its f32 cache's, the GPU's no larger than ~the CPU's.
            std::shared_ptr<Engine> cpu32, gpu32;
            std::unique_ptr<Session> sc32, sg32;
            if (bits == 3) {
                cpu32 = load(golden_dir(GetParam()), "cpu", 32, 0);
                gpu32 = load(golden_dir(GetParam()), "cuda", 32, 0);
                ASSERT_TRUE(cpu32 && gpu32);
                sc32 = cpu32->new_session();
                sg32 = gpu32->new_session();
            }
            auto check = [&](const auto& g, const auto& c, const auto& g32, const auto& c32,
                             const std::string& at) {
                if (bits != 3) {
                    EXPECT_LT(max_diff(g, c), tol) << what << ": " << at;
                } else if (max_diff(g, c) >= tol) {
                    const float err_gpu = max_diff(g, g32), err_cpu = max_diff(c, c32);
                    EXPECT_LT(err_gpu, 2.0f * err_cpu + 5e-2f)
                        << what << ": " << at
                        << " (the GPU's q3 error against the CPU's; their logits differ by " << max_diff(g, c)
                        << ")";
                }
            };
            if (bits == 3) {
                auto lc32 = sc32->evaluate(p, true, 64), lg32 = sg32->evaluate(p, true, 64);
                ASSERT_TRUE(lc32.has_value() && lg32.has_value()) << what;
                check(*lg, *lc, *lg32, *lc32, "prefill");
            } else {
                check(*lg, *lc, *lg, *lc, "prefill");
            }
            for (int32_t t : {11, 42, 7, 99, 3}) {
                const std::span<const int32_t> one(&t, 1);
                auto dc = sc->evaluate(one, false);
                auto dg = sg->evaluate(one, false);
                ASSERT_TRUE(dc.has_value() && dg.has_value()) << what;
                if (bits == 3) {
                    auto dc32 = sc32->evaluate(one, false), dg32 = sg32->evaluate(one, false);
                    ASSERT_TRUE(dc32.has_value() && dg32.has_value()) << what;
                    check(*dg, *dc, *dg32, *dc32, "decode token " + std::to_string(t));
                } else {
                    check(*dg, *dc, *dg, *dc, "decode token " + std::to_string(t));
                }
            }
            auto gc = cpu->new_session(), gg = gpu->new_session();
            EXPECT_EQ(greedy(*gg, p, 8), greedy(*gc, p, 8)) << what;
            auto turn2 = p;
            turn2.resize(60);
            const auto extra = prompt(9, 4);
            turn2.insert(turn2.end(), extra.begin(), extra.end());
            EXPECT_EQ(greedy(*gg, turn2, 5), greedy(*gc, turn2, 5)) << what << ": second turn";
        }
    }
}

// The batched forward (tests/unit/batch_schedule.h: prefill chunks, all-rows chunks and decode tokens
// of N sequences in one forward per round) against each sequence alone on the device and on the CPU.
TEST_P(CudaGptOss, BatchedForwardMatchesAloneAndTheCpu) {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    auto cpu = load(golden_dir(GetParam()), "cpu");
    auto gpu = load(golden_dir(GetParam()), "cuda");
    ASSERT_TRUE(cpu && gpu);
    for (int n : {1, 3, 8}) {
        const testing::ScheduleLogits g = testing::run_schedule(*gpu, n);
        const testing::ScheduleLogits c = testing::run_schedule(*cpu, n);
        EXPECT_LT(max_diff(g.batched, g.alone), 2e-3f)
            << "N=" << n << ": batched against alone on the device";
        EXPECT_LT(max_diff(g.batched, c.alone), 2e-3f)
            << "N=" << n << ": batched on the device against the CPU";
    }
}

// The golden packed (`sluice pack`: MXFP4 experts stay ggml blocks, float ones as pack writes them) and
// run through a VRAM expert cache of 2·k + 1 slots fed from a host cache of 3·k slots fed from disk,
// against the CPU on the same pack: prefill, decode with next-layer prefetch (the predictor's router
// with its logit bias), greedy generation, and batches.
TEST_P(CudaGptOss, PackedModelThroughGpuHostAndDiskTiers) {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = golden_dir(GetParam());
    po.out_dir = tmp.file("packed");
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();
    EngineOptions eo;
    eo.model_dir = po.out_dir;
    eo.threads = 2;
    eo.context_tokens = 256;
    eo.cpu_int8_activations = false;
    eo.gpu_int8_prefill = false;
    auto cpu = Engine::load(eo);
    ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
    const int64_t K = (*cpu)->info().experts_per_token;
    const uint64_t slot = (*cpu)->memory_plan().slot_bytes;
    eo.device = "cuda";
    eo.expert_cache_bytes = static_cast<uint64_t>(3 * K) * slot;  // host tier: a few slots, so disk reads
    auto probe = Engine::load(eo);  // resident: learn one expert's size in GPU memory
    ASSERT_TRUE(probe.has_value()) << probe.status().message();
    ASSERT_FALSE((*probe)->gpu_expert_cache_stats().tiered);
    eo.gpu_expert_cache_bytes =
        static_cast<uint64_t>(2 * K + 1) * (*probe)->gpu_expert_cache_stats().slot_bytes;
    probe->reset();
    auto gpu = Engine::load(eo);
    ASSERT_TRUE(gpu.has_value()) << gpu.status().message();
    ASSERT_TRUE((*gpu)->gpu_expert_cache_stats().tiered);

    const auto p = prompt(60, 5);
    auto sc = (*cpu)->new_session(), sg = (*gpu)->new_session();
    auto lc = sc->evaluate(p, true, 64);
    auto lg = sg->evaluate(p, true, 64);
    ASSERT_TRUE(lc.has_value() && lg.has_value()) << lg.status().message();
    EXPECT_LT(max_diff(*lg, *lc), 2e-3f);
    for (int32_t t : {11, 42, 7, 99, 3}) {
        auto dc = sc->evaluate(std::span<const int32_t>(&t, 1), false);
        auto dg = sg->evaluate(std::span<const int32_t>(&t, 1), false);
        ASSERT_TRUE(dc.has_value() && dg.has_value()) << dg.status().message();
        EXPECT_LT(max_diff(*dg, *dc), 2e-3f) << "decode token " << t;
    }
    auto gc = (*cpu)->new_session(), gg = (*gpu)->new_session();
    EXPECT_EQ(greedy(*gg, p, 12), greedy(*gc, p, 12));
    const testing::ScheduleLogits bg = testing::run_schedule(**gpu, 6);
    const testing::ScheduleLogits bc = testing::run_schedule(**cpu, 6);
    EXPECT_LT(max_diff(bg.batched, bc.alone), 2e-3f) << "tiered batched forward against the CPU";
    const GpuExpertCacheStats s = (*gpu)->gpu_expert_cache_stats();
    EXPECT_GT(s.misses, 0u);
    EXPECT_GT(s.evictions, 0u);
    EXPECT_GT((*gpu)->expert_cache_stats().misses, 0u);  // the host tier read from disk
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaGptOss, ::testing::Values("gpt_oss_hf_mxfp4", "gpt_oss_hf_bf16"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace sluice
