// Private state behind the public Engine and Session (include/sluice/engine.h, session.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice {

struct Engine::Impl {
    EngineOptions options;
    ModelInfo info;
    std::shared_ptr<model::Model> model;
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<const ChatTemplate> chat_template;
    std::unique_ptr<ThreadPool> pool;
    MemoryPlan plan;
    std::unique_ptr<experts::ExpertStore> store;  // packed models only
    std::unique_ptr<runtime::Backend> backend;    // where the forward runs (cpu or cuda)
    std::mutex compute_mutex;                     // one forward at a time on the shared pool
    std::vector<int32_t> eos_ids;                 // config + generation_config + tokenizer eos
    std::vector<int32_t> suppressed_ids;  // special tokens that are not EOS, and vocabulary padding rows
    SamplingParams default_sampling;      // from generation_config.json
    uint64_t fingerprint = 0;             // identifies the model for saved sessions
};

struct Session::Impl {
    // DeltaNet state at a turn boundary (attention KV needs no copy: it is rewound in place).
    struct Checkpoint {
        int64_t position = 0;
        std::vector<std::vector<float>> conv, recurrent;  // per layer (empty for attention layers)
    };

    std::shared_ptr<Engine> engine;
    model::ModelState state;
    model::Workspace ws;
    std::vector<int32_t> tokens;  // the tokens whose state is in `state`
    std::vector<Checkpoint> checkpoints;
    GenerationStats stats;
    std::atomic<bool> cancel_requested{false};

    void save_checkpoint();
    int64_t rewind_to(int64_t keep);
    // Session::evaluate into `logits` (resized; its capacity is reused). `summary` (optional) gets
    // the backend's summary of the last row when it computed one (read under the compute lock).
    Status evaluate_into(std::span<const int32_t> tokens, bool all_logits, int64_t chunk_tokens,
                         std::vector<float>& logits,
                         std::optional<runtime::LogitsSummary>* summary = nullptr);
};

}  // namespace sluice
