// Expert parallelism (runtime/cuda/expert_parallel.cpp) on one GPU: ranks sharing the device
// ("cuda:0,cuda:0"), the path a group of GPUs takes with the local all-reduce in NCCL's place. Against
// one GPU and the CPU on the golden MoE models: prefill, decode (graphs that capture the all-reduce),
// multi-row forwards, batches of sequences, turn checkpoints, rewinds and save/load (the sharded state's
// primitives), the expert tier per rank; the all-reduce kernel itself, eager and in graphs; clear errors.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "batch_schedule.h"
#include "convert/packer.h"
#include "kernels/cuda/collective.h"
#include "runtime/cuda/collective.h"
#include "session_util.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::greedy;
using testing::max_diff;
using testing::prompt;

bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

EngineOptions options(const std::string& model_dir, const std::string& device) {
    EngineOptions eo;
    eo.model_dir = model_dir;
    eo.threads = 2;
    eo.device = device;
    eo.context_tokens = 256;
    eo.cpu_int8_activations = false;  // compared with the GPU's f32 (3xTF32) arithmetic: the exact path
    eo.gpu_int8_prefill = false;
    return eo;
}

std::shared_ptr<Engine> load(const std::string& name, const std::string& device) {
    auto e = Engine::load(options(sluice::testing::test_data_dir() + "/goldens/" + name, device));
    EXPECT_TRUE(e.has_value()) << device << ": " << e.status().message();
    return e.has_value() ? *e : nullptr;
}

