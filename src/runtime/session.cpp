// Session: one timeline of tokens through the model — prefix reuse with turn checkpoints, chunked
// prefill, sampling, stop strings, streaming text, save/load.
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "io/mapped_file.h"
#include "runtime/engine_impl.h"
#include "runtime/memory_plan.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "sluice/text_stream.h"
#include "sluice/tokenizer.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr size_t kMaxCheckpoints = runtime::kSessionCheckpoints;
// Prefills also end at the block boundaries before this many of the prompt's last special tokens,
// keeping a state there in the prefix cache (Session::Impl::prefill).
constexpr int kTurnHints = 4;

}  // namespace

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::kLength: return "length";
        case FinishReason::kStop: return "stop";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
    }
    return "?";
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

int64_t Session::position() const {
    return impl_->position();
}
const std::vector<int32_t>& Session::tokens() const {
    return impl_->tokens;
}
int64_t Session::context_size() const {
    return impl_->context_tokens;
}

namespace {
int bits_of(kernels::KvType type) {
    switch (type) {
        case kernels::KvType::kF32: return 32;
        case kernels::KvType::kF16: return 16;
        case kernels::KvType::kQ8: return 8;
        case kernels::KvType::kQ4: return 4;
        case kernels::KvType::kQ3: return 3;
    }
    return 0;
}
}  // namespace

const model::StateLayout& Session::Impl::state_layout() const {
    return layout ? *layout : engine->impl_->model->state_layout();
}
int Session::kv_bits() const {
    return bits_of(impl_->state_layout().kv);
}
int64_t Session::kv_window() const {
    return impl_->state_layout().kv_window;
}
const GenerationStats& Session::stats() const {
    return impl_->stats;
}
void Session::cancel() {
    impl_->cancel_requested.store(true);
}

void Session::reset() {
    impl_->tokens.clear();
    impl_->aligned_tokens = 0;
    if (impl_->seq == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(impl_->engine->impl_->compute_mutex);
        if (!impl_->seq->reset().is_ok()) impl_->seq.reset();  // a device error: a fresh one on next use
    }
    if (impl_->mtp) impl_->mtp->reset();
}

Expected<runtime::SequenceState*> Session::Impl::sequence() {
    if (seq == nullptr) {
        Engine::Impl& e = *engine->impl_;
        SLUICE_ASSIGN_OR_RETURN(seq,
                                e.backend->new_sequence(context_tokens, static_cast<int>(kMaxCheckpoints),
                                                        layout ? &*layout : nullptr));
        tokens.clear();
        aligned_tokens = 0;
        mtp.reset();
        if (e.options.mtp) SLUICE_RETURN_IF_ERROR(make_mtp());
    }
    return seq.get();
}

Status Session::Impl::make_mtp() {
    Engine::Impl& e = *engine->impl_;
    SLUICE_ASSIGN_OR_RETURN(auto head,
                            e.backend->new_mtp_sequence(context_tokens, layout ? &*layout : nullptr));
    mtp = std::make_unique<runtime::MtpDrafter>(e.backend.get(), std::move(head), &e.compute_mutex,
                                                e.info.hidden_size, e.info.vocab_size);
    return Status::ok();
}

Status Session::checkpoint() {
    std::lock_guard<std::mutex> lock(impl_->engine->impl_->compute_mutex);
    SLUICE_ASSIGN_OR_RETURN(runtime::SequenceState * seq, impl_->sequence());
    return seq->snapshot();
}

Expected<int64_t> Session::truncate(int64_t position) {
    if (position < 0) return error(ErrorCode::kInvalidArgument, "[session] truncate to a negative position");
    return impl_->rewind_to(position);
}

Expected<std::vector<float>> Session::evaluate(std::span<const int32_t> tokens, bool all_logits,
                                               int64_t chunk_tokens) {
    std::vector<float> logits;
    SLUICE_RETURN_IF_ERROR(impl_->evaluate_into(tokens, all_logits, chunk_tokens, logits));
    return logits;
}

Expected<std::vector<float>> Session::evaluate_as_decode(std::span<const int32_t> tokens, bool all_logits) {
    std::vector<float> logits;
    SLUICE_RETURN_IF_ERROR(
        impl_->evaluate_into(tokens, all_logits, 16, logits, nullptr, /*decode_rows=*/true));
    return logits;
}

