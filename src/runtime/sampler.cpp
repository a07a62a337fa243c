#include "runtime/sampler.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice::runtime {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log Σ exp(logits), max-shifted, summed in double.
double log_sum_exp(std::span<const float> logits) {
    float mx = kNegInf;
    for (float v : logits) mx = std::max(mx, v);
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
    return mx + std::log(sum);
}

// Candidate order: scaled logit descending, then id ascending. A function object, so the sorts
// inline it (a function pointer made the full sort 40% slower).
struct Better {
    bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    }
};
constexpr Better better;

// The largest of kSkipBlock logits, ignoring NaN (a NaN is never kept by the top-k). SSE's MAXPS(a, b)
// is a > b ? a : b, the same rule; GCC does not vectorise the scalar loop (the reduction's order).
constexpr int64_t kSkipBlock = 32;
float block_max(const float* block) {
#if defined(__SSE2__)
    __m128 m = _mm_set1_ps(kNegInf);
    for (int64_t j = 0; j < kSkipBlock; j += 4) m = _mm_max_ps(_mm_loadu_ps(block + j), m);
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, m);
    float mx = kNegInf;
    for (float v : lanes) mx = v > mx ? v : mx;
    return mx;
#else
    float mx = kNegInf;
    for (int64_t j = 0; j < kSkipBlock; ++j) mx = block[j] > mx ? block[j] : mx;
    return mx;
#endif
}

// With top-p or min-p and no top-k, only a head of this many best candidates is sorted first: the
// cuts rarely reach past it, and the rest is sorted only when they do.
constexpr size_t kSortedHead = 1024;
}  // namespace

LogitsSummary summarize_logits(std::span<const float> logits) {
    LogitsSummary s;
    s.max = kNegInf;
    for (size_t i = 0; i < logits.size(); ++i)
        if (logits[i] > s.max) {  // strictly: the first index of the maximum
            s.max = logits[i];
            s.argmax = static_cast<int32_t>(i);
        }
    for (float v : logits) s.sum_exp += std::exp(v - s.max);
    return s;
}

