// Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): a cheap drafter proposes k
// tokens, the target model scores them (and the token after them) in one multi-token forward, and
// exact rejection sampling keeps a prefix of them plus one token of its own, so the output has the
// target's distribution whatever the drafter does — greedy decoding is its temperature-0 case,
// where a proposal is kept exactly when it is the target's argmax.
//
// Both distributions are the sampler's final ones (bias, suppression, penalties, temperature,
// top-k, top-p, min-p: runtime/sampler.h), computed for each position with the context the
// position would have, so every sampling option keeps its meaning.
//
// Threading: one generation's objects; not shared.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "sluice/session.h"

namespace sluice::runtime {

using Distribution = std::vector<std::pair<float, int32_t>>;  // (probability, id), sums to 1

// One position's verification: `proposal` was drawn from `q`; `p` is the target's distribution.
// Keeps the proposal with probability min(1, p(x)/q(x)); otherwise draws from the residual
// max(0, p − q) (normalised), which makes the kept-or-resampled token exactly p-distributed.
// Uniforms and draws come from `rng`. `scratch`: a vocabulary-sized zeroed buffer (left zeroed).
struct Verdict {
    bool accepted = false;
    int32_t token = -1;  // the proposal when accepted, else the resampled token
};
Verdict verify_proposal(std::span<const std::pair<float, int32_t>> p,
                        std::span<const std::pair<float, int32_t>> q, int32_t proposal, Sampler& rng,
                        std::vector<float>& scratch);

// Proposals of a draft model: a session of a smaller model with the same vocabulary, kept in step
// with the target's timeline (prefix reuse: only new tokens are fed; rejected ones are rolled back
// from the draft session's checkpoints).
class DraftModelDrafter {
 public:
    DraftModelDrafter(Session* draft, const SamplingParams& params, int64_t vocab,
                      std::vector<int32_t> suppressed);

    // Up to k proposals continuing `context` (the target's timeline including its pending token),
    // each with the draft's distribution it was drawn from. `generated` = the reply so far (for the
    // penalties). Fewer than k when the draft's context is full.
    Status propose(std::span<const int32_t> context, std::span<const int32_t> generated, int k,
                   const GenerateOptions& options, std::vector<int32_t>* tokens,
                   std::vector<Distribution>* dists);

 private:
    Session* draft_;
    Sampler sampler_;
    std::vector<float> logits_;
    std::vector<int32_t> scratch_context_, scratch_generated_;
};

// Proposals of the model's own multi-token-prediction head (models.md §3.7; vLLM's
// qwen3_next_mtp.py and its proposer): position p of the head reads the token after p and the
// target's final-normed hidden state at p, and its logits draft the token after that; a chained
// proposal feeds the head's own output at the previous position. The head keeps its own attention
// state (one layer's KV) beside one session for that session's whole life, so it must see every
// hidden row the target computes (observe()); propose() first catches the head up over the positions
// the target has added since, then drafts.
//
// Going back: the head's positions stay valid while the tokens up to the one after them are
// unchanged; the target's rows from the first position it computed again replace the old ones, and
// the row of the last position the head consumed is kept, so a rewind to where the head had been
// costs nothing. A rewind to exactly the first position the target computes again keeps the head's
// entry just before it, made for the old next token: drafts there may be a little worse (the output
// is the target's either way). A session whose earlier forwards the head never saw (one loaded from
// a file) leaves it out of step: it drafts nothing until the session starts over from position 0.
//
// Threading: the session's; backend calls under `compute` (the engine's compute lock).
class MtpDrafter {
 public:
    MtpDrafter(Backend* backend, std::unique_ptr<SequenceState> state, std::mutex* compute, int64_t hidden,
               int64_t vocab);
    // The target computed positions [from, from + rows / H) with these final-normed hidden rows.
    void observe(int64_t from, std::span<const float> rows);
    // Up to k proposals continuing `context` (the target's n positions plus its pending token), each
    // with the distribution `sampler` drew it from (the request's sampling, as DraftModelDrafter).
    // None when the head is out of step or the context is full.
    Status propose(std::span<const int32_t> context, std::span<const int32_t> generated, int k,
                   const GenerateOptions& options, Sampler& sampler, std::vector<int32_t>* tokens,
                   std::vector<Distribution>* dists);
    // The session's timeline was reset: everything forgotten.
    void reset();

 private:
    int64_t rows_end() const { return rows_begin_ + static_cast<int64_t>(rows_.size()) / hidden_; }

    Backend* backend_;
    std::unique_ptr<SequenceState> state_;  // the head's attention state: positions [0, m)
    std::mutex* compute_;
    int64_t hidden_, vocab_;
    std::vector<int32_t> ctx_;  // tokens 0..m the head's positions were computed against
    std::vector<float> rows_;   // the target's hidden rows for positions [rows_begin_, rows_end())
    int64_t rows_begin_ = 0;
    bool lost_ = false;
    std::vector<float> logits_, out_;
    std::vector<int32_t> scratch_context_, scratch_generated_;
};

// Chooses k for the next step from what the steps so far measured: the acceptance rate α of a
// proposal (a running mean), the target's forward time for n tokens and the drafter's time per
// proposal. A step of k proposals yields (1 − α^(k+1)) / (1 − α) tokens on average; the k with the
// most tokens per second wins, 0 (plain decoding) when nothing beats it. Times not measured yet are
// estimated from the measured ones (a line through them), so every k gets tried once it looks good.
class SpeculationController {
 public:
    explicit SpeculationController(int max_tokens) : max_(max_tokens) {}
    int choose();
    void record_target(int tokens, double ms);
    void record_draft(int proposals, double ms);
    void record_acceptance(int proposed, int accepted);
    double acceptance() const { return alpha_; }

 private:
    double target_ms(int tokens) const;
    int max_;
    double alpha_ = 0.7;  // prior until measured
    int64_t proposed_ = 0;
    double draft_ms_per_token_ = -1;
    std::vector<double> target_ms_ = std::vector<double>(33, -1);  // by tokens in the forward
    int since_probe_ = 0;
    int probe_every_ = 16;
};

}  // namespace sluice::runtime