// Session::evaluate into a caller's buffer: decode reuses one logits vector for every token (a
// fresh 1 MB vector per token is an allocation, page faults and zeroing each step).
Status Session::Impl::evaluate_into(std::span<const int32_t> tokens, bool all_logits, int64_t chunk_tokens,
                                    std::vector<float>& logits,
                                    std::optional<runtime::LogitsSummary>* summary, bool decode_rows) {
    Impl& s = *this;
    Engine::Impl& e = *s.engine->impl_;
    const int64_t V = e.info.vocab_size;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return error(ErrorCode::kInvalidArgument, "[session] evaluate needs at least one token");
    if (chunk_tokens <= 0) chunk_tokens = n;
    logits.resize(static_cast<size_t>(all_logits ? n * V : V));
    // With a step batcher (several sessions at once) each chunk joins whatever forward the other
    // sessions are about to run; alone, the chunks run under the compute lock held throughout.
    std::unique_lock<std::mutex> lock(e.compute_mutex);
    SLUICE_ASSIGN_OR_RETURN(runtime::SequenceState * seq, s.sequence());
    if (e.batcher) lock.unlock();
    for (int64_t begin = 0; begin < n; begin += chunk_tokens) {
        const int64_t count = std::min(chunk_tokens, n - begin);
        const bool last = begin + count == n;
        float* out = all_logits ? logits.data() + begin * V : (last ? logits.data() : nullptr);
        // A chunk that fails leaves the sequence at the end of the chunks before it, and `tokens`
        // says the same: the session stays consistent.
        const auto part = tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(count));
        const int64_t from = seq->position();
        runtime::BatchStep step{seq, part, out, all_logits, decode_rows};
        if (s.mtp) {  // with an MTP head every token's hidden row goes to it
            s.hidden_rows.resize(static_cast<size_t>(count * e.info.hidden_size));
            step.hidden = s.hidden_rows.data();
        }
        if (e.batcher) {
            const runtime::StepBatcher::Outcome done = e.batcher->run(step);
            SLUICE_RETURN_IF_ERROR(done.status);
            if (last && summary != nullptr) *summary = done.summary;
        } else if (decode_rows || s.mtp) {
            SLUICE_RETURN_IF_ERROR(e.backend->forward_batch(std::span<const runtime::BatchStep>(&step, 1)));
        } else {
            SLUICE_RETURN_IF_ERROR(e.backend->forward(*seq, part, out, all_logits));
        }
        if (s.mtp) s.mtp->observe(from, s.hidden_rows);
        s.tokens.insert(s.tokens.end(), tokens.begin() + begin, tokens.begin() + begin + count);
        s.note_forward(from, count, decode_rows);
    }
    if (!e.batcher && summary != nullptr) *summary = e.backend->logits_summary();
    return Status::ok();
}

Status Engine::evaluate_batch(std::span<BatchEvaluation> items) {
    Engine::Impl& e = *impl_;
    const int64_t V = e.info.vocab_size;
    std::lock_guard<std::mutex> lock(e.compute_mutex);
    std::vector<runtime::BatchStep> steps(items.size());
    std::vector<int64_t> froms(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        BatchEvaluation& item = items[i];
        if (item.session == nullptr || item.session->impl_->engine.get() != this)
            return error(ErrorCode::kInvalidArgument,
                         "[session] batch item " + std::to_string(i) + " is not a session of this engine");
        for (size_t j = 0; j < i; ++j)
            if (items[j].session == item.session)
                return error(ErrorCode::kInvalidArgument, "[session] batch items " + std::to_string(j) +
                                                              " and " + std::to_string(i) +
                                                              " are the same session");
        if (item.tokens.empty())
            return error(ErrorCode::kInvalidArgument,
                         "[session] batch item " + std::to_string(i) + " has no tokens");
        SLUICE_ASSIGN_OR_RETURN(runtime::SequenceState * seq, item.session->impl_->sequence());
        const auto n = static_cast<int64_t>(item.tokens.size());
        item.logits.resize(static_cast<size_t>(item.all_logits ? n * V : V));
        steps[i] = runtime::BatchStep{seq, item.tokens, item.logits.data(), item.all_logits};
        Session::Impl& si = *item.session->impl_;
        if (si.mtp) {
            si.hidden_rows.resize(static_cast<size_t>(n * e.info.hidden_size));
            steps[i].hidden = si.hidden_rows.data();
        }
        froms[i] = seq->position();
    }
    SLUICE_RETURN_IF_ERROR(e.backend->forward_batch(steps));
    for (size_t i = 0; i < items.size(); ++i) {
        Session::Impl& si = *items[i].session->impl_;
        si.tokens.insert(si.tokens.end(), items[i].tokens.begin(), items[i].tokens.end());
        si.note_forward(froms[i], static_cast<int64_t>(items[i].tokens.size()), false);
        if (si.mtp) si.mtp->observe(froms[i], si.hidden_rows);
    }
    return Status::ok();
}

void Session::Impl::save_checkpoint() {
    if (seq == nullptr) return;
    // Without a snapshot (a device error) a later rewind re-runs more of the prompt: slower, still
    // correct.
    std::lock_guard<std::mutex> lock(engine->impl_->compute_mutex);
    (void)seq->snapshot();
}