Sampler::Sampler(const SamplingParams& params, int64_t vocab, std::vector<int32_t> suppressed)
    : params_(params),
      vocab_(vocab),
      suppressed_(std::move(suppressed)),
      counts_(static_cast<size_t>(vocab), 0) {
    if (params_.seed) {
        rng_.seed(*params_.seed);
    } else {
        std::random_device rd;
        rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
    candidates_.reserve(static_cast<size_t>(vocab));
}

// The k best (scaled logit descending, id ascending) of the finite logits, best first, in one pass
// with a heap of k whose front is the worst kept: most entries cost one comparison, and no
// vocabulary-sized candidate list is built (a 248k-entry list plus its partial sort took about
// 1 ms per token).
//
// Once the heap is full, blocks of kSkipBlock logits whose largest does not beat the heap's front are
// passed over whole: a later entry is kept only if its scaled logit is strictly greater (ids ascend,
// so a tie never displaces), and scaling by inv_t > 0 keeps the order, so the block's maximum
// decides (block_max). Almost every block of a model's row is skipped (the scalar pass was most of the chat
// defaults' 0.4 ms, bench/results/sampler.md).
void Sampler::select_top_k(std::span<const float> logits, float inv_t, size_t k) {
    candidates_.clear();
    auto offer = [&](int64_t i) {
        const float v = logits[static_cast<size_t>(i)];
        if (v == kNegInf) return;
        const std::pair<float, int32_t> c(v * inv_t, static_cast<int32_t>(i));
        if (candidates_.size() < k) {
            candidates_.push_back(c);
            std::push_heap(candidates_.begin(), candidates_.end(), better);
        } else if (better(c, candidates_.front())) {  // ids ascend, so a tie never displaces
            std::pop_heap(candidates_.begin(), candidates_.end(), better);
            candidates_.back() = c;
            std::push_heap(candidates_.begin(), candidates_.end(), better);
        }
    };
    int64_t i = 0;
    for (; i < vocab_ && candidates_.size() < k; ++i) offer(i);
    for (; i + kSkipBlock <= vocab_; i += kSkipBlock) {
        const float mx = block_max(logits.data() + i);
        if (!(mx * inv_t > candidates_.front().first)) continue;
        for (int64_t j = 0; j < kSkipBlock; ++j) offer(i + j);
    }
    for (; i < vocab_; ++i) offer(i);
    std::sort_heap(candidates_.begin(), candidates_.end(), better);  // best first
}

Sampler::Prepared Sampler::prepare(std::span<float> logits, std::span<const int32_t> context,
                                   std::span<const int32_t> generated, const GenerateOptions& options,
                                   const LogitsSummary* summary) {
    for (const auto& [id, bias] : params_.logit_bias)
        if (id >= 0 && id < vocab_) logits[static_cast<size_t>(id)] += bias;
    // With a backend summary and nothing but suppression changing the row, the summary's maximum
    // and normaliser still describe it once the suppressed terms are taken out (unless the maximum
    // itself is suppressed): greedy decoding then needs no pass over the row, and the log-probability
    // none for any sampling.
    const bool summary_usable = summary != nullptr && params_.logit_bias.empty() &&
                                params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
                                params_.frequency_penalty == 0.0f && !options.logits_filter &&
                                summary->argmax >= 0 && summary->argmax < vocab_ &&
                                std::isfinite(summary->max) && summary->sum_exp > 0.0f;
    double masked = 0;  // Σ exp(l − max) over the suppressed ids (summary_usable only)
    bool max_masked = false;
    for (int32_t id : suppressed_) {
        float& v = logits[static_cast<size_t>(id)];
        if (summary_usable) {
            max_masked = max_masked || id == summary->argmax;
            if (v != kNegInf) masked += std::exp(static_cast<double>(v - summary->max));
        }
        v = kNegInf;
    }
    Prepared prepared;
    prepared.summary_sum = summary_usable ? static_cast<double>(summary->sum_exp) - masked : 0.0;
    prepared.use_summary = summary_usable && !max_masked && prepared.summary_sum > 0;
    if (params_.repetition_penalty != 1.0f) {
        const size_t window =
            params_.repetition_window > 0 ? static_cast<size_t>(params_.repetition_window) : context.size();
        const size_t start = context.size() > window ? context.size() - window : 0;
        std::vector<int32_t> seen;
        for (size_t i = start; i < context.size(); ++i) seen.push_back(context[i]);
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        for (int32_t id : seen) {
            float& v = logits[static_cast<size_t>(id)];
            v = v > 0 ? v / params_.repetition_penalty : v * params_.repetition_penalty;
        }
    }
    if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
        for (int32_t id : generated) counts_[static_cast<size_t>(id)]++;
        for (int32_t id : generated) {
            int32_t& c = counts_[static_cast<size_t>(id)];
            if (c == 0) continue;  // already applied for this id
            logits[static_cast<size_t>(id)] -=
                params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
            c = 0;
        }
    }
    if (options.logits_filter) options.logits_filter(logits, generated);

    return prepared;
}

