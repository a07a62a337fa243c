// The CUDA backend under the session's state handling: turn checkpoints and rewinds (DeltaNet
// state snapshots kept on the device), save/load, several sessions sharing one engine — each
// compared with the CPU backend on the golden models (tests/data/goldens) — and failure atomicity
// of a tiered forward.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>

#include "batch_schedule.h"
#include "convert/packer.h"
#include "format/pack.h"
#include "session_util.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::greedy;
using testing::max_diff;
using testing::prompt;

std::shared_ptr<Engine> load(const std::string& name, const std::string& device, int kv_bits = 32,
                             int64_t kv_window = 0) {
    EngineOptions eo;
    eo.model_dir = sluice::testing::test_data_dir() + "/goldens/" + name;
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

class CudaSession : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSession, MultiTurnRewindSaveLoadMatchCpu) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    auto cpu = load(GetParam(), "cpu");
    auto gpu = load(GetParam(), "cuda");
    ASSERT_TRUE(cpu && gpu);
    // Turn 1, then turn 2 that shares a prefix with turn 1 and diverges (rewind to a checkpoint).
    auto turn1 = prompt(40, 1);
    auto turn2 = turn1;
    turn2.resize(25);
    auto extra = prompt(12, 7);
    turn2.insert(turn2.end(), extra.begin(), extra.end());
    auto sc = cpu->new_session(), sg = gpu->new_session();
    EXPECT_EQ(greedy(*sg, turn1, 6), greedy(*sc, turn1, 6));
    EXPECT_EQ(greedy(*sg, turn2, 6), greedy(*sc, turn2, 6));

    // Save on the GPU, load into a fresh GPU session: the next logits match the CPU's.
    testing::TempDir tmp;
    ASSERT_TRUE(sg->save(tmp.file("s.bin")).is_ok());
    auto sg2 = gpu->new_session();
    ASSERT_TRUE(sg2->load(tmp.file("s.bin")).is_ok());
    const int32_t next = 17;
    auto lg = sg2->evaluate(std::span<const int32_t>(&next, 1), false);
    auto lc = sc->evaluate(std::span<const int32_t>(&next, 1), false);
    ASSERT_TRUE(lg.has_value() && lc.has_value());
    EXPECT_LT(max_diff(*lg, *lc), 2e-3f);
    // The file is the same on every backend: the GPU's save loads on the CPU.
    auto sc2 = cpu->new_session();
    ASSERT_TRUE(sc2->load(tmp.file("s.bin")).is_ok());
    auto lc2 = sc2->evaluate(std::span<const int32_t>(&next, 1), false);
    ASSERT_TRUE(lc2.has_value());
    EXPECT_LT(max_diff(*lc2, *lc), 2e-3f);

    // Two sessions interleaved on one GPU engine keep separate state.
    auto a = gpu->new_session(), b = gpu->new_session();
    auto pa = prompt(30, 3), pb = prompt(20, 9);
    auto ra = a->evaluate(pa, false), rb = b->evaluate(pb, false);
    auto ra2 = a->evaluate(std::span<const int32_t>(&next, 1), false);
    auto ca = cpu->new_session();
    ASSERT_TRUE(ca->evaluate(pa, false).has_value());
    auto ca2 = ca->evaluate(std::span<const int32_t>(&next, 1), false);
    ASSERT_TRUE(ra2.has_value() && ca2.has_value());
    EXPECT_LT(max_diff(*ra2, *ca2), 2e-3f);
}

