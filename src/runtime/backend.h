// Backend: where the model forward runs. The CPU backend is Model::forward itself; the CUDA
// backend (src/cuda/) keeps the dense core, the routed experts and every session's KV/DeltaNet
// state in GPU memory. The engine picks one from EngineOptions::device and the session calls it;
// nothing above this line knows which one runs (a stub stands in when CUDA is not built, so no
// caller has an #ifdef).
//
// State: a ModelState's host vectors are the authority the session reads and writes (turn
// checkpoints, rewind, save/load). A device backend mirrors them in ModelState::device and keeps
// the two in step through the flags there: it uploads when the host copy changed and downloads in
// sync_to_host() before the session reads the host copy.
// Threading: one forward at a time per backend (the engine's compute mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice::runtime {

class Backend {
 public:
    virtual ~Backend() = default;
    // "cpu" or e.g. "cuda:0 (NVIDIA H200, 139.8 GiB)".
    virtual std::string name() const = 0;
    // Model::forward's contract (model.h).
    virtual Status forward(model::ModelState& state, std::span<const int32_t> tokens, float* logits,
                           bool all_logits, model::Workspace& ws, ThreadPool* pool) = 0;
    // Makes the host vectors of `state` current (a device backend copies its mirror back): the
    // DeltaNet conv and recurrent state, and with `kv` also the attention KV rows [0, n_past).
    virtual Status sync_to_host(model::ModelState& /*state*/, bool /*kv*/) { return Status::ok(); }
    // Device memory the backend holds for weights (0 for the CPU).
    virtual uint64_t device_weight_bytes() const { return 0; }
    // Weight bytes one decode token reads on the device (0 for the CPU).
    virtual uint64_t decode_bytes_per_token() const { return 0; }
    // Device memory bandwidth measured with a large device-to-device copy (bytes read + written
    // per second / 1e9); 0 for the CPU (the bench measures host memory itself).
    virtual double measure_memory_gb_s() { return 0.0; }
    // The device expert tier's counters (zero when there is none).
    virtual GpuExpertCacheStats expert_tier_stats() const { return {}; }
    virtual void reset_expert_tier_stats() {}
    // The summary of the last forward's logits when it was a one-token decode that computed one
    // (the CUDA backend), else nothing.
    virtual std::optional<LogitsSummary> logits_summary() const { return std::nullopt; }
};

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const model::Model> model);

struct CudaBackendOptions {
    int device_index = 0;
    uint64_t gpu_memory_bytes = 0;    // VRAM budget; 0 = 90% of what is free
    int64_t context_tokens = 0;       // per session, for the budget check
    uint64_t expert_cache_bytes = 0;  // caps the VRAM expert cache (tiers the experts); 0 = the budget's rest
    bool prefetch = true;             // next-layer expert prefetch into VRAM (tiered)
    std::string cache_policy = "lfu";
};

// Defined in src/cuda/backend.cu when the CUDA backend is built, else in src/cuda/cuda_stub.cpp
// (which returns "[cuda] this build of sluice has no CUDA support").
Expected<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                     const CudaBackendOptions& options);

// "cpu" → -1; "cuda" → 0; "cuda:N" → N; anything else is an error naming the value.
Expected<int> parse_device(const std::string& device);

}  // namespace sluice::runtime
