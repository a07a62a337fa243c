// Backend: where the model forward runs. The CPU backend is Model::forward itself; the CUDA
// backend (src/cuda/) keeps the dense core, the routed experts and every session's KV/DeltaNet
// state in GPU memory. The engine picks one from EngineOptions::device and the session calls it;
// nothing above this line knows which one runs (a stub stands in when CUDA is not built, so no
// caller has an #ifdef).
//
// State: the backend owns each sequence's state (new_sequence(); runtime/sequence_state.h) where
// its forward runs — host vectors for the CPU, device memory for CUDA — with snapshots, truncation
// and serialisation there; nothing keeps a second copy in step by hand.
// Threading: one call at a time per backend (the engine's compute mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/sequence_state.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice::runtime {

// One sequence's part of a batched forward (Backend::forward_batch): `tokens` (consecutive, from
// seq->position()), and where its logits go ([tokens, V] when all_logits, else [V]; may be null).
struct BatchStep {
    SequenceState* seq = nullptr;
    std::span<const int32_t> tokens;
    float* logits = nullptr;
    bool all_logits = false;
    // Every token through the decode kernels, as if fed one at a time (model.h SequenceStep): a
    // speculative verification's logits are then plain decoding's on the CPU (the CUDA backend's
    // batch is within the golden tolerance either way).
    bool decode_rows = false;
    // [tokens, H]: every token's final-normed hidden state (model.h SequenceStep::hidden), for the
    // sequence's multi-token-prediction drafter; null when not wanted.
    float* hidden = nullptr;
};

class Backend {
 public:
    virtual ~Backend() = default;
    // "cpu" or e.g. "cuda:0 (NVIDIA H200, 139.8 GiB)".
    virtual std::string name() const = 0;
    // A new, empty sequence of `max_positions` tokens of context keeping up to `max_snapshots`
    // snapshots (sequence_state.h), allocated where this backend computes, laid out as `layout` (one
    // of the model's layouts: a per-session KV type) or, when null, the model's state_layout().
    virtual Expected<std::unique_ptr<SequenceState>> new_sequence(
        int64_t max_positions, int max_snapshots, const model::StateLayout* layout = nullptr) = 0;
    // Runs `tokens` (consecutive, from seq.position()) of a sequence made by this backend. Writes
    // logits [tokens.size(), V] when all_logits, else only the last token's [V], into `logits` (may
    // be null). Advances the position; a forward that fails part-way leaves the sequence exactly as
    // it was.
    virtual Status forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                           bool all_logits) = 0;
    // Runs several sequences' steps — prefill chunks and decode tokens mixed, one step per sequence
    // at most — as one forward: each weight is read once for all of them, and the MoE groups every
    // step's tokens by expert so one expert read serves every sequence; attention and DeltaNet run
    // per sequence. Each step's logits are those of forward() on it alone (bit for bit on the CPU;
    // within the golden tolerance on CUDA, whose batched kernels round differently from its
    // decode ones). A forward that fails part-way leaves every sequence as it was.
    virtual Status forward_batch(std::span<const BatchStep> steps) = 0;
    // The model's multi-token-prediction head (model.h forward_mtp), where this backend runs it: a
    // sequence of the head's own attention state, for a main sequence laid out as `layout` (null:
    // the model's), and its forward. Backends that do not run it say so by name.
    virtual bool runs_mtp() const { return false; }
    virtual Expected<std::unique_ptr<SequenceState>> new_mtp_sequence(int64_t max_positions,
                                                                      const model::StateLayout* layout) {
        (void)max_positions;
        (void)layout;
        return error(ErrorCode::kUnsupported,
                     "[" + name() + "] this backend does not run multi-token-prediction heads yet");
    }
    virtual Status forward_mtp(SequenceState& mtp, std::span<const int32_t> tokens, const float* hidden,
                               float* logits, bool all_logits, float* hidden_out) {
        (void)mtp, (void)tokens, (void)hidden, (void)logits, (void)all_logits, (void)hidden_out;
        return error(ErrorCode::kUnsupported,
                     "[" + name() + "] this backend does not run multi-token-prediction heads yet");
    }
    // Device memory the backend holds for weights (0 for the CPU).
    virtual uint64_t device_weight_bytes() const { return 0; }
    // Weight bytes one decode token reads on the device (0 for the CPU).
    virtual uint64_t decode_bytes_per_token() const { return 0; }
    // Device memory bandwidth measured with a large device-to-device copy (bytes read + written
    // per second / 1e9); 0 for the CPU (the bench measures host memory itself).
    virtual double measure_memory_gb_s() { return 0.0; }
    // An expert-parallel group (several GPUs): the time of one MoE layer's all-reduce over `rows` tokens
    // ([rows, hidden] floats), measured now, in µs; 0 for a single device.
    virtual double measure_all_reduce_us(int64_t rows) {
        (void)rows;
        return 0.0;
    }
    // The device expert tier's counters (zero when there is none).
    virtual GpuExpertCacheStats expert_tier_stats() const { return {}; }
    virtual void reset_expert_tier_stats() {}
    // The summary of the last forward's logits when it was a one-token decode that computed one
    // (the CUDA backend), else nothing.
    virtual std::optional<LogitsSummary> logits_summary() const { return std::nullopt; }
};

// The CPU backend: Model::forward on `pool` (may be null: the calling thread), which must outlive it.
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const model::Model> model, ThreadPool* pool);

struct CudaBackendOptions {
    int device_index = 0;
    // More than one: an expert-parallel group over these GPUs (runtime/cuda/expert_parallel.cpp) — the
    // routed experts dealt out among them (runtime/expert_shard.h), the dense core on each, the MoE
    // outputs summed over NCCL; device_index is then unused. One GPU repeated: its ranks share it.
    // gpu_memory_bytes and expert_cache_bytes are per GPU.
    std::vector<int> devices;
    uint64_t gpu_memory_bytes = 0;    // VRAM budget; 0 = 90% of what is free
    int64_t context_tokens = 0;       // per session, for the budget check
    uint64_t expert_cache_bytes = 0;  // caps the VRAM expert cache (tiers the experts); 0 = the budget's rest
    bool prefetch = true;             // next-layer expert prefetch into VRAM (tiered)
    CachePolicy cache_policy = CachePolicy::kLfu;
    bool int8_prefill = true;  // EngineOptions::gpu_int8_prefill
    CudaDiagnostics diagnostics;
};

// Defined in src/cuda/backend.cu when the CUDA backend is built, else in src/cuda/cuda_stub.cpp
// (which returns "[cuda] this build of sluice has no CUDA support").
Expected<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                     const CudaBackendOptions& options);

// "cpu" → -1; "cuda" → 0; "cuda:N" → N; anything else is an error naming the value.
Expected<int> parse_device(const std::string& device);
// EngineOptions::device as a list of GPUs: "cpu" → none; one GPU → its index; "cuda:0,cuda:1" → each
// (an expert-parallel group); one GPU repeated ("cuda:0,cuda:0") → ranks sharing it. An error names a
// list entry that is not a GPU, or a repeat beside other GPUs.
Expected<std::vector<int>> parse_devices(const std::string& devices);

}  // namespace sluice::runtime
