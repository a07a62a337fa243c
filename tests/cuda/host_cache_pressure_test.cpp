// The GPU tier's host expert cache under memory pressure: its slots in use are page-locked one by one
// (cuda::PinnedHostSlots, the store's slot observer), so the store can shrink to its floor — the
// retired slots unregistered before their pages go back — and grow again, while the tiered forward
// gives the same tokens at every size, and while it is resized under it. And an engine on a tiered
// GPU runs the pressure monitor.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "convert/packer.h"
#include "experts/expert_store.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "sluice/engine.h"
#include "test_util.h"

namespace sluice {
namespace {

bool has_device() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Whether p is in registered host memory (cudaHostRegister); whether [p, p + bytes) holds pages.
bool page_locked(const uint8_t* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}
bool has_pages(const uint8_t* p, uint64_t bytes) {
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v((bytes + page - 1) / page);
    if (mincore(const_cast<uint8_t*>(p), bytes, v.data()) != 0) return false;
    return std::any_of(v.begin(), v.end(), [](unsigned char c) { return (c & 1) != 0; });
}

// The store's page-locked slots; every one must hold pages (retired slots, whose pages went back,
// must not be registered).
int64_t locked_slots(experts::ExpertStore& store) {
    int64_t n = 0;
    for (int64_t s = 0; s < store.n_slots(); ++s) {
        const uint8_t* p = store.host_memory().data() + static_cast<uint64_t>(s) * store.slot_bytes();
        if (!page_locked(p)) continue;
        EXPECT_TRUE(has_pages(p, store.slot_bytes())) << "slot " << s << " is page-locked without pages";
        ++n;
    }
    return n;
}

// Greedy tokens after `prompt` on a fresh sequence.
std::vector<int32_t> greedy(runtime::Backend& backend, int64_t vocab, const std::vector<int32_t>& prompt,
                            int n) {
    std::vector<int32_t> out;
    auto seq = backend.new_sequence(128, 1);
    EXPECT_TRUE(seq.has_value()) << seq.status().message();
    if (!seq.has_value()) return out;
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::vector<int32_t> step = prompt;
    for (int i = 0; i < n; ++i) {
        const Status st = backend.forward(**seq, step, logits.data(), false);
        EXPECT_TRUE(st.is_ok()) << st.message();
        if (!st.is_ok()) return out;
        const auto next =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(next);
        step.assign(1, next);
    }
    return out;
}

struct StreamedModel {
    std::shared_ptr<model::Model> model;
    std::unique_ptr<experts::ExpertStore> store;
};

// The packed model at `dir` streaming from a store that holds every expert, floor: top-k slots.
StreamedModel open_streamed(const std::string& dir) {
    StreamedModel m;
    auto loaded = model::Model::load(dir);
    EXPECT_TRUE(loaded.has_value()) << loaded.status().message();
    if (!loaded.has_value()) return m;
    m.model = *loaded;
    const format::PackLayout& layout = m.model->packed_layout();
    const uint64_t slot = experts::ExpertStore::slot_bytes_for(layout);
    experts::ExpertStoreOptions so;
    so.cache_bytes = slot * static_cast<uint64_t>(layout.n_experts) * layout.expert_files.size();
    so.floor_bytes = slot * static_cast<uint64_t>(m.model->config().top_k);
    so.io_threads = 4;
    auto store = experts::ExpertStore::open(dir, layout, so);
    EXPECT_TRUE(store.has_value()) << store.status().message();
    if (!store.has_value()) return m;
    m.store = std::move(*store);
    m.model->set_expert_source(m.store.get());
    return m;
}

// A tiered forward (a VRAM cache of 2·k + 1 slots) fed from the host cache as it shrinks to its
// floor and grows back: retired slots are unregistered (and their pages returned), the slots in
// use registered, and greedy decoding gives the same tokens at every size.
TEST(CudaHostCache, ShrinksToItsFloorAndGrowsBackUnderATieredForward) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = sluice::testing::test_data_dir() + "/goldens/qwen3_next_mlx_q4";
    po.out_dir = tmp.file("packed");
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();

    // One expert's size in GPU memory, from a resident backend on a model of its own.
    uint64_t gpu_slot = 0;
    {
        StreamedModel probe = open_streamed(po.out_dir);
        ASSERT_TRUE(probe.store);
        auto resident = runtime::make_cuda_backend(probe.model, runtime::CudaBackendOptions{});
        ASSERT_TRUE(resident.has_value()) << resident.status().message();
        ASSERT_FALSE((*resident)->expert_tier_stats().tiered);
        gpu_slot = (*resident)->expert_tier_stats().slot_bytes;
    }
    StreamedModel m = open_streamed(po.out_dir);
    ASSERT_TRUE(m.store);
    experts::ExpertStore& store = *m.store;
    const int64_t K = m.model->config().top_k, V = m.model->config().vocab;
    runtime::CudaBackendOptions co;
    co.context_tokens = 128;
    co.int8_prefill = false;
    co.expert_cache_bytes = static_cast<uint64_t>(2 * K + 1) * gpu_slot;
    auto made = runtime::make_cuda_backend(m.model, co);
    ASSERT_TRUE(made.has_value()) << made.status().message();
    std::unique_ptr<runtime::Backend> backend = std::move(*made);
    ASSERT_TRUE(backend->expert_tier_stats().tiered);
    ASSERT_EQ(backend->expert_tier_stats().slots, 2 * K + 1);