Expected<int64_t> Session::Impl::rewind_to(int64_t keep) {
    if (seq == nullptr || keep >= seq->position()) return position();
    std::lock_guard<std::mutex> lock(engine->impl_->compute_mutex);
    const int64_t from = seq->position();
    SLUICE_ASSIGN_OR_RETURN(const int64_t target, seq->truncate(keep));
    tokens.resize(static_cast<size_t>(target));
    // A cut deeper than a KV window ring's slack loses ring rows that the next positions read in f16
    // in a cold prefill (they read the compressed rows instead): nothing after it is a cold prefill's.
    if (target == 0)
        aligned_tokens = 0;
    else if (seq->layout().kv_window > 0 && from - target > model::kKvRingSlack)
        aligned_tokens = -1;
    else
        aligned_tokens = std::min(aligned_tokens, target);
    return target;
}

void Session::Impl::note_forward(int64_t from, int64_t count, bool decode_rows) {
    constexpr int64_t B = runtime::PrefixCache::kBlockTokens;
    // The chunked DeltaNet form runs chunks of 64 from a step's first token and a step of <= 16 tokens
    // takes the recurrent form: a forward from one block boundary to another computes what a longer
    // aligned forward over the same positions computes (model.h), bit for bit on the CPU.
    if (aligned_tokens == from && from % B == 0 && (from + count) % B == 0 && !decode_rows)
        aligned_tokens = from + count;
}

Expected<int64_t> Session::Impl::restore_cached_prefix(std::span<const int32_t> prompt, int64_t chunk_tokens,
                                                       std::span<const int64_t> stops,
                                                       int64_t* divergence_tokens) {
    Engine::Impl& e = *engine->impl_;
    const model::StateLayout& layout = state_layout();
    const int64_t held = position();
    runtime::PrefixCache::Query query;
    query.prompt = prompt;
    query.layout = runtime::PrefixCache::layout_key(layout);
    query.needs_running = layout.recurrent_bytes() + layout.window_bytes() > 0;
    query.held_tokens = held;
    query.chunk_tokens = chunk_tokens;
    query.stops = stops;
    std::optional<runtime::PrefixCache::Match> match = e.prefix_cache->lookup(query, divergence_tokens);
    if (!match) return held;
    const int64_t n = match->tokens();
    const std::vector<std::string_view> blocks = match->position_blocks();
    {
        std::lock_guard<std::mutex> lock(e.compute_mutex);
        SLUICE_ASSIGN_OR_RETURN(runtime::SequenceState * sq, sequence());
        const Status restored =
            sq->assign_prefix(blocks, runtime::PrefixCache::kBlockTokens, match->running(), n);
        if (!restored.is_ok()) {  // the sequence is empty now, and so is the timeline
            tokens.clear();
            aligned_tokens = 0;
            return restored;
        }
    }
    tokens.assign(prompt.begin(), prompt.begin() + n);
    aligned_tokens = n;
    stats.prefix_cache_tokens = n - held;
    return n;
}

void Session::Impl::store_prefix(std::span<const int32_t> prompt) {
    Engine::Impl& e = *engine->impl_;
    runtime::SequenceState* sq = seq.get();
    constexpr int64_t B = runtime::PrefixCache::kBlockTokens;
    // Blocks are read in groups under the compute lock: other sessions' forwards wait for one group's
    // copies at most.
    constexpr int64_t kBlocksPerRead = 16;
    runtime::PrefixCache::StateReader reader;
    reader.block_bytes = sq->positions_bytes(B);
    reader.running_bytes = sq->running_bytes();
    reader.read_blocks = [&](int64_t first, int64_t count, std::vector<std::string>& out) -> Status {
        out.clear();
        out.reserve(static_cast<size_t>(count));
        std::vector<std::string> group;
        for (int64_t at = first; at < first + count; at += kBlocksPerRead) {
            const int64_t n = std::min(kBlocksPerRead, first + count - at);
            {
                std::lock_guard<std::mutex> lock(e.compute_mutex);
                SLUICE_RETURN_IF_ERROR(sq->read_position_blocks(at * B, n, B, group));
            }
            for (std::string& g : group) out.push_back(std::move(g));
        }
        return Status::ok();
    };
    reader.read_running = [&](std::string& out) {
        std::lock_guard<std::mutex> lock(e.compute_mutex);
        return sq->append_running(out);
    };
    // A copy that fails (a device error) leaves this prefix out of the cache: later prompts compute it.
    (void)e.prefix_cache->store(prompt.first(static_cast<size_t>(sq->position())),
                                runtime::PrefixCache::layout_key(sq->layout()), reader);
}