// A compressed KV cache (--kv-bits 16/8/4/3, with and without a --kv-window) on the device against
// the CPU: the same greedy tokens and next logits after a 100-token prefill (one step of more rows
// than the ring's slack: attention_layer's sub-steps) and decode, a rewind, and the GPU's session
// file loading on the CPU (the layout is the same: kv.cu stores as the reference does, bit for bit
// on the same input — CudaOps.KvStoreMatchesReferenceBitForBit).
TEST_P(CudaSession, CompressedKvCacheMatchesCpu) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    for (int bits : {16, 8, 4, 3}) {
        for (int64_t window : {0, 8}) {
            if (window > 0 && bits == 16) continue;
            auto cpu = load(GetParam(), "cpu", bits, window);
            auto gpu = load(GetParam(), "cuda", bits, window);
            ASSERT_TRUE(cpu && gpu);
            const std::string what = "kv_bits " + std::to_string(bits) + " window " + std::to_string(window);
            auto p = prompt(100, 5);
            auto sc = cpu->new_session(), sg = gpu->new_session();
            EXPECT_EQ(greedy(*sg, p, 8), greedy(*sc, p, 8)) << what;
            auto turn2 = p;
            turn2.resize(60);
            auto extra = prompt(9, 4);
            turn2.insert(turn2.end(), extra.begin(), extra.end());
            EXPECT_EQ(greedy(*sg, turn2, 5), greedy(*sc, turn2, 5)) << what;
            testing::TempDir tmp;
            ASSERT_TRUE(sg->save(tmp.file("s.bin")).is_ok());
            auto loaded = cpu->new_session();
            ASSERT_TRUE(loaded->load(tmp.file("s.bin")).is_ok()) << what;
            const int32_t next = 23;
            auto lg = sg->evaluate(std::span<const int32_t>(&next, 1), false);
            auto lc = sc->evaluate(std::span<const int32_t>(&next, 1), false);
            auto ll = loaded->evaluate(std::span<const int32_t>(&next, 1), false);
            ASSERT_TRUE(lg.has_value() && lc.has_value() && ll.has_value()) << what;
            // The backends' projections round differently, so a key at a code boundary may get the
            // neighbouring code on one of them: a quantized cache's logits differ by up to a step.
            const float tol = bits == 16 ? 2e-3f : 1e-2f;
            EXPECT_LT(max_diff(*lg, *lc), tol) << what;
            EXPECT_LT(max_diff(*ll, *lc), tol) << what << ": the GPU's session file on the CPU";
        }
    }
}

// A session with its own KV type (SessionOptions) on the device computes what a device engine of that
// type computes, beside a session of the engine's type.
TEST_P(CudaSession, SessionKvTypeMatchesAnEngineOfThatType) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    auto f32 = load(GetParam(), "cuda", 32, 8);
    ASSERT_TRUE(f32);
    for (int bits : {16, 8, 3}) {
        auto own = load(GetParam(), "cuda", bits, 8);
        ASSERT_TRUE(own);
        SessionOptions so;
        so.kv_bits = bits;
        auto s = f32->new_session(so);
        ASSERT_TRUE(s.has_value()) << s.status().message();
        auto plain = f32->new_session();
        auto want = own->new_session();
        const auto p = prompt(40, 7);
        ASSERT_TRUE(plain->evaluate(p, false).has_value());
        EXPECT_EQ(greedy(**s, p, 6), greedy(*want, p, 6)) << bits;
        const int32_t next = 31;
        auto a = (*s)->evaluate(std::span<const int32_t>(&next, 1), false);
        auto b = want->evaluate(std::span<const int32_t>(&next, 1), false);
        ASSERT_TRUE(a.has_value() && b.has_value());
        EXPECT_LT(max_diff(*a, *b), 1e-5f) << bits;
    }
}

// The engine's prefix cache on the device: a conversation sharing a 320-token prefix with an earlier
// one restores it (host copies of the device's rows and running state, written back through the state's
// row primitives) and then generates what a cold prefill of its whole prompt gives on the device: the
// same greedy tokens, their log-probabilities within the backend's rounding (the GPU's prefill kernels
// are not held row-independent as the CPU's are, so not bit for bit).
TEST_P(CudaSession, PrefixCacheRestoresWhatAColdPrefillComputes) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    for (int bits : {32, 8}) {
        EngineOptions eo;
        eo.model_dir = sluice::testing::test_data_dir() + "/goldens/" + GetParam();
        eo.threads = 2;
        eo.device = "cuda";
        eo.context_tokens = 1024;
        eo.kv_bits = bits;
        eo.prefix_cache_bytes = 256ull << 20;
        auto loaded = Engine::load(eo);
        ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
        Engine& engine = **loaded;
        const std::string what = "kv_bits " + std::to_string(bits);
        auto run = [&](const std::vector<int32_t>& p, bool cache, GenerationStats* stats) {
            GenerateOptions go;
            go.max_tokens = 6;
            go.ignore_eos = true;
            go.sampling.temperature = 0.0f;
            go.prefill_chunk_tokens = 128;
            go.prefix_cache = cache;
            std::vector<std::pair<int32_t, float>> out;
            auto r = engine.new_session()->generate(p, go, [&](const TokenEvent& ev) {
                out.emplace_back(ev.token, ev.logprob);
                return true;
            });
            EXPECT_TRUE(r.has_value()) << r.status().message();
            if (r.has_value() && stats != nullptr) *stats = r->stats;
            return out;
        };
        std::vector<int32_t> first = prompt(320, 5), second = first;
        const auto tail1 = prompt(40, 9), tail2 = prompt(57, 13);
        first.insert(first.end(), tail1.begin(), tail1.end());
        second.insert(second.end(), tail2.begin(), tail2.end());
        const auto cold = run(second, false, nullptr);
        GenerationStats stats;
        run(first, true, &stats);
        EXPECT_EQ(stats.prefix_cache_tokens, 0) << what;
        const auto warm = run(second, true, &stats);
        EXPECT_GE(stats.prefix_cache_tokens, 256) << what << ": the shared prefix is restored";
        ASSERT_EQ(warm.size(), cold.size()) << what;
        for (size_t i = 0; i < warm.size(); ++i) {
            EXPECT_EQ(warm[i].first, cold[i].first) << what << " token " << i;
            EXPECT_NEAR(warm[i].second, cold[i].second, 2e-3f) << what << " token " << i;
        }
        const PrefixCacheStats ps = engine.prefix_cache_stats();
        EXPECT_GE(ps.hits, 1u) << what;
        EXPECT_LE(ps.bytes, ps.budget_bytes) << what;
    }
}