// candidates_ = the survivors of temperature, top-k, top-p and min-p with their probabilities (before
// the cuts' renormalisation), best first when a cut ordered them; empty when no logit is finite.
void Sampler::build_candidates(std::span<const float> logits) {
    const float inv_t = 1.0f / params_.temperature;
    const bool ordered = params_.top_p < 1.0f || params_.min_p > 0.0f;  // the cuts walk by probability
    size_t sorted = SIZE_MAX;  // candidates_[0, sorted) are in order and better than the rest
    // The walks below reach entry n: the tail gets sorted first if they pass the sorted head.
    auto sort_through = [&](size_t n) {
        if (n < sorted || sorted >= candidates_.size()) return;
        std::sort(candidates_.begin() + static_cast<long>(sorted), candidates_.end(), better);
        sorted = SIZE_MAX;
    };
    if (params_.top_k > 0 && params_.top_k < vocab_) {
        select_top_k(logits, inv_t, static_cast<size_t>(params_.top_k));
    } else {
        candidates_.clear();
        for (int64_t i = 0; i < vocab_; ++i) {
            const float v = logits[static_cast<size_t>(i)];
            if (v != kNegInf) candidates_.emplace_back(v * inv_t, static_cast<int32_t>(i));
        }
        // Without top-p or min-p the draw needs no order: the candidates stay in id order.
        if (ordered && candidates_.size() > kSortedHead) {
            std::nth_element(candidates_.begin(), candidates_.begin() + kSortedHead, candidates_.end(),
                             better);
            std::sort(candidates_.begin(), candidates_.begin() + kSortedHead, better);
            sorted = kSortedHead;
        } else if (ordered) {
            std::sort(candidates_.begin(), candidates_.end(), better);
        }
    }
    if (!candidates_.empty()) {
        float mx = kNegInf;
        for (const auto& c : candidates_) mx = std::max(mx, c.first);
        // Softmax over the survivors (sorted by probability, descending, when ordered).
        double sum = 0;
        for (auto& c : candidates_) {
            c.first = std::exp(c.first - mx);
            sum += c.first;
        }
        for (auto& c : candidates_) c.first = static_cast<float>(c.first / sum);
        if (params_.top_p < 1.0f) {
            double acc = 0;
            size_t n = 0;
            while (n < candidates_.size()) {
                sort_through(n);
                acc += candidates_[n].first;
                ++n;
                if (acc >= params_.top_p) break;
            }
            candidates_.resize(std::max<size_t>(1, n));
        }
        if (params_.min_p > 0.0f) {
            const float floor = params_.min_p * candidates_[0].first;
            size_t n = 1;
            while (n < candidates_.size()) {
                sort_through(n);
                if (candidates_[n].first < floor) break;
                ++n;
            }
            candidates_.resize(n);
        }
    }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> context,
                        std::span<const int32_t> generated, const GenerateOptions& options, TokenEvent* event,
                        const LogitsSummary* summary) {
    const Prepared prepared = prepare(logits, context, generated, options, summary);
    int32_t chosen = 0;
    if (params_.temperature <= 0.0f) {
        chosen = prepared.use_summary ? summary->argmax : argmax(logits);
    } else {
        build_candidates(logits);
        if (candidates_.empty()) {
            chosen = argmax(logits);
        } else {
            double total = 0;
            for (const auto& c : candidates_) total += c.first;
            std::uniform_real_distribution<double> uni(0.0, total);
            double r = uni(rng_);
            chosen = candidates_.back().second;
            for (const auto& c : candidates_) {
                r -= c.first;
                if (r <= 0) {
                    chosen = c.second;
                    break;
                }
            }
        }
    }
    if (event != nullptr) describe(logits, chosen, options, prepared, summary, event);
    return chosen;
}

int32_t Sampler::argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

const std::vector<std::pair<float, int32_t>>& Sampler::distribution(std::span<const float> logits) {
    if (params_.temperature <= 0.0f) {
        candidates_.assign(1, {1.0f, argmax(logits)});
        return candidates_;
    }
    build_candidates(logits);
    if (candidates_.empty()) {
        candidates_.assign(1, {1.0f, argmax(logits)});
        return candidates_;
    }
    double total = 0;
    for (const auto& c : candidates_) total += c.first;
    for (auto& c : candidates_) c.first = static_cast<float>(c.first / total);
    return candidates_;
}

int32_t Sampler::draw(std::span<const std::pair<float, int32_t>> dist) {
    double total = 0;
    for (const auto& c : dist) total += c.first;
    std::uniform_real_distribution<double> uni(0.0, total);
    double r = uni(rng_);
    for (const auto& c : dist) {
        r -= c.first;
        if (r <= 0) return c.second;
    }
    return dist.back().second;
}

double Sampler::uniform() {
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

void Sampler::describe(std::span<const float> logits, int32_t chosen, const GenerateOptions& options,
                       const Prepared& prepared, const LogitsSummary* summary, TokenEvent* event) const {
    // log Σ exp over the row as modified above: from the summary, or one pass over the row.
    const double lse =
        prepared.use_summary ? summary->max + std::log(prepared.summary_sum) : log_sum_exp(logits);
    auto logprob = [&](int32_t id) { return static_cast<float>(logits[static_cast<size_t>(id)] - lse); };
    event->token = chosen;
    event->logprob = logprob(chosen);
    event->top_logprobs.clear();
    if (options.top_logprobs > 0) {
        std::vector<int32_t> ids(static_cast<size_t>(vocab_));
        for (int64_t i = 0; i < vocab_; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
        const size_t k = std::min<size_t>(static_cast<size_t>(options.top_logprobs), ids.size());
        std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                          [&](int32_t a, int32_t b) {
                              return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
                          });
        for (size_t i = 0; i < k; ++i) event->top_logprobs.emplace_back(ids[i], logprob(ids[i]));
    }
}

}  // namespace sluice::runtime
