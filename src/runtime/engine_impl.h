// Private state behind the public Engine and Session (include/sluice/engine.h, session.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "model/model.h"
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
    std::mutex compute_mutex;  // one forward at a time on the shared pool
};

struct Session::Impl {
    std::shared_ptr<Engine> engine;
    model::ModelState state;
    model::Workspace ws;
    std::vector<int32_t> tokens;
    GenerationStats stats;
    std::atomic<bool> cancel_requested{false};
};

}  // namespace sluice