// The batched forward on the device: N sequences mixing prefill chunks, all-rows chunks and decode
// tokens (tests/unit/batch_schedule.h) in one forward per round give every sequence what it gets
// alone on the device and on the CPU, within the golden tolerance (batches run the prefill forms of
// the kernels, which round differently from the decode ones).
TEST_P(CudaSession, BatchedForwardMatchesAloneAndTheCpu) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    auto cpu = load(GetParam(), "cpu");
    auto gpu = load(GetParam(), "cuda");
    ASSERT_TRUE(cpu && gpu);
    for (int n : {1, 2, 3, 5, 8}) {
        const testing::ScheduleLogits g = testing::run_schedule(*gpu, n);
        const testing::ScheduleLogits c = testing::run_schedule(*cpu, n);
        EXPECT_LT(max_diff(g.batched, g.alone), 2e-3f)
            << "N=" << n << ": batched against alone on the device";
        EXPECT_LT(max_diff(g.batched, c.alone), 2e-3f)
            << "N=" << n << ": batched on the device against the CPU";
    }
}

// Forwards of 2..16 rows run the decode kernels over every row as graphs, one per batch shape (its
// sequences, their state parities, rows and logit rows), the least recently used of 16 replaced. Every
// size in turn (30 shapes with both parities: graphs evicted), then sizes seen before (replays), each
// against the CPU; and a rewind between replays (the parity a graph was captured for comes back).
TEST_P(CudaSession, RowsGraphsOfEveryShapeMatchTheCpu) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    auto cpu = load(GetParam(), "cpu");
    auto gpu = load(GetParam(), "cuda");
    ASSERT_TRUE(cpu && gpu);
    auto sc = cpu->new_session(), sg = gpu->new_session();
    const auto p = prompt(20, 3);
    ASSERT_TRUE(sc->evaluate(p, false).has_value());
    ASSERT_TRUE(sg->evaluate(p, false).has_value());
    int32_t salt = 10;
    auto step = [&](int64_t n, bool all) {
        const auto t = prompt(n, salt++);
        auto lc = sc->evaluate(t, all);
        auto lg = sg->evaluate(t, all);
        ASSERT_TRUE(lc.has_value() && lg.has_value()) << lg.status().message();
        EXPECT_LT(max_diff(*lg, *lc), 2e-3f) << n << " rows, all logits " << all << ", at " << sg->position();
    };
    for (int64_t n = 2; n <= 16; ++n) step(n, n % 2 == 0);
    for (int64_t n : {2, 3, 2, 3, 16}) step(n, true);
    ASSERT_TRUE(sc->checkpoint().is_ok());
    ASSERT_TRUE(sg->checkpoint().is_ok());
    const int64_t mark = sg->position();
    step(4, true);
    for (Session* s : {sc.get(), sg.get()}) {
        auto at = s->truncate(mark);
        ASSERT_TRUE(at.has_value()) << at.status().message();
        ASSERT_EQ(*at, mark);
    }
    step(4, true);
    step(4, true);
}

