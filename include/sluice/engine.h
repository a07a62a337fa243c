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
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

class Session;
class Tokenizer;
class ChatTemplate;

struct EngineOptions {
    std::string model_dir;          // Hugging Face, MLX or sluice packed checkpoint folder
    int threads = 0;                // compute threads; 0 = all cores
    int64_t context_tokens = 4096;  // KV capacity of each session
};

// What a model is, for `sluice info`, the server's /v1/models and logs.
struct ModelInfo {
    std::string family;       // qwen3_moe, qwen3_next, qwen3_5_moe
    std::string layout;       // huggingface or mlx
    std::string quantization; // e.g. "bf16", "mlx affine 4-bit g64 (+8-bit overrides)"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t n_layers = 0;
    int64_t n_full_attention_layers = 0;
    int64_t n_experts = 0;
    int64_t experts_per_token = 0;
    uint64_t dense_bytes = 0;   // everything but routed experts
    uint64_t expert_bytes = 0;  // all routed experts
    std::vector<int32_t> eos_token_ids;
};

class Engine : public std::enable_shared_from_this<Engine> {
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

    // A new, empty conversation timeline.
    std::unique_ptr<Session> new_session();

    // Which CPU kernels run ("avx512", "avx2", "portable").
    static const char* cpu_kernels();

    struct Impl;  // private; defined in src/runtime/

   private:
    Engine();
    friend class Session;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