// generate()'s prefill of prompt[*start, L) into `logits` (the last token's), with the prefix cache.
//
// Forward boundaries: each checkpoint position (a DeltaNet snapshot is kept there) and the chunk
// size; while the state is aligned (note_forward: a cold prefill's), the chunks end at multiples of
// the chunk size counted from position 0, as a prefill from the start has them, so what follows a
// restored prefix is computed in a cold prefill's forwards. With the prefix cache, aligned forwards
// also end at the block boundaries where a running state is worth keeping (the state is stored after
// every aligned forward that ends on a block boundary): where this prompt leaves the cache's blocks
// (a later prompt that shares as much resumes there), the last boundary more than
// kRecurrentStepTokens before the end (a regenerate resumes there), and the boundary before each
// checkpoint. Splitting an aligned forward at a block boundary computes the same bits.
Status Session::Impl::prefill(std::span<const int32_t> prompt, const GenerateOptions& options, int64_t* start,
                              std::vector<float>& logits) {
    constexpr int64_t B = runtime::PrefixCache::kBlockTokens;
    Engine::Impl& e = *engine->impl_;
    const auto L = static_cast<int64_t>(prompt.size());
    const int64_t chunk = options.prefill_chunk_tokens > 0 ? options.prefill_chunk_tokens : L;
    const bool cacheable = e.prefix_cache != nullptr && options.prefix_cache && mtp == nullptr &&
                           options.prefill_chunk_tokens > 0 && chunk % B == 0;
    std::vector<int64_t> checkpoints;
    for (int64_t p : options.checkpoint_positions)
        if (p > *start && p < L) checkpoints.push_back(p);
    std::sort(checkpoints.begin(), checkpoints.end());
    int64_t divergence = 0;
    if (cacheable && L - 1 - *start >= B) {
        SLUICE_ASSIGN_OR_RETURN(*start, restore_cached_prefix(prompt, chunk, checkpoints, &divergence));
        std::erase_if(checkpoints, [&](int64_t p) { return p <= *start; });
    }
    // Where the prefill stops next after position p besides the chunk grid: a checkpoint or the end.
    auto next_stop = [&](int64_t p) {
        const auto it = std::upper_bound(checkpoints.begin(), checkpoints.end(), p);
        return it != checkpoints.end() ? *it : L;
    };
    std::vector<int64_t> cuts;
    if (cacheable) {
        // Every cut splits a chunk into two forwards. Where the experts stream, each forward reads its
        // tokens' expert union again: the regenerate cut of a 128-token prompt (at 64) made Qwen3-Next-80B's
        // prefill at --memory 3G read 60.3 GB against 39.0 and run at half the speed
        // (bench/results/cpu_decode/stream_s28). There it is left out: a regenerate then resumes at the
        // chunk grid's last stored block. The turn markers' cuts stay (a chat's next turn resumes there).
        std::vector<int64_t> wanted = {divergence};
        if (!e.experts_stream) wanted.push_back((L - model::kRecurrentStepTokens - 1) / B * B);
        for (int64_t p : checkpoints) wanted.push_back(p / B * B);
        // The block boundaries before the prompt's last few special tokens (a chat template's turn
        // markers): a conversation that shares this one's system prompt, or its turns but the last,
        // parts from it just after one of them.
        if (e.tokenizer) {
            int hints = 0;
            for (int64_t p = L - 1; p > *start && hints < kTurnHints; --p) {
                if (!e.tokenizer->is_special(prompt[static_cast<size_t>(p)])) continue;
                const int64_t b = p / B * B;
                if (std::find(wanted.begin(), wanted.end(), b) == wanted.end()) {
                    wanted.push_back(b);
                    ++hints;
                }
            }
        }
        // A cut must leave more than kRecurrentStepTokens before the next stop, so the forward after
        // it takes the form a cold prefill gives those tokens.
        for (int64_t c : wanted)
            if (c > *start && next_stop(c) - c > model::kRecurrentStepTokens) cuts.push_back(c);
    }
    for (int64_t at = *start; at < L;) {
        const auto checkpoint = std::upper_bound(checkpoints.begin(), checkpoints.end(), at);
        int64_t end = checkpoint != checkpoints.end() ? *checkpoint : L;
        if (aligned_tokens == at && at % B == 0 && chunk % B == 0) {
            end = std::min(end, (at / chunk + 1) * chunk);
            for (int64_t cut : cuts)
                if (cut > at) end = std::min(end, cut);
        } else {
            end = std::min(end, at + chunk);
        }
        SLUICE_RETURN_IF_ERROR(evaluate_into(
            prompt.subspan(static_cast<size_t>(at), static_cast<size_t>(end - at)), false, end - at, logits));
        at = end;
        if (cacheable && aligned_tokens == at && at % B == 0) store_prefix(prompt);
        if (checkpoint != checkpoints.end() && *checkpoint == at) save_checkpoint();
    }
    return Status::ok();
}

