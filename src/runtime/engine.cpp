// Engine: loads a model folder into a Model, describes it (ModelInfo), owns the compute threads.
#include <thread>

#include "core/log.h"
#include "kernels/kernels.h"
#include "runtime/engine_impl.h"

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

std::unique_ptr<Session> Engine::new_session() {
    auto impl = std::make_unique<Session::Impl>();
    impl->engine = shared_from_this();
    impl->state = impl_->model->new_state(impl_->options.context_tokens);
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

}  // namespace sluice