    const std::vector<int32_t> prompt = {3, 40, 77, 114, 151, 188, 25, 62, 99, 136, 173, 10};
    const std::vector<int32_t> want = greedy(*backend, V, prompt, 10);
    ASSERT_EQ(want.size(), 10u);
    store.wait_idle();  // the tier's prefetch reads
    const experts::ExpertCacheCapacity full = store.capacity();
    ASSERT_GT(full.max_slots, full.floor_slots);
    const int64_t locked_full = locked_slots(store);
    EXPECT_GT(locked_full, full.floor_slots) << "the slots the forward read are page-locked";

    // Shrunk to the floor: every retired slot unregistered, its pages handed back.
    EXPECT_EQ(store.set_cache_bytes(0), static_cast<uint64_t>(full.floor_slots) * full.slot_bytes);
    store.wait_idle();
    EXPECT_EQ(store.capacity().active_slots, full.floor_slots);
    EXPECT_LE(locked_slots(store), full.floor_slots);
    EXPECT_GT(store.stats().bytes_returned, 0u);
    // Decoding at the floor (each step's experts in rounds of the floor, or slots restored for a
    // step and retired after it): the same tokens, and still no retired slot registered.
    EXPECT_EQ(greedy(*backend, V, prompt, 10), want);
    store.wait_idle();
    EXPECT_EQ(store.capacity().active_slots, full.floor_slots);
    EXPECT_LE(locked_slots(store), full.floor_slots);

    // Grown back: restored slots are page-locked again as reads fill them; the same tokens.
    store.set_cache_bytes(static_cast<uint64_t>(full.max_slots) * full.slot_bytes);
    EXPECT_EQ(greedy(*backend, V, prompt, 10), want);
    store.wait_idle();
    EXPECT_EQ(store.capacity().active_slots, full.max_slots);
    EXPECT_GT(locked_slots(store), full.floor_slots);

    // Resized over and over while decoding, as the pressure monitor's thread does: slots registered
    // and unregistered beside the tier's copies and the capture of the decode graphs; the same tokens.
    std::atomic<bool> stop{false};
    std::thread resizer([&] {
        for (uint64_t i = 0; !stop.load(); ++i) {
            store.set_cache_bytes(i % 2 == 0 ? 0 : static_cast<uint64_t>(full.max_slots) * full.slot_bytes);
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
    });
    for (int round = 0; round < 3; ++round)
        EXPECT_EQ(greedy(*backend, V, prompt, 10), want) << "round " << round;
    stop = true;
    resizer.join();
    store.wait_idle();
    EXPECT_LE(locked_slots(store), store.capacity().active_slots);

    // The backend gone, no slot stays registered.
    backend.reset();
    EXPECT_EQ(locked_slots(store), 0);
}

// An engine whose GPU tiers the experts follows memory pressure with its host cache (--memory the
// ceiling, --memory-floor the floor), and reports it as the CPU does; one whose GPU holds every
// expert keeps the host cache at its size (the store only fed the upload).
TEST(CudaHostCache, ATieredEngineRunsThePressureMonitor) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = sluice::testing::test_data_dir() + "/goldens/qwen3_next_mlx_q4";
    po.out_dir = tmp.file("packed");
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();
    EngineOptions eo;
    eo.model_dir = po.out_dir;
    eo.threads = 2;
    eo.context_tokens = 128;
    eo.device = "cuda";
    auto resident = Engine::load(eo);
    ASSERT_TRUE(resident.has_value()) << resident.status().message();
    ASSERT_FALSE((*resident)->gpu_expert_cache_stats().tiered);
    EXPECT_FALSE((*resident)->memory_pressure().adaptive);
    const int64_t K = (*resident)->info().experts_per_token;
    const uint64_t slot = (*resident)->memory_plan().slot_bytes;
    eo.expert_cache_bytes = static_cast<uint64_t>(4 * K) * slot;
    eo.memory_floor_bytes = static_cast<uint64_t>(2 * K) * slot;
    eo.gpu_expert_cache_bytes =
        static_cast<uint64_t>(2 * K + 1) * (*resident)->gpu_expert_cache_stats().slot_bytes;
    resident->reset();
    auto tiered = Engine::load(eo);
    ASSERT_TRUE(tiered.has_value()) << tiered.status().message();
    ASSERT_TRUE((*tiered)->gpu_expert_cache_stats().tiered);
    const MemoryPressureStatus p = (*tiered)->memory_pressure();
    EXPECT_TRUE(p.adaptive);
    EXPECT_FALSE(p.source.empty());
    EXPECT_EQ(p.ceiling_bytes, static_cast<uint64_t>(4 * K) * slot);
    EXPECT_EQ(p.floor_bytes, static_cast<uint64_t>(2 * K) * slot);
    EXPECT_GE(p.budget_bytes, p.floor_bytes);
    EXPECT_LE(p.budget_bytes, p.ceiling_bytes);
}

}  // namespace
}  // namespace sluice