Expected<GenerateResult> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                           const TokenCallback& on_token) {
    Impl& s = *impl_;
    Engine::Impl& e = *s.engine->impl_;
    const int64_t V = e.info.vocab_size;
    if (prompt.empty()) return error(ErrorCode::kInvalidArgument, "[session] the prompt is empty");
    if (options.max_tokens < 0)
        return error(ErrorCode::kInvalidArgument, "[session] max_tokens must be >= 0");
    if (static_cast<int64_t>(prompt.size()) + options.max_tokens > s.context_tokens &&
        static_cast<int64_t>(prompt.size()) >= s.context_tokens) {
        return error(ErrorCode::kInvalidArgument,
                     "[session] the prompt has " + std::to_string(prompt.size()) +
                         " tokens; the context holds " + std::to_string(s.context_tokens));
    }
    for (int32_t id : prompt) {
        if (id < 0 || id >= V)
            return error(ErrorCode::kInvalidArgument,
                         "[session] token id " + std::to_string(id) + " is outside the vocabulary");
    }
    s.cancel_requested.store(false);
    // A stream the batcher gathers into its forwards while this generation runs.
    const runtime::StepBatcher::Stream stream(e.batcher.get());
    s.stats = GenerationStats{};
    s.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto t0 = Clock::now();

    // Reuse the longest shared prefix; at least the last prompt token is recomputed for its logits.
    size_t lcp = 0;
    while (lcp < s.tokens.size() && lcp < prompt.size() && s.tokens[lcp] == prompt[lcp]) ++lcp;
    if (lcp == prompt.size()) --lcp;
    // Inside the part of its state that a cold prefill would have computed, resume at a block
    // boundary (at most a block's tokens more): the rest then runs in a cold prefill's forwards and
    // gets its bits, as a prefix restored from the engine's prefix cache does.
    auto resume = static_cast<int64_t>(lcp);
    constexpr int64_t kBlock = runtime::PrefixCache::kBlockTokens;
    if (resume <= s.aligned_tokens) resume = resume / kBlock * kBlock;
    SLUICE_ASSIGN_OR_RETURN(int64_t start, s.rewind_to(resume));
    std::vector<float> logits;
    SLUICE_RETURN_IF_ERROR(s.prefill(prompt, options, &start, logits));
    s.stats.prefilled_tokens = static_cast<int64_t>(prompt.size()) - start;
    s.stats.prefill_ms = ms_since(t0);
    s.save_checkpoint();  // end of prompt

    GenerateResult result;
    const std::vector<int32_t> suppressed =
        options.allow_special_tokens ? std::vector<int32_t>{} : e.suppressed_ids;
    runtime::Sampler sampler(options.sampling, V, suppressed);
    // Speculative decoding: a draft model's session proposes, this session verifies.
    const SpeculativeOptions& spec = options.speculative;
    std::optional<runtime::DraftModelDrafter> drafter;
    std::optional<runtime::Sampler> mtp_sampler;  // the MTP head's proposals are drawn with it
    std::optional<runtime::SpeculationController> controller;
    const bool can_speculate =
        options.max_tokens > 1 && (!options.logits_filter || options.filter_handles_speculation);
    if (spec.mtp && spec.tokens > 0 && can_speculate) {
        if (s.mtp == nullptr)
            return error(ErrorCode::kInvalidArgument,
                         "[speculative] this engine does not run the model's multi-token-prediction head "
                         "(load it with EngineOptions::mtp, --spec mtp)");
        if (spec.tokens > 16)
            return error(ErrorCode::kInvalidArgument, "[speculative] proposals per step must be 1..16, not " +
                                                          std::to_string(spec.tokens));
        SamplingParams draft_params = options.sampling;
        if (draft_params.seed) *draft_params.seed ^= 0x9E3779B97F4A7C15ull;  // its own stream
        if (spec.draft_temperature >= 0.0f) draft_params.temperature = spec.draft_temperature;
        mtp_sampler.emplace(draft_params, V, suppressed);
        if (spec.adaptive) controller.emplace(spec.tokens);
    } else if (spec.draft != nullptr && can_speculate) {
        if (spec.draft == this)
            return error(ErrorCode::kInvalidArgument, "[speculative] the draft session is this session");
        if (spec.tokens < 1 || spec.tokens > 16)
            return error(ErrorCode::kInvalidArgument, "[speculative] proposals per step must be 1..16, not " +
                                                          std::to_string(spec.tokens));
        const int64_t draft_vocab = spec.draft->impl_->engine->impl_->info.vocab_size;
        if (draft_vocab != V)
            return error(ErrorCode::kInvalidArgument,
                         "[speculative] the draft model's vocabulary has " + std::to_string(draft_vocab) +
                             " entries, this model's " + std::to_string(V) + ": it needs the same tokenizer");
        SamplingParams draft_params = options.sampling;
        if (draft_params.seed) *draft_params.seed ^= 0x9E3779B97F4A7C15ull;  // its own stream
        if (spec.draft_temperature >= 0.0f) draft_params.temperature = spec.draft_temperature;
        drafter.emplace(spec.draft, draft_params, V, suppressed);
        if (spec.adaptive) controller.emplace(spec.tokens);
    }
    std::optional<TextStream> text;  // without a tokenizer the stream is token ids only
    if (e.tokenizer) text.emplace(e.tokenizer, options.stop);
    const auto decode_start = Clock::now();
    auto decode_t0 = decode_start;
    TokenEvent event;
    std::optional<runtime::LogitsSummary> summary;  // the backend's, for decode steps
    const auto prompt_len = static_cast<int64_t>(prompt.size());
    int64_t sampled = 0;  // tokens chosen (with a final EOS); all but the last are fed
    // Takes the chosen token `next` (its `event` filled): returns whether generation goes on.
    auto emit = [&](int32_t next) -> bool {
        if (options.on_accept) options.on_accept(next);
        if (sampled == 0) {
            s.stats.ttft_ms = ms_since(t0);
            decode_t0 = Clock::now();
        }
        ++sampled;
        s.stats.generated_tokens++;
        if (!options.ignore_eos && std::find(e.eos_ids.begin(), e.eos_ids.end(), next) != e.eos_ids.end()) {
            result.finish_reason = FinishReason::kStop;
            if (e.tokenizer) result.stop_matched = std::string(e.tokenizer->token_text(next));
            return false;
        }
        result.tokens.push_back(next);
        event.text.clear();
        bool stopped = false;
        if (text) {
            TextStream::Piece piece = text->feed(next);
            event.text = std::move(piece.text);
            if (piece.stopped) {
                stopped = true;
                result.stop_matched = std::move(piece.stop);
            }
            result.text += event.text;
        }
        if (on_token && !on_token(event)) {
            result.finish_reason = FinishReason::kCancelled;
            return false;
        }
        if (stopped) {
            result.finish_reason = FinishReason::kStop;
            return false;
        }
        if (s.cancel_requested.load()) {
            result.finish_reason = FinishReason::kCancelled;
            return false;
        }
        if (sampled == options.max_tokens) return false;
        return prompt_len + sampled <= s.context_tokens;  // context full: finish as length
    };
    // Makes the state hold exactly the first `length` tokens of the timeline: a speculative step
    // fed proposals that were not kept (or kept past a stop). Attention-only models cut back there;
    // DeltaNet state returns to the step's checkpoint and the kept tokens are fed again.
    std::vector<int32_t> keep;
    auto settle = [&](int64_t length) -> Status {
        if (s.position() <= length) return Status::ok();
        keep.assign(s.tokens.begin(), s.tokens.begin() + length);
        SLUICE_ASSIGN_OR_RETURN(const int64_t kept, s.rewind_to(length));
        if (kept < length)
            SLUICE_RETURN_IF_ERROR(
                s.evaluate_into(std::span<const int32_t>(keep).subspan(static_cast<size_t>(kept)), false, 0,
                                logits, nullptr, /*decode_rows=*/true));
        return Status::ok();
    };
    std::vector<int32_t> drafts, feed;
    std::vector<runtime::Distribution> proposals;
    std::vector<float> rows, scratch;
    // One speculative step after the pending token (chosen, not fed): proposals, one verifying
    // forward, rejection sampling. Returns whether generation goes on; *ran = false when it did
    // not run (nothing to propose) and a plain step is due.
    auto speculate = [&](int32_t pending, bool* ran) -> Expected<bool> {
        *ran = false;
        const int64_t p0 = s.position();
        int64_t k = controller ? controller->choose() : spec.tokens;
        k = std::min({k, options.max_tokens - sampled - 1, s.context_tokens - p0 - 1});
        if (k <= 0) return true;
        feed.assign(s.tokens.begin(), s.tokens.end());
        feed.push_back(pending);
        const auto td = Clock::now();
        if (mtp_sampler) {
            SLUICE_RETURN_IF_ERROR(s.mtp->propose(feed, result.tokens, static_cast<int>(k), options,
                                                  *mtp_sampler, &drafts, &proposals));
        } else {
            SLUICE_RETURN_IF_ERROR(
                drafter->propose(feed, result.tokens, static_cast<int>(k), options, &drafts, &proposals));
        }
        if (controller) controller->record_draft(static_cast<int>(drafts.size()), ms_since(td));
        if (drafts.empty()) return true;
        *ran = true;
        k = static_cast<int64_t>(drafts.size());
        runtime::SequenceState* seq = s.seq.get();
        const bool own_checkpoint = seq != nullptr && !seq->has_snapshot_at(p0);
        s.save_checkpoint();
        feed.assign(1, pending);
        feed.insert(feed.end(), drafts.begin(), drafts.end());
        const auto tv = Clock::now();
        // Decode kernels for every proposal: the target's logits are plain decoding's, bit for bit.
        SLUICE_RETURN_IF_ERROR(s.evaluate_into(feed, true, 0, rows, nullptr, /*decode_rows=*/true));
        if (controller) controller->record_target(static_cast<int>(k + 1), ms_since(tv));
        if (scratch.size() != static_cast<size_t>(V)) scratch.assign(static_cast<size_t>(V), 0.0f);
        bool go = true;
        int64_t accepted = 0;
        int32_t next = -1;
        for (int64_t i = 0; i < k && go; ++i) {
            const std::span<float> row(rows.data() + i * V, static_cast<size_t>(V));
            const auto context = std::span<const int32_t>(s.tokens).first(static_cast<size_t>(p0 + 1 + i));
            const runtime::Sampler::Prepared prepared = sampler.prepare(row, context, result.tokens, options);
            const runtime::Distribution p = sampler.distribution(row);
            const runtime::Verdict verdict = runtime::verify_proposal(
                p, proposals[static_cast<size_t>(i)], drafts[static_cast<size_t>(i)], sampler, scratch);
            sampler.describe(row, verdict.token, options, prepared, nullptr, &event);
            if (!verdict.accepted) {
                next = verdict.token;
                break;
            }
            ++accepted;
            go = emit(verdict.token);
        }
        if (go && next < 0) {  // every proposal kept: the target's own token after them
            const std::span<float> row(rows.data() + k * V, static_cast<size_t>(V));
            const auto context = std::span<const int32_t>(s.tokens).first(static_cast<size_t>(p0 + 1 + k));
            next = sampler.sample(row, context, result.tokens, options, &event);
        }
        s.stats.draft_tokens += k;
        s.stats.accepted_tokens += accepted;
        s.stats.verify_steps++;
        if (controller) controller->record_acceptance(static_cast<int>(k), static_cast<int>(accepted));
        if (go) go = emit(next);
        SLUICE_RETURN_IF_ERROR(settle(prompt_len + sampled - 1));
        if (own_checkpoint && s.seq != nullptr) s.seq->drop_snapshot(p0);
        return go;
    };
    if (options.max_tokens > 0) {
        bool go = emit(sampler.sample(logits, s.tokens, result.tokens, options, &event, nullptr));
        while (go) {
            const int32_t pending = result.tokens.back();
            if (drafter || mtp_sampler) {
                bool ran = false;
                SLUICE_ASSIGN_OR_RETURN(go, speculate(pending, &ran));
                if (ran) continue;
                if (!go) break;
            }
            const auto tp = Clock::now();
            SLUICE_RETURN_IF_ERROR(
                s.evaluate_into(std::span<const int32_t>(&pending, 1), false, 0, logits, &summary));
            if (controller) controller->record_target(1, ms_since(tp));
            go = emit(sampler.sample(logits, s.tokens, result.tokens, options, &event,
                                     summary ? &*summary : nullptr));
        }
    }
    if (text && result.finish_reason == FinishReason::kLength) {
        // Flush what was held back (an incomplete stop-string prefix or a partial character).
        std::string tail = text->flush();
        if (!tail.empty()) {
            result.text += tail;
            TokenEvent flush_event;
            flush_event.text = tail;
            if (on_token) on_token(flush_event);
        }
    }
    s.stats.decode_ms = ms_since(decode_t0);
    s.save_checkpoint();  // end of reply
    result.stats = s.stats;
    return result;
}

