// sluice's public API, part 2: the Session — one conversation timeline on an Engine.
//
// A session holds the model state for the tokens it has seen (KV cache of attention layers,
// conv and recurrent state of Gated DeltaNet layers) and advances it token by token.
//
// Ownership: created by Engine::new_session(); keeps the Engine alive.
// Thread safety: a Session is used by one thread at a time, except cancel(), which any thread may
// call to stop a running generate() at the next token boundary.
// Errors: Status/Expected; a failed call leaves the session at the last consistent position.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

class Engine;

// Timings and counts of the last generate()/evaluate() call.
struct GenerationStats {
    int64_t prompt_tokens = 0;     // tokens of the prompt given
    int64_t prefilled_tokens = 0;  // tokens actually computed (the rest came from the cache)
    int64_t generated_tokens = 0;
    double ttft_ms = 0;            // call start → first generated token
    double prefill_ms = 0;
    double decode_ms = 0;
    double prefill_tok_s() const { return prefill_ms > 0 ? prefilled_tokens * 1000.0 / prefill_ms : 0; }
    double decode_tok_s() const {
        return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0;
    }
};

enum class FinishReason { kLength, kEos, kCancelled };

struct GenerateOptions {
    int64_t max_tokens = 128;
    bool ignore_eos = false;  // keep generating past end-of-sequence tokens (benchmarks, goldens)
};

// Called for each generated token with its id; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

class Session {
   public:
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Tokens processed so far (the context length).
    int64_t position() const;
    const std::vector<int32_t>& tokens() const;

    // Feeds `tokens` after the current position. With all_logits, returns logits for every fed
    // token ([n, vocab] row-major); otherwise only the last token's [vocab]. `chunk_tokens` bounds
    // the batch of one forward (prefill runs in chunks of this size).
    Expected<std::vector<float>> evaluate(std::span<const int32_t> tokens, bool all_logits,
                                          int64_t chunk_tokens = 256);

    // Feeds `prompt`, then generates greedily until max_tokens, an EOS id, the callback returning
    // false, or cancel(). Every generated token except the last has been fed through the model
    // and is part of tokens(); the last one is reported but not yet fed.
    Expected<FinishReason> generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                    const TokenCallback& on_token);

    // Stops a running generate() at the next token boundary (any thread).
    void cancel();

    // Back to an empty timeline (keeps the memory).
    void reset();

    const GenerationStats& stats() const;

    struct Impl;

   private:
    friend class Engine;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
