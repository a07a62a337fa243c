// sluice's public API, part 2: the Session — one conversation timeline on an Engine.
//
// A session holds the model state for the tokens it has seen (KV cache of attention layers, conv
// and recurrent state of Gated DeltaNet layers) and advances it token by token.
//
// Multi-turn reuse: generate() takes the WHOLE prompt (e.g. the rendered conversation) and reuses
// the longest prefix it shares with the tokens already in the session. Attention KV can be
// rewound to any position; DeltaNet state cannot, so the session keeps state checkpoints at turn
// boundaries (end of each prompt, end of each reply) and resumes from the nearest checkpoint at or
// before the shared prefix — never from wrong state. A continued conversation thus only computes
// its new tokens (GenerationStats::prefilled_tokens).
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
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

class Engine;

// Timings and counts of the last generate() call.
struct GenerationStats {
    int64_t prompt_tokens = 0;     // tokens of the prompt given
    int64_t prefilled_tokens = 0;  // tokens actually computed (the rest came from the session's cache)
    // Of the tokens not computed, those restored from the engine's prefix cache (another session's
    // prefill) rather than found in this session's own timeline.
    int64_t prefix_cache_tokens = 0;
    int64_t generated_tokens = 0;
    double ttft_ms = 0;  // call start → first generated token
    double prefill_ms = 0;
    double decode_ms = 0;
    // Speculative decoding (GenerateOptions::speculative): proposals made, proposals kept, and
    // target forwards that verified proposals.
    int64_t draft_tokens = 0;
    int64_t accepted_tokens = 0;
    int64_t verify_steps = 0;
    double acceptance_rate() const {
        return draft_tokens > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(draft_tokens)
                                : 0;
    }
    double prefill_tok_s() const {
        return prefill_ms > 0 ? static_cast<double>(prefilled_tokens) * 1000.0 / prefill_ms : 0;
    }
    double decode_tok_s() const {
        return decode_ms > 0 && generated_tokens > 1
                   ? static_cast<double>(generated_tokens - 1) * 1000.0 / decode_ms
                   : 0;
    }
};

// Per-request sampling. Every field is applied; defaults do nothing (greedy needs temperature 0).
struct SamplingParams {
    float temperature = 1.0f;         // 0 = greedy (argmax)
    int32_t top_k = 0;                // 0 = off
    float top_p = 1.0f;               // 1 = off
    float min_p = 0.0f;               // 0 = off; drop tokens with p < min_p · p_max
    float repetition_penalty = 1.0f;  // multiplicative (CTRL): logit > 0 → /p, else ·p; over the window
    int32_t repetition_window = 64;   // last N tokens of prompt + output (0 = all)
    float presence_penalty = 0.0f;    // OpenAI: −presence if the token appeared in the output
    float frequency_penalty = 0.0f;   // OpenAI: −frequency × count in the output
    std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits
    std::optional<uint64_t> seed;                       // per request; unset = random
};

class Session;

// Speculative decoding: a drafter proposes tokens, the target verifies them in one multi-token
// forward, and exact rejection sampling keeps the target's output distribution (greedy output is
// the same tokens as without it). Off unless a drafter is given.
struct SpeculativeOptions {
    // A session of a draft model: a smaller model with the same vocabulary (e.g. a small Qwen for a
    // large one). Used by one generation at a time; it keeps its own timeline in step with this one.
    Session* draft = nullptr;
    int tokens = 4;                   // proposals per step, 1..16
    float draft_temperature = -1.0f;  // the draft's sampling temperature; < 0: the request's own
    bool adaptive = false;            // choose the proposals per step (0 = off) from the measured acceptance
                                      // and step costs, at most `tokens`
    // Draft with the model's own multi-token-prediction head instead of a draft model (the engine
    // must run it: EngineOptions::mtp). `draft` is then ignored.
    bool mtp = false;
};