// ---- save / load ---------------------------------------------------------------------------------
// File: "SLUSESS1" | u32 version | u64 model fingerprint | u32 KV type (from version 2:
// kernels::KvType; version 1 files have none and hold f32 KV) | u64 KV window (from version 3;
// older files have none) | u64 payload size | u64 payload xxh3 |
// payload = i64 n_past, i64 n_tokens, tokens, then the sequence state as SequenceState::write()
// lays it out: per layer (KV rows [0, n_past) and the window's ring whole | conv + recurrent),
// u32 n_snapshots, per snapshot
// i64 position + each DeltaNet layer's conv + recurrent (docs/FORMATS.md). The same bytes from
// every backend, so a session saved on the GPU loads on the CPU and back. KV rows are kept in the
// engine's KV type as they are (a compressed cache is not re-quantised); a file of another KV type
// is refused by name.

namespace {
constexpr char kSessionMagic[8] = {'S', 'L', 'U', 'S', 'E', 'S', 'S', '1'};
constexpr uint32_t kSessionVersion = 3;

template <typename T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Reader {
    const std::string& in;
    size_t pos = 0;
    template <typename T>
    bool get(T* v) {
        if (pos + sizeof(T) > in.size()) return false;
        std::memcpy(v, in.data() + pos, sizeof(T));
        pos += sizeof(T);
        return true;
    }
};
}  // namespace