// R ranks' threads each sum their buffer with the others' several times (counts below, at and above
// the staging capacity, so the epochs' halves and the pieces alternate), eagerly and then as a captured
// graph replayed twice: every rank gets the sum in rank order, bit for bit.
TEST(CudaCollective, LocalAllReduceSumsEveryRankInRankOrder) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    if (!runtime::cuda_impl::require_eager_module_loading().is_ok())
        GTEST_SKIP() << "CUDA loads modules lazily here: run with CUDA_MODULE_LOADING=EAGER";
    constexpr int R = 3;
    constexpr int64_t kCapacity =
        1 << 12;  // slices of 512: a call of 1000 takes two blocks, of 4096 all eight
    const std::vector<int64_t> counts = {1, 1000, kCapacity, 3 * kCapacity + 17, 5, 700};
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cuda::LocalReduceShared shared;
    shared.ranks = R;
    shared.capacity = kCapacity;
    void* block = nullptr;
    const size_t staging = 2 * R * kCapacity * sizeof(float);
    const size_t flags = R * cuda::kLocalReduceBlocks * sizeof(unsigned long long);
    ASSERT_EQ(cudaMalloc(&block, staging + 2 * flags + sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(static_cast<char*>(block) + staging, 0, 2 * flags + sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the ranks' streams do not wait for the memset
    shared.staging = static_cast<float*>(block);
    shared.flags = reinterpret_cast<unsigned long long*>(static_cast<char*>(block) + staging);
    auto* epochs = reinterpret_cast<unsigned long long*>(static_cast<char*>(block) + staging + flags);
    shared.failed = reinterpret_cast<int*>(static_cast<char*>(block) + staging + 2 * flags);

    const int64_t total = 3 * kCapacity + 17;
    std::vector<std::vector<float>> input(R, std::vector<float>(static_cast<size_t>(total)));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : input)
        for (float& x : v) x = u(rng);
    std::vector<float> want(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
        float s = 0.0f;
        for (int r = 0; r < R; ++r) s += input[static_cast<size_t>(r)][static_cast<size_t>(i)];
        want[static_cast<size_t>(i)] = s;
    }
    std::vector<std::string> failures(R);
    auto rank = [&](int r, bool graph) {
        cudaSetDevice(0);
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        float *buf = nullptr, *in = nullptr;
        cudaMalloc(&buf, static_cast<size_t>(total) * sizeof(float));
        cudaMalloc(&in, static_cast<size_t>(total) * sizeof(float));
        cudaMemcpy(in, input[static_cast<size_t>(r)].data(), static_cast<size_t>(total) * sizeof(float),
                   cudaMemcpyHostToDevice);
        auto one_call = [&](int64_t count) {  // device to device: capturable
            cudaMemcpyAsync(buf, in, static_cast<size_t>(count) * sizeof(float), cudaMemcpyDeviceToDevice, s);
            cuda::local_all_reduce(shared, r, epochs + r * cuda::kLocalReduceBlocks, buf, count, s);
        };
        auto check = [&](int64_t count, const char* how) {
            std::vector<float> got(static_cast<size_t>(count));
            cudaMemcpyAsync(got.data(), buf, got.size() * sizeof(float), cudaMemcpyDeviceToHost, s);
            cudaStreamSynchronize(s);
            for (int64_t i = 0; i < count; ++i)
                if (got[static_cast<size_t>(i)] != want[static_cast<size_t>(i)] &&
                    failures[static_cast<size_t>(r)].empty())
                    failures[static_cast<size_t>(r)] =
                        fmt::format("rank {} {} count {}: element {} is {} not {}", r, how, count, i,
                                    got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]);
        };
        if (!graph) {
            for (int64_t count : counts) {
                one_call(count);
                check(count, "eager");
            }
        } else {
            for (int64_t count : counts) {
                cudaGraph_t g = nullptr;
                cudaGraphExec_t exec = nullptr;
                cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
                one_call(count);
                cudaStreamEndCapture(s, &g);
                cudaGraphInstantiate(&exec, g, 0);
                for (int rep = 0; rep < 2; ++rep) {
                    cudaGraphLaunch(exec, s);
                    check(count, "graph");
                }
                cudaGraphExecDestroy(exec);
                cudaGraphDestroy(g);
            }
        }
        cudaFree(buf);
        cudaFree(in);
        cudaStreamDestroy(s);
    };
    for (bool graph : {false, true}) {
        std::vector<std::thread> threads;
        for (int r = 0; r < R; ++r) threads.emplace_back(rank, r, graph);
        for (auto& t : threads) t.join();
        for (const std::string& f : failures) EXPECT_TRUE(f.empty()) << f;
    }
    int failed = 0;
    ASSERT_EQ(cudaMemcpy(&failed, shared.failed, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(failed, 0) << "a rank timed out waiting for the others";
    cudaFree(block);
}

class CudaExpertParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaExpertParallel, RanksSharingTheGpuMatchOneGpuAndTheCpu) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    auto cpu = load(GetParam(), "cpu");
    auto one = load(GetParam(), "cuda");
    ASSERT_TRUE(cpu && one);
    for (const char* device : {"cuda:0,cuda:0", "cuda:0,cuda:0,cuda:0"}) {
        SCOPED_TRACE(device);
        auto group = load(GetParam(), device);
        ASSERT_TRUE(group);
        // The experts are dealt out, not copied: the group holds one GPU's weights plus the dense core
        // (and a null expert) once per further rank.
        EXPECT_GT(group->device_weight_bytes(), one->device_weight_bytes());
        EXPECT_LT(group->device_weight_bytes(),
                  one->device_weight_bytes() * (std::string(device).size() > 14 ? 3 : 2));

        auto sc = cpu->new_session(), sg = group->new_session();
        const auto p = prompt(40, 1);
        auto lc = sc->evaluate(p, true, 40);
        auto lg = sg->evaluate(p, true, 40);
        ASSERT_TRUE(lc.has_value() && lg.has_value()) << lg.status().message();
        EXPECT_LT(max_diff(*lg, *lc), 2e-3f) << "prefill";
        ASSERT_TRUE(sc->checkpoint().is_ok());
        ASSERT_TRUE(sg->checkpoint().is_ok());
        const int64_t mark = sg->position();
        for (int32_t t : {11, 42, 7, 99}) {  // decode: the captured graphs, replayed
            auto dc = sc->evaluate(std::span<const int32_t>(&t, 1), false);
            auto dg = sg->evaluate(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(dc.has_value() && dg.has_value()) << dg.status().message();
            EXPECT_LT(max_diff(*dg, *dc), 2e-3f) << "decode token " << t;
        }
        for (int64_t n : {3, 4, 3}) {  // a verification's rows: the multi-row graphs
            const auto t = prompt(n, static_cast<int32_t>(n));
            auto rc = sc->evaluate(t, true);
            auto rg = sg->evaluate(t, true);
            ASSERT_TRUE(rc.has_value() && rg.has_value()) << rg.status().message();
            EXPECT_LT(max_diff(*rg, *rc), 2e-3f) << n << " rows";
        }
        for (Session* s : {sc.get(), sg.get()}) {
            auto at = s->truncate(mark);
            ASSERT_TRUE(at.has_value()) << at.status().message();
            ASSERT_EQ(*at, mark);
        }
        // Save on the group, load into a fresh group session and on the CPU.
        testing::TempDir tmp;
        ASSERT_TRUE(sg->save(tmp.file("s.bin")).is_ok());
        auto sg2 = group->new_session(), sc2 = cpu->new_session();
        ASSERT_TRUE(sg2->load(tmp.file("s.bin")).is_ok());
        ASSERT_TRUE(sc2->load(tmp.file("s.bin")).is_ok());
        const int32_t next = 17;
        auto a = sg2->evaluate(std::span<const int32_t>(&next, 1), false);
        auto b = sc2->evaluate(std::span<const int32_t>(&next, 1), false);
        auto c = sc->evaluate(std::span<const int32_t>(&next, 1), false);
        ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
        EXPECT_LT(max_diff(*a, *c), 2e-3f) << "after a rewind, save and load";
        EXPECT_LT(max_diff(*b, *c), 2e-3f) << "the group's session file on the CPU";

        auto gc = cpu->new_session(), gg = group->new_session();
        EXPECT_EQ(greedy(*gg, p, 12), greedy(*gc, p, 12));
        // Batches of sequences mixing prefill chunks and decode tokens.
        for (int n : {2, 5}) {
            const testing::ScheduleLogits g = testing::run_schedule(*group, n);
            const testing::ScheduleLogits r = testing::run_schedule(*cpu, n);
            EXPECT_LT(max_diff(g.batched, r.alone), 2e-3f) << "N=" << n << " batched, against the CPU";
            EXPECT_LT(max_diff(g.alone, r.alone), 2e-3f) << "N=" << n << " alone, against the CPU";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaExpertParallel,
                         ::testing::Values("qwen3_next_mlx_q4", "qwen3_5_moe_hf_bf16", "qwen3_moe_mlx_q4",
                                           "glm4_moe_mlx_q4", "qwen2_moe_mlx_q4", "mixtral_mlx_q4"),
                         [](const auto& param_info) { return param_info.param; });

// Each rank's shard through its own expert tier: the default model (64 experts, 8 a token: a rank's
// 32 outnumber the 2·k + 1 slots; the goldens' 4–8 experts cannot be tiered per rank) packed, against the
// CPU on the same files.
TEST(CudaExpertParallelTiered, TieredRanksMatchTheCpu) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = sluice::testing::test_data_dir() + "/../../models/tiny-next";
    po.out_dir = tmp.file("packed");
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();
    auto cpu = Engine::load(options(po.out_dir, "cpu"));
    ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
    const int64_t K = (*cpu)->info().experts_per_token;
    auto probe = Engine::load(options(po.out_dir, "cuda"));
    ASSERT_TRUE(probe.has_value()) << probe.status().message();
    EngineOptions eo = options(po.out_dir, "cuda:0,cuda:0");
    eo.gpu_expert_cache_bytes =
        static_cast<uint64_t>(2 * K + 1) * (*probe)->gpu_expert_cache_stats().slot_bytes;
    probe->reset();
    auto group = Engine::load(eo);
    ASSERT_TRUE(group.has_value()) << group.status().message();
    ASSERT_TRUE((*group)->gpu_expert_cache_stats().tiered);
    EXPECT_EQ((*group)->gpu_expert_cache_stats().slots, 2 * (2 * K + 1));

    const auto p = prompt(60, 5);
    auto sc = (*cpu)->new_session(), sg = (*group)->new_session();
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
    const testing::ScheduleLogits bg = testing::run_schedule(**group, 4);
    const testing::ScheduleLogits bc = testing::run_schedule(**cpu, 4);
    EXPECT_LT(max_diff(bg.batched, bc.alone), 2e-3f) << "tiered batched forward against the CPU";
    EXPECT_GT((*group)->gpu_expert_cache_stats().misses, 0u);
}

TEST(CudaExpertParallelErrors, ClearErrorsForWhatAGroupCannotDo) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    const std::string dense = sluice::testing::test_data_dir() + "/goldens/qwen3_mlx_q4";
    auto e = Engine::load(options(dense, "cuda:0,cuda:0"));
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("no routed experts"), std::string::npos) << e.status().message();
    int n = 0;
    cudaGetDeviceCount(&n);
    e = Engine::load(options(sluice::testing::test_data_dir() + "/goldens/qwen3_moe_mlx_q4",
                             fmt::format("cuda:0,cuda:{}", n)));
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find(fmt::format("no device cuda:{}", n)), std::string::npos)
        << e.status().message();
}

}  // namespace
}  // namespace sluice
