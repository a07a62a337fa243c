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
#include "sluice/tokenizer.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr size_t kMaxCheckpoints = runtime::kSessionCheckpoints;

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`: text that
// must be held back because the next token could complete a stop string.
size_t held_back_bytes(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& s : stops) {
        for (size_t k = std::min(text.size(), s.size() - 1); k > hold; --k) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return hold;
}
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
    return impl_->state.n_past;
}
const std::vector<int32_t>& Session::tokens() const {
    return impl_->tokens;
}
int64_t Session::context_size() const {
    return impl_->state.max_positions;
}
const GenerationStats& Session::stats() const {
    return impl_->stats;
}
void Session::cancel() {
    impl_->cancel_requested.store(true);
}

void Session::reset() {
    impl_->state.reset();
    impl_->tokens.clear();
    impl_->checkpoints.clear();
}

Expected<std::vector<float>> Session::evaluate(std::span<const int32_t> tokens, bool all_logits,
                                               int64_t chunk_tokens) {
    std::vector<float> logits;
    SLUICE_RETURN_IF_ERROR(impl_->evaluate_into(tokens, all_logits, chunk_tokens, logits));
    return logits;
}

// Session::evaluate into a caller's buffer: decode reuses one logits vector for every token (a
// fresh 1 MB vector per token is an allocation, page faults and zeroing each step).
Status Session::Impl::evaluate_into(std::span<const int32_t> tokens, bool all_logits, int64_t chunk_tokens,
                                    std::vector<float>& logits,
                                    std::optional<runtime::LogitsSummary>* summary) {
    Impl& s = *this;
    Engine::Impl& e = *s.engine->impl_;
    const int64_t V = e.info.vocab_size;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return error(ErrorCode::kInvalidArgument, "[session] evaluate needs at least one token");
    if (chunk_tokens <= 0) chunk_tokens = n;
    logits.resize(static_cast<size_t>(all_logits ? n * V : V));
    std::lock_guard<std::mutex> lock(e.compute_mutex);
    for (int64_t begin = 0; begin < n; begin += chunk_tokens) {
        const int64_t count = std::min(chunk_tokens, n - begin);
        const bool last = begin + count == n;
        float* out = all_logits ? logits.data() + begin * V : (last ? logits.data() : nullptr);
        SLUICE_RETURN_IF_ERROR(e.backend->forward(
            s.state, tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)), out, all_logits,
            s.ws, e.pool.get()));
        s.tokens.insert(s.tokens.end(), tokens.begin() + begin, tokens.begin() + begin + count);
    }
    if (summary != nullptr) *summary = e.backend->logits_summary();
    return Status::ok();
}

void Session::Impl::save_checkpoint() {
    const model::ModelConfig& c = engine->impl_->model->config();
    if (!c.has_linear_attention()) return;  // attention-only models rewind their KV directly
    for (const auto& cp : checkpoints)
        if (cp.position == state.n_past) return;
    // A device backend's state must be copied back first; without it there is no checkpoint (a
    // later rewind then re-runs more of the prompt, which is slower but still correct).
    if (!engine->impl_->backend->sync_to_host(state, false).is_ok()) return;
    Checkpoint cp;
    cp.position = state.n_past;
    for (const auto& l : state.layers) {
        cp.conv.push_back(l.conv);
        cp.recurrent.push_back(l.recurrent);
    }
    checkpoints.push_back(std::move(cp));
    if (checkpoints.size() > kMaxCheckpoints) checkpoints.erase(checkpoints.begin());
}

// Rewinds the state to at most `keep` tokens of the current timeline; returns the new position.
int64_t Session::Impl::rewind_to(int64_t keep) {
    if (keep >= state.n_past) return state.n_past;
    const model::ModelConfig& c = engine->impl_->model->config();
    int64_t target = keep;
    if (c.has_linear_attention()) {
        // DeltaNet state only exists at checkpoints: the latest one at or before `keep`.
        const Checkpoint* best = nullptr;
        for (const auto& cp : checkpoints)
            if (cp.position <= keep && (best == nullptr || cp.position > best->position)) best = &cp;
        if (best == nullptr) {
            state.reset();
            target = 0;
        } else {
            target = best->position;
            for (size_t l = 0; l < state.layers.size(); ++l) {
                state.layers[l].conv = best->conv[l];
                state.layers[l].recurrent = best->recurrent[l];
            }
            state.device_stale = true;  // the mirror's conv/recurrent state is now behind
        }
    }
    state.n_past = target;  // attention KV past `target` is simply overwritten later
    tokens.resize(static_cast<size_t>(target));
    std::erase_if(checkpoints, [&](const Checkpoint& cp) { return cp.position > target; });
    return target;
}

Expected<GenerateResult> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                           const TokenCallback& on_token) {
    Impl& s = *impl_;
    Engine::Impl& e = *s.engine->impl_;
    const int64_t V = e.info.vocab_size;
    if (prompt.empty()) return error(ErrorCode::kInvalidArgument, "[session] the prompt is empty");
    if (options.max_tokens < 0)
        return error(ErrorCode::kInvalidArgument, "[session] max_tokens must be >= 0");
    if (static_cast<int64_t>(prompt.size()) + options.max_tokens > s.state.max_positions &&
        static_cast<int64_t>(prompt.size()) >= s.state.max_positions) {
        return error(ErrorCode::kInvalidArgument,
                     "[session] the prompt has " + std::to_string(prompt.size()) +
                         " tokens; the context holds " + std::to_string(s.state.max_positions));
    }
    for (int32_t id : prompt) {
        if (id < 0 || id >= V)
            return error(ErrorCode::kInvalidArgument,
                         "[session] token id " + std::to_string(id) + " is outside the vocabulary");
    }
    s.cancel_requested.store(false);
    s.stats = GenerationStats{};
    s.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto t0 = Clock::now();

    // Reuse the longest shared prefix; at least the last prompt token is recomputed for its logits.
    size_t lcp = 0;
    while (lcp < s.tokens.size() && lcp < prompt.size() && s.tokens[lcp] == prompt[lcp]) ++lcp;
    if (lcp == prompt.size()) --lcp;
    const int64_t start = s.rewind_to(static_cast<int64_t>(lcp));
    const auto fresh = prompt.subspan(static_cast<size_t>(start));
    // Prefill, pausing at requested checkpoint positions to keep the DeltaNet state there.
    std::vector<int64_t> stops;
    for (int64_t p : options.checkpoint_positions)
        if (p > start && p < static_cast<int64_t>(prompt.size())) stops.push_back(p);
    std::sort(stops.begin(), stops.end());
    stops.push_back(static_cast<int64_t>(prompt.size()));
    std::vector<float> logits;
    int64_t at = start;
    for (int64_t stop : stops) {
        if (stop <= at) continue;
        SLUICE_RETURN_IF_ERROR(
            s.evaluate_into(prompt.subspan(static_cast<size_t>(at), static_cast<size_t>(stop - at)), false,
                            options.prefill_chunk_tokens, logits));
        at = stop;
        if (stop < static_cast<int64_t>(prompt.size())) s.save_checkpoint();
    }
    s.stats.prefilled_tokens = static_cast<int64_t>(fresh.size());
    s.stats.prefill_ms = ms_since(t0);
    s.save_checkpoint();  // end of prompt

    GenerateResult result;
    runtime::Sampler sampler(options.sampling, V,
                             options.allow_special_tokens ? std::vector<int32_t>{} : e.suppressed_ids);
    std::unique_ptr<IncrementalDetokenizer> detok;
    if (e.tokenizer) detok = std::make_unique<IncrementalDetokenizer>(e.tokenizer, false);
    std::string pending;  // decoded text not yet emitted (possible stop-string prefix)
    const auto decode_start = Clock::now();
    auto decode_t0 = decode_start;
    TokenEvent event;
    std::optional<runtime::LogitsSummary> summary;  // the backend's, for decode steps
    for (int64_t i = 0; i < options.max_tokens; ++i) {
        const int32_t next =
            sampler.sample(logits, s.tokens, result.tokens, options, &event, summary ? &*summary : nullptr);
        if (options.on_accept) options.on_accept(next);
        if (i == 0) {
            s.stats.ttft_ms = ms_since(t0);
            decode_t0 = Clock::now();
        }
        s.stats.generated_tokens++;
        if (!options.ignore_eos && std::find(e.eos_ids.begin(), e.eos_ids.end(), next) != e.eos_ids.end()) {
            result.finish_reason = FinishReason::kStop;
            if (e.tokenizer) result.stop_matched = std::string(e.tokenizer->token_text(next));
            break;
        }
        result.tokens.push_back(next);
        event.text.clear();
        bool stopped = false;
        if (detok) {
            pending += detok->feed(next);
            for (const auto& stop : options.stop) {
                const size_t found = stop.empty() ? std::string::npos : pending.find(stop);
                if (found != std::string::npos) {
                    event.text = pending.substr(0, found);
                    result.stop_matched = stop;
                    stopped = true;
                    break;
                }
            }
            if (!stopped) {
                const size_t emit = pending.size() - held_back_bytes(pending, options.stop);
                event.text = pending.substr(0, emit);
                pending.erase(0, emit);
            }
            result.text += event.text;
        }
        if (on_token && !on_token(event)) {
            result.finish_reason = FinishReason::kCancelled;
            break;
        }
        if (stopped) {
            result.finish_reason = FinishReason::kStop;
            break;
        }
        if (s.cancel_requested.load()) {
            result.finish_reason = FinishReason::kCancelled;
            break;
        }
        if (i + 1 == options.max_tokens) break;
        if (s.state.n_past + 1 > s.state.max_positions) break;  // context full: finish as length
        SLUICE_RETURN_IF_ERROR(
            s.evaluate_into(std::span<const int32_t>(&next, 1), false, 0, logits, &summary));
    }
    if (detok && result.finish_reason == FinishReason::kLength) {
        // Flush what was held back (an incomplete stop-string prefix or a partial character).
        std::string tail = pending + detok->flush();
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
// File: "SLUSESS1" | u32 version | u64 model fingerprint | u64 payload size | u64 payload xxh3 |
// payload = i64 n_past, i64 n_tokens, tokens, per layer (KV rows [0, n_past) | conv + recurrent),
// u32 n_checkpoints, per checkpoint: i64 position, per DeltaNet layer conv + recurrent.

namespace {
constexpr char kSessionMagic[8] = {'S', 'L', 'U', 'S', 'E', 'S', 'S', '1'};
constexpr uint32_t kSessionVersion = 1;

template <typename T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_floats(std::string& out, const float* p, size_t n) {
    if (n > 0) out.append(reinterpret_cast<const char*>(p), n * sizeof(float));  // p may be null when n == 0
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
    bool get_floats(float* p, size_t n) {
        if (n == 0) return true;  // empty per-layer state (attention layers): p may be null
        if (pos + n * sizeof(float) > in.size()) return false;
        std::memcpy(p, in.data() + pos, n * sizeof(float));
        pos += n * sizeof(float);
        return true;
    }
};
}  // namespace

Status Session::save(const std::string& path) const {
    SLUICE_RETURN_IF_ERROR(impl_->engine->impl_->backend->sync_to_host(impl_->state, true));
    const Impl& s = *impl_;
    const model::ModelConfig& c = s.engine->impl_->model->config();
    std::string payload;
    put(payload, s.state.n_past);
    put(payload, static_cast<int64_t>(s.tokens.size()));
    if (!s.tokens.empty())
        payload.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const auto& st = s.state.layers[static_cast<size_t>(l)];
        if (c.is_full_attention(l)) {
            const size_t row = static_cast<size_t>(c.n_kv_heads * c.head_dim);
            put_floats(payload, st.k_cache.data(), row * static_cast<size_t>(s.state.n_past));
            put_floats(payload, st.v_cache.data(), row * static_cast<size_t>(s.state.n_past));
        } else {
            put_floats(payload, st.conv.data(), st.conv.size());
            put_floats(payload, st.recurrent.data(), st.recurrent.size());
        }
    }
    put(payload, static_cast<uint32_t>(s.checkpoints.size()));
    for (const auto& cp : s.checkpoints) {
        put(payload, cp.position);
        for (size_t l = 0; l < cp.conv.size(); ++l) {
            put_floats(payload, cp.conv[l].data(), cp.conv[l].size());
            put_floats(payload, cp.recurrent[l].data(), cp.recurrent[l].size());
        }
    }
    std::string out(kSessionMagic, 8);
    put(out, kSessionVersion);
    put(out, s.engine->impl_->fingerprint);
    put(out, static_cast<uint64_t>(payload.size()));
    put(out, static_cast<uint64_t>(XXH3_64bits(payload.data(), payload.size())));
    out += payload;
    return io::write_file_atomic(path, out);
}

Status Session::load(const std::string& path) {
    Impl& s = *impl_;
    const model::ModelConfig& c = s.engine->impl_->model->config();
    SLUICE_ASSIGN_OR_RETURN(std::string in, io::read_text_file(path));
    auto bad = [&](const std::string& what) {
        return error(ErrorCode::kCorrupt, "[session] " + path + ": " + what);
    };
    if (in.size() < 36 || std::memcmp(in.data(), kSessionMagic, 8) != 0)
        return bad("not a sluice session file");
    Reader r{in, 8};
    uint32_t version = 0;
    uint64_t fingerprint = 0, size = 0, hash = 0;
    r.get(&version);
    r.get(&fingerprint);
    r.get(&size);
    r.get(&hash);
    if (version != kSessionVersion)
        return error(ErrorCode::kUnsupported, "[session] " + path + ": version " + std::to_string(version) +
                                                  ", this sluice reads version " +
                                                  std::to_string(kSessionVersion));
    if (fingerprint != s.engine->impl_->fingerprint)
        return error(ErrorCode::kInvalidArgument, "[session] " + path + " was saved with a different model");
    if (size != in.size() - r.pos)
        return bad("truncated (payload is " + std::to_string(in.size() - r.pos) + " bytes, header says " +
                   std::to_string(size) + ")");
    if (XXH3_64bits(in.data() + r.pos, size) != hash) return bad("checksum mismatch (damaged file)");

    model::ModelState state = s.engine->impl_->model->new_state(s.state.max_positions);
    int64_t n_past = 0, n_tokens = 0;
    if (!r.get(&n_past) || !r.get(&n_tokens) || n_past < 0 || n_tokens != n_past)
        return bad("bad header fields");
    if (n_past > state.max_positions)
        return error(ErrorCode::kInvalidArgument, "[session] " + path + " holds " + std::to_string(n_past) +
                                                      " tokens; this session's context is " +
                                                      std::to_string(state.max_positions));
    std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
    if (r.pos + tokens.size() * 4 > in.size()) return bad("truncated tokens");
    if (!tokens.empty()) std::memcpy(tokens.data(), in.data() + r.pos, tokens.size() * 4);
    r.pos += tokens.size() * 4;
    for (int64_t l = 0; l < c.n_layers; ++l) {
        auto& st = state.layers[static_cast<size_t>(l)];
        bool ok;
        if (c.is_full_attention(l)) {
            const size_t row = static_cast<size_t>(c.n_kv_heads * c.head_dim);
            ok = r.get_floats(st.k_cache.data(), row * static_cast<size_t>(n_past)) &&
                 r.get_floats(st.v_cache.data(), row * static_cast<size_t>(n_past));
        } else {
            ok = r.get_floats(st.conv.data(), st.conv.size()) &&
                 r.get_floats(st.recurrent.data(), st.recurrent.size());
        }
        if (!ok) return bad("truncated state of layer " + std::to_string(l));
    }
    uint32_t n_cp = 0;
    if (!r.get(&n_cp) || n_cp > 64) return bad("bad checkpoint count");
    std::vector<Impl::Checkpoint> cps(n_cp);
    for (auto& cp : cps) {
        if (!r.get(&cp.position)) return bad("truncated checkpoint");
        for (const auto& l : state.layers) {
            cp.conv.emplace_back(l.conv.size());
            cp.recurrent.emplace_back(l.recurrent.size());
            if (!r.get_floats(cp.conv.back().data(), l.conv.size()) ||
                !r.get_floats(cp.recurrent.back().data(), l.recurrent.size()))
                return bad("truncated checkpoint");
        }
    }
    state.n_past = n_past;
    s.state = std::move(state);
    s.tokens = std::move(tokens);
    s.checkpoints = std::move(cps);
    return Status::ok();
}

}  // namespace sluice