Status Session::save(const std::string& path) const {
    const Impl& s = *impl_;
    std::string payload;
    put(payload, s.position());
    put(payload, static_cast<int64_t>(s.tokens.size()));
    if (!s.tokens.empty())
        payload.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
    if (s.seq != nullptr) {
        std::lock_guard<std::mutex> lock(s.engine->impl_->compute_mutex);
        SLUICE_RETURN_IF_ERROR(s.seq->write(payload));
    } else {
        SLUICE_ASSIGN_OR_RETURN(
            auto empty, s.engine->impl_->backend->new_sequence(1, 0, s.layout ? &*s.layout : nullptr));
        SLUICE_RETURN_IF_ERROR(empty->write(payload));
    }
    std::string out(kSessionMagic, 8);
    put(out, kSessionVersion);
    put(out, s.engine->impl_->fingerprint);
    put(out, static_cast<uint32_t>(s.state_layout().kv));
    put(out, static_cast<uint64_t>(s.state_layout().kv_window));
    put(out, static_cast<uint64_t>(payload.size()));
    put(out, static_cast<uint64_t>(XXH3_64bits(payload.data(), payload.size())));
    out += payload;
    return io::write_file_atomic(path, out);
}

Status Session::load(const std::string& path) {
    Impl& s = *impl_;
    SLUICE_ASSIGN_OR_RETURN(std::string in, io::read_text_file(path));
    auto bad = [&](const std::string& what) {
        return error(ErrorCode::kCorrupt, "[session] " + path + ": " + what);
    };
    if (in.size() < 36 || std::memcmp(in.data(), kSessionMagic, 8) != 0)
        return bad("not a sluice session file");
    Reader r{in, 8};
    uint32_t version = 0, kv = static_cast<uint32_t>(kernels::KvType::kF32);
    uint64_t fingerprint = 0, size = 0, hash = 0, window = 0;
    r.get(&version);
    r.get(&fingerprint);
    if (version < 1 || version > kSessionVersion)
        return error(ErrorCode::kUnsupported, "[session] " + path + ": version " + std::to_string(version) +
                                                  ", this sluice reads versions 1 to " +
                                                  std::to_string(kSessionVersion));
    if (version >= 2 && !r.get(&kv)) return bad("truncated header");
    if (version >= 3 && !r.get(&window)) return bad("truncated header");
    r.get(&size);
    r.get(&hash);
    if (fingerprint != s.engine->impl_->fingerprint)
        return error(ErrorCode::kInvalidArgument, "[session] " + path + " was saved with a different model");
    const kernels::KvType session_kv = s.state_layout().kv;
    if (kv != static_cast<uint32_t>(session_kv)) {
        const std::string saved = kv <= static_cast<uint32_t>(kernels::KvType::kQ3)
                                      ? kernels::kv_type_name(static_cast<kernels::KvType>(kv))
                                      : "unknown (" + std::to_string(kv) + ")";
        return error(ErrorCode::kInvalidArgument,
                     "[session] " + path + " holds a " + saved + " KV cache; this session keeps " +
                         kernels::kv_type_name(session_kv) +
                         " (load it into a session of the kv_bits / --kv-bits it was saved with)");
    }
    const auto session_window = static_cast<uint64_t>(s.state_layout().kv_window);
    if (window != session_window)
        return error(ErrorCode::kInvalidArgument,
                     "[session] " + path + " keeps the last " + std::to_string(window) +
                         " positions of its KV cache in f16; this session keeps " +
                         std::to_string(session_window) +
                         " (load it with the --kv-window it was saved with)");
    if (size != in.size() - r.pos)
        return bad("truncated (payload is " + std::to_string(in.size() - r.pos) + " bytes, header says " +
                   std::to_string(size) + ")");
    if (XXH3_64bits(in.data() + r.pos, size) != hash) return bad("checksum mismatch (damaged file)");

    int64_t n_past = 0, n_tokens = 0;
    if (!r.get(&n_past) || !r.get(&n_tokens) || n_past < 0 || n_tokens != n_past)
        return bad("bad header fields");
    if (n_past > s.context_tokens)
        return error(ErrorCode::kInvalidArgument, "[session] " + path + " holds " + std::to_string(n_past) +
                                                      " tokens; this session's context is " +
                                                      std::to_string(s.context_tokens));
    std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
    if (r.pos + tokens.size() * 4 > in.size()) return bad("truncated tokens");
    if (!tokens.empty()) std::memcpy(tokens.data(), in.data() + r.pos, tokens.size() * 4);
    r.pos += tokens.size() * 4;
    // Into a fresh sequence, swapped in only when the whole file has been read: a bad file leaves
    // the session as it was.
    Engine::Impl& e = *s.engine->impl_;
    std::lock_guard<std::mutex> lock(e.compute_mutex);
    SLUICE_ASSIGN_OR_RETURN(auto seq,
                            e.backend->new_sequence(s.context_tokens, static_cast<int>(kMaxCheckpoints),
                                                    s.layout ? &*s.layout : nullptr));
    const Status read = seq->read(in, &r.pos, n_past);
    if (!read.is_ok()) {
        if (read.code() == ErrorCode::kCorrupt) return bad(read.message());
        return read;
    }
    if (r.pos != in.size()) return bad("trailing bytes after the state");
    s.seq = std::move(seq);
    s.tokens = std::move(tokens);
    s.aligned_tokens = n_past == 0 ? 0 : -1;  // how the file's state was computed is not known
    // The head never saw the loaded positions: a fresh one, out of step until the session restarts.
    if (s.mtp) SLUICE_RETURN_IF_ERROR(s.make_mtp());
    return Status::ok();
}

}  // namespace sluice
