// Private state behind the public Engine and Session (include/sluice/engine.h, session.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "runtime/dense_stream.h"
#include "runtime/memory_pressure.h"
#include "runtime/prefix_cache.h"
#include "runtime/speculative.h"
#include "runtime/step_batcher.h"
#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice {

struct Engine::Impl {
    EngineOptions options;
    ModelInfo info;
    // Streams the dense core layer by layer when the plan says so (runtime/dense_stream.h); null
    // otherwise. Declared before the model, so it outlives the model's use of it.
    std::unique_ptr<runtime::DenseLayerStreamer> dense_streamer;
    std::shared_ptr<model::Model> model;
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<const ChatTemplate> chat_template;
    std::unique_ptr<ThreadPool> pool;
    MemoryPlan plan;
    std::unique_ptr<experts::ExpertStore> store;  // packed models only
    // The routed experts stream: the expert cache cannot hold them all, so each forward reads the experts
    // its tokens route to that the cache lacks (Session::Impl::prefill then makes no regenerate cut).
    bool experts_stream = false;
    std::unique_ptr<runtime::Backend> backend;  // where the forward runs (cpu or cuda)
    // Moves the store's size with memory pressure; declared after it, so it stops first.
    std::unique_ptr<runtime::MemoryPressureMonitor> pressure;
    std::mutex compute_mutex;  // one forward at a time on the shared pool
    // Batches the forwards of concurrent sessions into one (runtime/step_batcher.h) when the engine
    // serves several (max_sessions > 1); null otherwise.
    std::unique_ptr<runtime::StepBatcher> batcher;
    // Sequence state by token prefix, shared by the sessions (runtime/prefix_cache.h); null when off.
    std::unique_ptr<runtime::PrefixCache> prefix_cache;
    std::vector<int32_t> eos_ids;         // config + generation_config + tokenizer eos
    std::vector<int32_t> suppressed_ids;  // special tokens that are not EOS, and vocabulary padding rows
    SamplingParams default_sampling;      // from generation_config.json
    uint64_t fingerprint = 0;             // identifies the model for saved sessions
};

struct Session::Impl {
    std::shared_ptr<Engine> engine;
    // The sequence's state, owned by the backend (runtime/sequence_state.h); made on first use so a
    // device allocation failure is an error of the call that needs it.
    std::unique_ptr<runtime::SequenceState> seq;
    // The sequence's layout when the session chose its own KV type (SessionOptions), else none: the
    // model's state_layout().
    std::optional<model::StateLayout> layout;
    const model::StateLayout& state_layout() const;
    int64_t context_tokens = 0;
    std::vector<int32_t> tokens;  // the tokens whose state is in `seq`
    // How much of the state a cold prefill would have computed bit for bit: positions [0,
    // aligned_tokens) were computed only by forwards that began and ended at multiples of the prefix
    // cache's block (or restored from it), so the state there is what a prefill from position 0 in
    // such forwards gives, whatever the chunk size. Only such a state is stored in the engine's prefix
    // cache. -1: none (a rewind deeper than a KV window's ring lost rows a cold prefill would read; a
    // state loaded from a file).
    int64_t aligned_tokens = 0;
    // The model's multi-token-prediction head beside `seq` when the engine runs it (EngineOptions::
    // mtp): made with the sequence, fed every hidden row the forwards compute.
    std::unique_ptr<runtime::MtpDrafter> mtp;
    std::vector<float> hidden_rows;  // a forward's rows for `mtp`
    GenerationStats stats;
    std::atomic<bool> cancel_requested{false};

    Expected<runtime::SequenceState*> sequence();
    // A fresh MTP head state for `seq` (the compute lock held).
    Status make_mtp();
    int64_t position() const { return seq ? seq->position() : 0; }
    // Keeps a DeltaNet-state snapshot at the current position (turn boundaries).
    void save_checkpoint();
    // Rewinds to at most `keep` tokens of the timeline; returns the new position.
    Expected<int64_t> rewind_to(int64_t keep);
    // Keeps aligned_tokens true after a forward of `count` tokens from position `from`.
    void note_forward(int64_t from, int64_t count, bool decode_rows);
    // The prefix cache's part of generate(): restores the longest cached prefix of `prompt` beyond the
    // session's position, given where the prefill stops besides the end (`stops`, sorted: checkpoints)
    // (returns the new position; *divergence_tokens: how far the prompt follows the cache's blocks),
    // and stores the state after an aligned prefill forward that ended at a block
    // boundary, with the running state there when the layout has one.
    Expected<int64_t> restore_cached_prefix(std::span<const int32_t> prompt, int64_t chunk_tokens,
                                            std::span<const int64_t> stops, int64_t* divergence_tokens);
    void store_prefix(std::span<const int32_t> prompt);
    // generate()'s prefill of prompt[*start, end) (session.cpp), restoring from the prefix cache first
    // when it can (*start moves there); `logits` gets the last token's.
    Status prefill(std::span<const int32_t> prompt, const GenerateOptions& options, int64_t* start,
                   std::vector<float>& logits);
    // Session::evaluate into `logits` (resized; its capacity is reused). `summary` (optional) gets
    // the backend's summary of the last row when it computed one (read under the compute lock).
    // `decode_rows`: every token through the decode kernels (runtime/backend.h BatchStep), so the
    // logits and state are those of feeding them one at a time (speculative verification).
    Status evaluate_into(std::span<const int32_t> tokens, bool all_logits, int64_t chunk_tokens,
                         std::vector<float>& logits, std::optional<runtime::LogitsSummary>* summary = nullptr,
                         bool decode_rows = false);
};

}  // namespace sluice