enum class FinishReason { kLength, kStop, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled", "error"

struct GenerateOptions {
    int64_t max_tokens = 256;
    SamplingParams sampling;
    std::vector<std::string> stop;  // stop strings: matched on the text across tokens, never emitted
    bool ignore_eos = false;        // keep going past end-of-sequence tokens (benchmarks, goldens)
    // Special tokens (added tokens flagged special) are never sampled unless they end the sequence;
    // set to allow them.
    bool allow_special_tokens = false;
    int32_t top_logprobs = 0;  // report the N most likely tokens with each generated one
    // Prompt positions at which to keep a DeltaNet state checkpoint while prefilling, besides the
    // end of the prompt and of the reply. Chat front ends pass the length of the conversation
    // without the generation prompt: templates often re-render the assistant prefix differently in
    // later turns (e.g. Qwen3 drops empty <think> blocks), and a checkpoint just before it keeps
    // the next turn from recomputing the whole history.
    std::vector<int64_t> checkpoint_positions;
    // Tokens per prefill forward: each chunk loads the union of its tokens' experts once per layer.
    // 1 = token by token (for comparison). A multiple of 64 (the default) lets the prompt use and fill
    // the engine's prefix cache; chunks start at multiples of it from the prompt's start.
    int64_t prefill_chunk_tokens = 256;
    // Restore the longest prefix of the prompt the engine's prefix cache holds (EngineOptions::
    // prefix_cache_bytes) when it is longer than what the session holds, and store this prefill's
    // state there. The logits are the same either way (bit for bit on the CPU: docs/ARCHITECTURE.md);
    // false: neither (benchmarks that measure a cold prefill).
    bool prefix_cache = true;
    // Optional hook over the final logits of each step (e.g. grammar-constrained decoding): may
    // set entries to -inf. Called after all sampling penalties, before temperature.
    std::function<void(std::span<float> logits, std::span<const int32_t> generated)> logits_filter;
    // Called once the next token is chosen (e.g. to advance a grammar).
    std::function<void(int32_t token)> on_accept;
    // Speculative decoding with a logits_filter needs the filter to answer for a speculative
    // `generated` (tokens not yet accepted at its end); a filter that says so sets this.
    bool filter_handles_speculation = false;
    SpeculativeOptions speculative;
};

// One step of a generation stream.
struct TokenEvent {
    int32_t token = -1;
    std::string text;   // newly complete UTF-8 text (may be empty while a character or a possible
                        // stop string is held back)
    float logprob = 0;  // log-probability of the token under the sampling distribution's logits
    std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Called for each generated token; return false to stop (finish reason: cancelled).
using TokenCallback = std::function<bool(const TokenEvent& event)>;

struct GenerateResult {
    FinishReason finish_reason = FinishReason::kLength;
    std::vector<int32_t> tokens;  // generated ids (without a final EOS; with stop-string tokens)
    std::string text;             // generated text, stop strings removed
    std::string stop_matched;     // the stop string or EOS token text that ended generation
    GenerationStats stats;
};

class Session;

// One session's part of Engine::evaluate_batch: `tokens` to feed after its position, and the
// logits that come back ([n, vocab] with all_logits, else the last token's [vocab]).
struct BatchEvaluation {
    Session* session = nullptr;
    std::span<const int32_t> tokens;
    bool all_logits = false;
    std::vector<float> logits;  // out
};

class SLUICE_API Session {
 public:
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Tokens whose state the session holds (the context).
    int64_t position() const;
    const std::vector<int32_t>& tokens() const;
    int64_t context_size() const;
    // Bits per element of its attention KV cache (32, 16, 8, 4 or 3; SessionOptions::kv_bits) and the
    // positions also kept in f16 (0: none).
    int kv_bits() const;
    int64_t kv_window() const;

    // Feeds `tokens` after the current position. With all_logits, returns logits for every fed
    // token ([n, vocab] row-major); otherwise only the last token's [vocab]. `chunk_tokens` bounds
    // the batch of one forward (prefill runs in chunks of this size).
    Expected<std::vector<float>> evaluate(std::span<const int32_t> tokens, bool all_logits,
                                          int64_t chunk_tokens = 256);
    // evaluate() with every token through the decode kernels, as if fed one at a time (in forwards of
    // up to 16 tokens): the logits and state of a token-by-token feed, bit for bit on the CPU, where
    // the prefill kernels round differently (int8 activations). For drivers that must reproduce
    // decoding exactly — a speculative drafter catching up with what its target decoded.
    Expected<std::vector<float>> evaluate_as_decode(std::span<const int32_t> tokens, bool all_logits);

    // Marks the current position as one the session can return to: keeps a snapshot of the
    // recurrent (DeltaNet) state here, on the device where the forward runs there. Attention-only
    // models can return to any position without one. A driver that evaluates proposed tokens
    // (speculative decoding) calls this before them and truncate() after rejecting some.
    Status checkpoint();
    // Goes back to at most `position` tokens: exactly there when the model is attention-only or a
    // checkpoint is there, else to the latest checkpoint before it (0 when there is none). Returns
    // the new position; tokens() is cut to it.
    Expected<int64_t> truncate(int64_t position);

    // Makes the session's context equal `prompt` (reusing the longest shared prefix, see above),
    // then samples up to max_tokens, stopping at an EOS id (unless ignore_eos), a stop string, the
    // callback returning false, or cancel(). The generated tokens stay in the session (a following
    // turn that repeats them reuses their state).
    Expected<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                      const TokenCallback& on_token = {});

    // Stops a running generate() at the next token boundary (any thread).
    void cancel();

    // Back to an empty timeline (keeps the memory).
    void reset();

    const GenerationStats& stats() const;

    // Saves the timeline (tokens, KV cache, DeltaNet state, turn checkpoints) to `path`;
    // load() restores it into a session of the same model. The file is versioned and checksummed;
    // a different model or a damaged file is refused with a clear error.
    Status save(const std::string& path) const;
    Status load(const std::string& path);

    struct Impl;

 private:
    friend class Engine;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