// A packed model through all three tiers: a VRAM expert cache of 2·k + 1 slots fed from a host
// cache (page-locked by the backend) of a few slots fed from disk, against the CPU on the same
// packed model. Prefill, step-by-step decode (with next-layer prefetch) and greedy generation.
TEST_P(CudaSession, PackedModelThroughGpuHostAndDiskTiers) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = sluice::testing::test_data_dir() + "/goldens/" + GetParam();
    po.out_dir = tmp.file("packed");
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();
    EngineOptions eo;
    eo.model_dir = po.out_dir;
    eo.threads = 2;
    eo.context_tokens = 256;
    eo.cpu_int8_activations = false;  // compared with the GPU's f32 (3xTF32) arithmetic: the exact path
    eo.gpu_int8_prefill = false;
    auto cpu = Engine::load(eo);
    ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
    if ((*cpu)->info().n_experts == 0) GTEST_SKIP() << GetParam() << ": a dense model has no experts to tier";
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
    EXPECT_EQ((*gpu)->gpu_expert_cache_stats().slots, 2 * K + 1);

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
    // Batches through the tiers: each round's expert union goes through the VRAM slots in rounds.
    const testing::ScheduleLogits bg = testing::run_schedule(**gpu, 6);
    const testing::ScheduleLogits bc = testing::run_schedule(**cpu, 6);
    EXPECT_LT(max_diff(bg.batched, bc.alone), 2e-3f) << "tiered batched forward against the CPU";
    const GpuExpertCacheStats s = (*gpu)->gpu_expert_cache_stats();
    const ExpertCacheStats h = (*gpu)->expert_cache_stats();
    EXPECT_GT(s.misses, 0u);
    EXPECT_GT(s.evictions, 0u);
    EXPECT_GT(h.misses, 0u);  // the host tier read from disk
    EXPECT_GT(h.bytes_read, 0u);
}

// Failure atomicity on the device: the default model packed, tiered through a VRAM cache of 2·k + 1
// slots and an LRU host cache of 3·k slots without prefetch (every layer reads from disk), with the
// expert records of layer 5 corrupted on disk (verify_reads) for a prefill chunk and a decode step.
// The session stays at its position, and after the repair it continues exactly as a fresh session
// fed the same chunks.
TEST(CudaFailure, AFailedTieredForwardLeavesTheSessionAtItsLastPosition) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    const std::string packed = tmp.file("packed");
    ASSERT_TRUE(testing::pack_default_model(packed));
    auto layout = format::open_packed_dir(packed);
    ASSERT_TRUE(layout.has_value());
    const format::PackExpertFile* f = layout->for_layer(5);
    ASSERT_NE(f, nullptr);
    const std::string file = packed + "/" + f->file;
    auto flip = [&] {
        ASSERT_TRUE(
            testing::flip_record_bytes(file, f->record_stride, static_cast<int64_t>(f->record_xxh3.size())));
    };
    EngineOptions eo;
    eo.model_dir = packed;
    eo.threads = 2;
    eo.context_tokens = 256;
    eo.device = "cuda";
    eo.cache_policy = CachePolicy::kLru;
    eo.prefetch = false;
    eo.verify_reads = true;
    auto probe = Engine::load(eo);
    ASSERT_TRUE(probe.has_value()) << probe.status().message();
    const int64_t K = (*probe)->info().experts_per_token;
    eo.expert_cache_bytes = static_cast<uint64_t>(3 * K) * (*probe)->memory_plan().slot_bytes;
    eo.gpu_expert_cache_bytes =
        static_cast<uint64_t>(2 * K + 1) * (*probe)->gpu_expert_cache_stats().slot_bytes;
    probe->reset();
    auto gpu = Engine::load(eo);
    ASSERT_TRUE(gpu.has_value()) << gpu.status().message();
    ASSERT_TRUE((*gpu)->gpu_expert_cache_stats().tiered);

    const auto p = prompt(21, 11), chunk = prompt(5, 500), more = prompt(3, 900);
    auto s = (*gpu)->new_session();
    ASSERT_TRUE(s->evaluate(p, false).has_value());
    flip();
    EXPECT_FALSE(s->evaluate(chunk, true).has_value());
    EXPECT_FALSE(s->evaluate(std::span<const int32_t>(chunk.data(), 1), false).has_value());
    EXPECT_EQ(s->position(), 21);
    flip();
    auto fresh = (*gpu)->new_session();
    ASSERT_TRUE(fresh->evaluate(p, false).has_value());
    auto got = s->evaluate(chunk, true), want = fresh->evaluate(chunk, true);
    ASSERT_TRUE(got.has_value() && want.has_value()) << got.status().message();
    EXPECT_LT(max_diff(*got, *want), 1e-5f);
    for (int32_t t : more) {
        auto g = s->evaluate(std::span<const int32_t>(&t, 1), false);
        auto w = fresh->evaluate(std::span<const int32_t>(&t, 1), false);
        ASSERT_TRUE(g.has_value() && w.has_value()) << g.status().message();
        EXPECT_LT(max_diff(*g, *w), 1e-5f) << "decode token " << t;
    }
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaSession,
                         ::testing::Values("qwen3_next_mlx_q4", "qwen3_5_moe_hf_bf16", "qwen3_moe_mlx_q4",
                                           "qwen3_mlx_q4", "qwen2_mlx_q4", "glm4_moe_mlx_q4",
                                           "qwen2_moe_mlx_q4", "mixtral_mlx_q4"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace sluice
