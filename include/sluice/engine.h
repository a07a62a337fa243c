// sluice's public API, part 1: the Engine — a loaded model.
//
// "Treat the engine as the loaded model and the session as one mutable inference timeline."
// An Engine owns the weights (mapped read-only), the tokenizer and chat template when the model
// folder has them, and the compute threads. Sessions (session.h) hold per-conversation state.
//
// Ownership: Engine::load returns a shared_ptr; every Session keeps its Engine alive.
// Thread safety: all const methods are safe from any thread. Sessions of one engine may be used
// from different threads; their forward passes are serialised on the engine's compute threads.
// Errors: every fallible call returns Status/Expected with a message naming the file, tensor or
// field at fault. Nothing here exits or aborts on bad input.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/export.h"
#include "sluice/session.h"
#include "sluice/status.h"
#include "sluice/types.h"

namespace sluice {

class Session;
class Tokenizer;
class ChatTemplate;

// Per-session settings (Engine::new_session). A server takes them per request (`kv_bits`).
struct SessionOptions {
    // This session's attention KV cache: 0 = the engine's (EngineOptions::kv_bits), else 32, 16, 8, 4
    // or 3 as there, with kv_window positions also in f16 (-1: the engine's kv_window). Its state must
    // fit what the memory plan reserves for each session (the engine's type at its context): any
    // smaller type does; a larger one is an error naming both sizes.
    int kv_bits = 0;
    int64_t kv_window = -1;
};

struct EngineOptions {
    std::string model_dir;  // Hugging Face, MLX or sluice packed checkpoint folder
    int threads = 0;        // compute threads; 0 = all cores
    // KV capacity of each session; 0 = the model's context (max_position_embeddings, or what its
    // YaRN scaling extends it to) up to 8192, or the longest the memory budget holds when that is
    // less (at least 256). More than the model's maximum is an error, and so is an asked-for context
    // whose state the memory budget cannot hold.
    int64_t context_tokens = 4096;
    // Bits per element of the attention KV cache: 32 (f32, exact), 16 (f16), 8 (q8: int8 codes,
    // one f16 scale per 32), 4 (q4: 4-bit codes, one f16 scale per 32) or 3 (q3: a rotated 3-bit
    // Lloyd–Max codebook, one f16 scale per head). Attention reads the compressed cache directly
    // (kernels/kv_format.h); any other value is an error at load.
    int kv_bits = 32;
    // With kv_bits 8, 4 or 3: the most recent kv_window positions are also kept in f16 and read so
    // by attention (positions are compressed as they age out of it); 0 = none. A ring of
    // kv_window + 64 rows per attention layer, counted in the plan's session state.
    int64_t kv_window = 256;
    // On the CPU, quantized weights (MLX 4/8-bit, GGUF's block formats) multiply activations quantised
    // per block of 32 to int8 with integer dot products (VNNI / vpmaddubsw; as llama.cpp does): ~2x the
    // decode speed, logits within the int8 tolerance of the reference (docs/ARCHITECTURE.md states it).
    // false: f32 activations, the reference's arithmetic (logits within 2e-3). Float weights and the
    // CUDA backend are unaffected.
    bool cpu_int8_activations = true;
    // On CUDA, the prefill (batches of more than 16 rows) on tensor cores: the products of 4/8-bit
    // weights on int8 ones, activations quantised as on the CPU above (the same definition), and
    // attention over the KV cache with q, k, v and p in f16 (flash attention; not with a kv_window
    // ring), logits within the int8 tolerance. Decode stays f32. false: products in 3xTF32 and
    // attention in f32, at f32 accuracy (logits within 2e-3 of the reference).
    bool gpu_int8_prefill = true;
    // The whole process's memory budget: dense weights, KV/state, scratch and expert cache.
    // 0 = derived from the memory available. Streaming (packed) models size their expert cache
    // from what remains; load fails when the dense core alone does not fit.
    uint64_t memory_bytes = 0;
    // A streamed model's expert cache in host memory (the CPU's, or a GPU's host tier when its
    // experts are tiered) follows memory pressure: it shrinks toward memory_floor_bytes when other
    // programs need the RAM, handing the pages back (a GPU's page-locked slots unlocked first), and
    // grows back toward what memory_bytes planned once the pressure is gone
    // (runtime/memory_pressure.h); memory_bytes is then the ceiling. false: the planned size, held.
    bool adapt_to_memory_pressure = true;
    // The least the expert cache keeps under pressure; 0 = one layer's routed experts (top-k slots).
    uint64_t memory_floor_bytes = 0;
    int io_threads = 16;   // expert reads in flight (queue depth)
    bool prefetch = true;  // next-layer expert prefetch
    // A streamed model's dense core (attention, routers, shared experts: each layer's own weights) read
    // layer by layer from its mapped file instead of held whole: the next layers' pages are asked
    // for ahead of the forward (madvise WILLNEED) and each layer's handed back after it ran
    // (MADV_DONTNEED), so only the embedding rows touched, lm_head and a window of layers stay
    // resident — a model whose dense core alone exceeds memory_bytes (DeepSeek-V3's 9.8 GB at 4 bits)
    // runs in the rest. kAuto streams it when the dense core with the sessions' state, the scratch
    // and an expert cache of two layers' routed experts would not fit the budget; the CPU only (a GPU
    // holds its dense core in VRAM).
    enum class DenseStreaming { kAuto, kOff, kOn };
    DenseStreaming dense_streaming = DenseStreaming::kAuto;
    // A packed model whose every expert fits the expert cache: read them all in the background at
    // load (behind the forward's own reads), so it runs from memory without paying each expert's
    // first use. The CLI turns it on (--no-preload off); the library leaves it off.
    bool preload_experts = false;
    // Streamed expert records against their xxh3 in layout.json: every record the first time it is
    // read from disk (default: a corrupt file fails the forward, naming file and expert, at a cost
    // paid once per record), or with verify_reads every read (also catches faults in transit).
    bool verify_reads = false;
    bool verify_first_reads = true;
    CachePolicy cache_policy = CachePolicy::kLfu;
    uint64_t expert_cache_bytes = 0;  // fixed expert-cache size; 0 = whatever the budget leaves
    // Sessions alive and generating at once (the server's --parallel): the plan reserves state
    // (KV, DeltaNet state and its turn checkpoints) and forward scratch for each.
    int max_sessions = 1;
    // The prefix cache shared by every session of the engine (docs/ARCHITECTURE.md "The prefix
    // cache"): copies of the sequence state a prefill computed, by token prefix in blocks of 64
    // tokens, so a session whose prompt starts like an earlier one's (a shared system prompt, tool
    // block or document; a regenerate) restores that prefix instead of computing it. Its budget comes
    // out of memory_bytes (a streamed model's expert cache gets less); least recently used blocks go
    // first. Unset: a modest share — a sixteenth of the budget, at most 1 GiB, and only what the
    // budget leaves after weights, state and scratch; 0: off. A size the budget cannot hold is an
    // error at load naming both.
    std::optional<uint64_t> prefix_cache_bytes;
    // Run the model's multi-token-prediction head (the mtp.* tensors of Qwen3-Next / Qwen3.5
    // checkpoints) beside every session — one more attention layer's KV per session — so generations
    // can draft with it (SpeculativeOptions::mtp). An error at load when the model has no head or
    // the device does not run it.
    bool mtp = false;
    // Where the forward runs: "cpu", or "cuda" / "cuda:N" (GPU N; an error when this build has no
    // CUDA support or no such GPU exists). On a GPU the dense core and each session's KV/state live
    // in GPU memory, bounded by gpu_memory_bytes (0 = 90% of what is free); the routed experts too
    // when they fit, else they are tiered: a VRAM expert cache fed from the host expert cache
    // (memory_bytes), fed from disk. Several GPUs ("cuda:0,cuda:1"): expert parallelism — each GPU
    // holds the dense core and its share of the routed experts (dealt out by id), the MoE layers' outputs
    // summed over NCCL after every layer; gpu_memory_bytes is then per GPU. One GPU repeated
    // ("cuda:0,cuda:0") runs the same path as ranks sharing that GPU (a test of it).
    std::string device = "cpu";
    uint64_t gpu_memory_bytes = 0;
    uint64_t gpu_expert_cache_bytes =
        0;  // caps the VRAM expert cache (forces tiering); 0 = the budget's rest
    CudaDiagnostics cuda_diagnostics;
};

// How the memory budget is spent (printed at start, reported by `sluice info`).
struct SLUICE_API MemoryPlan {
    bool streaming = false;  // routed experts streamed from disk (packed model)
    uint64_t budget_bytes = 0;
    uint64_t dense_bytes = 0;  // resident weights (mapped)
    // Streamed dense core (EngineOptions::dense_streaming): the layers' own weights read per forward
    // from their file, of which dense_bytes counts the window held (dense_window_layers layers) besides
    // what stays (embeddings, lm_head, norms); 0: the whole dense core held.
    uint64_t dense_streamed_bytes = 0;
    int64_t dense_window_layers = 0;
    uint64_t state_bytes = 0;         // KV cache + DeltaNet state and checkpoints, all sessions
    std::string kv_type = "f32";      // the attention KV cache's element type (--kv-bits)
    int64_t kv_window = 0;            // recent positions kept in f16 besides (--kv-window; 0: none)
    uint64_t kv_bytes_per_token = 0;  // KV of one token of one session, all attention layers
    uint64_t scratch_bytes = 0;       // forward workspace of each session (estimate)
    int sessions = 1;                 // sessions the state and scratch are reserved for
    uint64_t runtime_bytes = 0;       // code, tokenizer, thread stacks, IO buffers (estimate)
    uint64_t cache_bytes = 0;         // expert cache slots
    int64_t cache_slots = 0;
    uint64_t slot_bytes = 0;          // one expert record
    uint64_t prefix_cache_bytes = 0;  // the prefix cache's budget (EngineOptions::prefix_cache_bytes; 0: off)
    int64_t context_tokens = 0;       // each session's context
    int64_t max_context_tokens = 0;   // the longest context this budget holds with these settings (a
                                      // streamed model's expert cache shrunk to one slot; at most the
                                      // model's max_position_embeddings)
    std::string describe() const;
};

// The weights a plan is made for before they exist on this machine (`sluice info CONFIG.json`):
// the sizes of the packed layout they would be converted to.
struct PlannedWeights {
    uint64_t dense_bytes = 0;    // resident: embeddings, attention, DeltaNet, routers, shared experts
    uint64_t expert_bytes = 0;   // every routed expert
    uint64_t record_bytes = 0;   // one routed expert's record (a cache slot); 0: a dense model
    int64_t expert_records = 0;  // routed experts in all (experts × MoE layers)
    // Of dense_bytes, the decoder layers' own mapped weights (what streaming the dense core reads per
    // token) and the largest one layer's share.
    uint64_t layers_dense_bytes = 0;
    uint64_t max_layer_dense_bytes = 0;
};

// What Engine::load would plan for the model of `config_path` (a config.json) with `weights`
// streamed from disk, without reading any weight: the same plan and the same errors (a context
// beyond the model's, a budget that cannot hold it, naming the numbers).
SLUICE_API Expected<MemoryPlan> plan_memory(const std::string& config_path, const PlannedWeights& weights,
                                            const EngineOptions& options);

// Expert-cache counters since load (or the last reset).
struct ExpertCacheStats {
    uint64_t hits = 0, misses = 0;
    uint64_t bytes_read = 0, reads = 0;
    double io_busy_s = 0;  // wall time with reads in flight
    double stall_s = 0;    // time compute waited for reads
    uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
    uint64_t evictions = 0;
    // Prefetch reads dropped before they started: the layer they were for had come, and wanted others.
    uint64_t prefetch_canceled = 0;
    double hit_rate() const {
        return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
    }
    double read_gb_s() const { return io_busy_s > 0 ? static_cast<double>(bytes_read) / io_busy_s / 1e9 : 0; }
};

// The prefix cache (EngineOptions::prefix_cache_bytes) since load or the last clear. A lookup is
// made when a session's prompt could gain at least a block over what the session holds; a hit
// restored some prefix, a miss found none longer.
struct PrefixCacheStats {
    uint64_t budget_bytes = 0;  // 0: off
    uint64_t bytes = 0;         // held now (state copies and bookkeeping)
    int64_t blocks = 0;         // blocks held now
    int64_t block_tokens = 0;   // tokens per block
    uint64_t lookups = 0, hits = 0, misses = 0;
    uint64_t hit_tokens = 0;       // prompt tokens restored instead of computed
    uint64_t inserted_blocks = 0;  // blocks stored
    uint64_t evictions = 0;        // blocks dropped for room (least recently used first)
    uint64_t skipped_blocks = 0;   // blocks of prompts longer than the budget holds, not stored
    double hit_rate() const { return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0; }
};

// The expert cache's size under memory pressure (EngineOptions::adapt_to_memory_pressure).
// Continuous batching (max_sessions > 1): the forwards run and the session steps they served (a
// decode token, a prefill chunk, a verification); steps / forwards is the mean batch size.
struct BatchingStats {
    int64_t forwards = 0;
    int64_t steps = 0;
    int64_t tokens = 0;
};

struct MemoryPressureStatus {
    bool adaptive = false;        // a monitor moves the expert cache's size
    std::string source;           // the signals it watches
    uint64_t ceiling_bytes = 0;   // the planned expert cache (--memory's share)
    uint64_t floor_bytes = 0;     // the least it keeps (--memory-floor)
    uint64_t budget_bytes = 0;    // its target now
    uint64_t cache_bytes = 0;     // slot memory usable now (meets the target as pinned slots are released)
    uint64_t bytes_returned = 0;  // slot memory handed back to the OS (since load or a stats reset)
    uint64_t pressure_events = 0;
    uint64_t grows = 0;            // steps back toward the ceiling
    uint64_t available_bytes = 0;  // what the machine (or cgroup) had left at the last look
};

// The GPU's expert tier (VRAM slots fed from the host cache) since load or the last reset; all
// zero when the experts are resident in GPU memory or the forward runs on the CPU.
struct GpuExpertCacheStats {
    bool tiered = false;
    int64_t slots = 0;
    uint64_t slot_bytes = 0;  // one expert in GPU memory (also reported when resident)
    uint64_t hits = 0, misses = 0;
    uint64_t bytes_copied = 0;  // host → GPU
    double copy_s = 0;          // GPU time of the copies
    double wait_s = 0;          // time the forward waited for the host tier (its reads from disk)
    uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
    uint64_t evictions = 0;
    double hit_rate() const {
        return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
    }
    double copy_gb_s() const { return copy_s > 0 ? static_cast<double>(bytes_copied) / copy_s / 1e9 : 0; }
};

// What a model is, for `sluice info`, the server's /v1/models and logs.
struct ModelInfo {
    std::string family;        // qwen3_moe, qwen3_next, qwen3_5_moe
    std::string layout;        // huggingface or mlx
    std::string quantization;  // e.g. "bf16", "mlx affine 4-bit g64 (+8-bit overrides)"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t n_layers = 0;
    int64_t n_full_attention_layers = 0;
    int64_t n_sliding_window_layers = 0;  // attention over the last sliding_window positions (gpt-oss)
    int64_t sliding_window = 0;
    int64_t n_experts = 0;
    int64_t experts_per_token = 0;
    uint64_t dense_bytes = 0;   // everything but routed experts
    uint64_t expert_bytes = 0;  // all routed experts
    std::vector<int32_t> eos_token_ids;
    bool synthetic = false;  // random weights from `sluice synth` (routing ≈ uniform)
};

class SLUICE_API Engine : public std::enable_shared_from_this<Engine> {
 public:
    static Expected<std::shared_ptr<Engine>> load(const EngineOptions& options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const ModelInfo& info() const;
    const EngineOptions& options() const;

    // The model folder's tokenizer / chat template, or nullptr when it has none (then only
    // token-id interfaces work).
    std::shared_ptr<const Tokenizer> tokenizer() const;
    std::shared_ptr<const ChatTemplate> chat_template() const;

    const MemoryPlan& memory_plan() const;
    // Sampling defaults from the model's generation_config.json (temperature etc.), or greedy.
    const SamplingParams& default_sampling() const;
    // Ids that end a sequence: config.json, generation_config.json and the tokenizer's eos token.
    const std::vector<int32_t>& eos_token_ids() const;
    ExpertCacheStats expert_cache_stats() const;
    void reset_expert_cache_stats();
    MemoryPressureStatus memory_pressure() const;
    // How the forwards of concurrent sessions were batched (EngineOptions::max_sessions > 1).
    BatchingStats batching_stats() const;
    // The prefix cache shared by the sessions (EngineOptions::prefix_cache_bytes); all zero when off.
    PrefixCacheStats prefix_cache_stats() const;
    // Drops every cached prefix and zeroes the counters (benchmarks that measure a cold prefill).
    void clear_prefix_cache();
    // Waits until the expert store has no read queued or in flight (a preload done): for benchmarks
    // that must not measure while the experts are still arriving. Returns at once for resident models.
    void wait_for_expert_reads();

    // A new, empty conversation timeline.
    std::unique_ptr<Session> new_session();
    // One with its own settings (SessionOptions: its KV cache type); an error naming the problem for a
    // type the model cannot store or a state larger than the memory plan reserves for a session.
    Expected<std::unique_ptr<Session>> new_session(const SessionOptions& options);

    // Feeds several sessions of this engine in one forward — prefill chunks and single decode
    // tokens mixed, each session at most once: each weight is read once for all of them and each
    // routed expert once for every session that routes to it (on a streamed model, one disk read).
    // Each session gets exactly the logits Session::evaluate gives it alone (bit for bit on the CPU;
    // within the golden tolerance on CUDA). On error no session has moved.
    Status evaluate_batch(std::span<BatchEvaluation> items);

    // Which CPU kernels run ("avx512", "avx2", "portable").
    static const char* cpu_kernels();
    // Where the forward runs: "cpu" or e.g. "cuda:0 (NVIDIA H200, 150.1 GB, sm_90)".
    std::string backend_name() const;
    // GPU backend only (0 on the CPU): weight bytes in GPU memory, and the weight bytes one decode
    // token reads (dense core, one embedding row, k routed experts per MoE layer).
    uint64_t device_weight_bytes() const;
    uint64_t device_decode_bytes_per_token() const;
    GpuExpertCacheStats gpu_expert_cache_stats() const;
    // GPU memory bandwidth in GB/s measured now (a device copy), or 0 on the CPU.
    double measure_device_memory_gb_s() const;
    // Several GPUs (expert parallelism): one MoE layer's all-reduce of `rows` tokens' outputs over them,
    // measured now, in µs; 0 on one device.
    double measure_all_reduce_us(int64_t rows) const;

    struct Impl;  // private; defined in src/runtime/

 private:
    Engine();
    Status load_text_side();
    friend class Session;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
