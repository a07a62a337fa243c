// Engine: loads a model folder into a Model, describes it (ModelInfo), owns the compute threads.
#include <fmt/format.h>

#include <thread>

#include "core/log.h"
#include "kernels/kernels.h"
#include "runtime/engine_impl.h"
#include "runtime/memory_plan.h"

namespace sluice {

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

namespace {

std::string describe_quantization(const model::ModelWeights& w, const model::ModelConfig& c) {
    if (!c.quantization.present) {
        const char* t = kernels::weight_type_name(w.embed.type);
        return t;
    }
    std::string s = "mlx affine " + std::to_string(c.quantization.global.bits) + "-bit g" +
                    std::to_string(c.quantization.global.group_size);
    if (!c.quantization.overrides.empty())
        s += " (+" + std::to_string(c.quantization.overrides.size()) + " per-module overrides)";
    return s;
}

}  // namespace

Expected<std::shared_ptr<Engine>> Engine::load(const EngineOptions& options) {
    if (options.context_tokens <= 0)
        return error(ErrorCode::kInvalidArgument, "[engine] context_tokens must be > 0");
    SLUICE_ASSIGN_OR_RETURN(auto model, model::Model::load(options.model_dir));
    auto engine = std::shared_ptr<Engine>(new Engine());
    Impl& im = *engine->impl_;
    im.options = options;
    const model::ModelConfig& c = model->config();
    ModelInfo& info = im.info;
    info.family = model::family_name(c.family);
    info.layout = model::layout_name(model->weights().layout);
    info.quantization = describe_quantization(model->weights(), c);
    info.vocab_size = c.vocab;
    info.hidden_size = c.hidden;
    info.n_layers = c.n_layers;
    for (int64_t l = 0; l < c.n_layers; ++l) info.n_full_attention_layers += c.is_full_attention(l);
    info.n_experts = c.n_experts;
    info.experts_per_token = c.top_k;
    info.dense_bytes = model->weights().dense_bytes;
    info.expert_bytes = model->weights().expert_bytes;
    info.eos_token_ids = c.eos_token_ids;
    // The memory plan: dense (mapped, fully touched during decode) + one session's state + scratch;
    // a streaming model's expert cache gets the rest.
    MemoryPlan& plan = im.plan;
    plan.streaming = model->packed();
    plan.dense_bytes = model->weights().dense_bytes;
    for (int64_t l = 0; l < c.n_layers; ++l) {
        // f32 KV per context token for attention layers; conv + recurrent state for DeltaNet ones.
        plan.state_bytes += c.is_full_attention(l)
                                ? static_cast<uint64_t>(2 * c.n_kv_heads * c.head_dim * 4 * options.context_tokens)
                                : static_cast<uint64_t>(((c.conv_kernel - 1) * c.conv_dim() +
                                                         c.linear_v_heads * c.linear_k_dim * c.linear_v_dim) * 4);
    }
    plan.scratch_bytes = runtime::scratch_bytes_estimate(c, 256);
    plan.budget_bytes = options.memory_bytes;
    if (plan.budget_bytes == 0) {
        // Unset: 80% of what the OS says is available.
        plan.budget_bytes = runtime::available_memory_bytes() / 10 * 8;
    }
    const uint64_t fixed = plan.dense_bytes + plan.state_bytes + plan.scratch_bytes + (64ull << 20);  // + runtime overhead
    if (plan.streaming) {
        const uint64_t slot = experts::ExpertStore::slot_bytes_for(model->packed_layout());
        if (plan.budget_bytes < fixed + slot) {
            return error(ErrorCode::kOutOfMemory,
                         fmt::format("[engine] a memory budget of {:.2f} GB does not fit this model: the dense core needs "
                                     "{:.2f} GB, session state {:.2f} GB and scratch {:.2f} GB before any expert cache "
                                     "(at least {:.2f} GB in all); raise --memory or lower --ctx-size",
                                     plan.budget_bytes / 1e9, plan.dense_bytes / 1e9, plan.state_bytes / 1e9,
                                     plan.scratch_bytes / 1e9, (fixed + slot) / 1e9));
        }
        plan.slot_bytes = slot;
        plan.cache_slots = static_cast<int64_t>((plan.budget_bytes - fixed) / slot);
        const int64_t all_experts = c.n_experts * static_cast<int64_t>(model->packed_layout().expert_files.size());
        plan.cache_slots = std::min(plan.cache_slots, all_experts);
        if (options.expert_cache_bytes > 0)
            plan.cache_slots = std::max<int64_t>(1, static_cast<int64_t>(options.expert_cache_bytes / slot));
        plan.cache_bytes = static_cast<uint64_t>(plan.cache_slots) * slot;
        experts::ExpertStoreOptions so;
        so.cache_bytes = plan.cache_bytes;
        so.io_threads = options.io_threads;
        so.prefetch = options.prefetch;
        so.verify_reads = options.verify_reads;
        so.policy = options.cache_policy;
        SLUICE_ASSIGN_OR_RETURN(im.store, experts::ExpertStore::open(options.model_dir, model->packed_layout(), so));
        model->set_expert_source(im.store.get());
    } else {
        plan.dense_bytes += model->weights().expert_bytes;  // resident (mapped) experts
    }
    im.model = std::move(model);
    int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    im.pool = std::make_unique<ThreadPool>(threads > 0 ? threads : 1);
    log::debug("[engine] {} ({}, {}), {} threads, {} kernels", info.family, info.layout, info.quantization,
               im.pool->size(), kernels::cpu_kernel_isa());
    return engine;
}

const ModelInfo& Engine::info() const { return impl_->info; }
const EngineOptions& Engine::options() const { return impl_->options; }
std::shared_ptr<const Tokenizer> Engine::tokenizer() const { return impl_->tokenizer; }
std::shared_ptr<const ChatTemplate> Engine::chat_template() const { return impl_->chat_template; }
const char* Engine::cpu_kernels() { return kernels::cpu_kernel_isa(); }
const MemoryPlan& Engine::memory_plan() const { return impl_->plan; }

ExpertCacheStats Engine::expert_cache_stats() const {
    ExpertCacheStats out;
    if (!impl_->store) return out;
    const experts::ExpertStoreStats s = impl_->store->stats();
    out.hits = s.hits;
    out.misses = s.misses;
    out.bytes_read = s.bytes_read;
    out.reads = s.reads;
    out.io_busy_s = s.io_busy_s;
    out.stall_s = s.stall_s;
    out.prefetch_issued = s.prefetch_issued;
    out.prefetch_used = s.prefetch_used;
    out.prefetch_wasted = s.prefetch_wasted;
    out.evictions = s.evictions;
    return out;
}

void Engine::reset_expert_cache_stats() {
    if (impl_->store) impl_->store->reset_stats();
}

std::unique_ptr<Session> Engine::new_session() {
    auto impl = std::make_unique<Session::Impl>();
    impl->engine = shared_from_this();
    impl->state = impl_->model->new_state(impl_->options.context_tokens);
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

}  // namespace sluice
