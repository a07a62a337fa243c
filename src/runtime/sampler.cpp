#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice::runtime {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log-softmax value of `logits[id]`.
float log_softmax_at(std::span<const float> logits, int32_t id) {
    float mx = kNegInf;
    for (float v : logits) mx = std::max(mx, v);
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
    return static_cast<float>(logits[static_cast<size_t>(id)] - mx - std::log(sum));
}
}  // namespace

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

int32_t Sampler::greedy_from_summary(std::span<float> logits, const GenerateOptions& options,
                                     TokenEvent* event, const LogitsSummary& summary) {
    const bool plain = params_.temperature <= 0.0f && params_.logit_bias.empty() &&
                       params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
                       params_.frequency_penalty == 0.0f && !options.logits_filter &&
                       options.top_logprobs == 0;
    if (!plain || summary.argmax < 0 || summary.argmax >= vocab_ || !std::isfinite(summary.max) ||
        !(summary.sum_exp > 0.0f))
        return -1;
    // Suppression masks ids below the maximum (else the full path picks among the rest): their
    // terms leave the normaliser, exactly as log_softmax_at over the masked row would see it.
    double masked = 0;
    for (int32_t id : suppressed_) {
        if (id == summary.argmax) return -1;
        float& v = logits[static_cast<size_t>(id)];
        if (v != kNegInf) masked += std::exp(static_cast<double>(v - summary.max));
        v = kNegInf;
    }
    const double sum = static_cast<double>(summary.sum_exp) - masked;
    if (!(sum > 0)) return -1;
    const int32_t chosen = summary.argmax;
    if (event != nullptr) {
        event->token = chosen;
        event->logprob =
            static_cast<float>(logits[static_cast<size_t>(chosen)] - summary.max - std::log(sum));
        event->top_logprobs.clear();
    }
    return chosen;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> context,
                        std::span<const int32_t> generated, const GenerateOptions& options, TokenEvent* event,
                        const LogitsSummary* summary) {
    if (summary != nullptr) {
        const int32_t chosen = greedy_from_summary(logits, options, event, *summary);
        if (chosen >= 0) return chosen;
    }
    for (const auto& [id, bias] : params_.logit_bias)
        if (id >= 0 && id < vocab_) logits[static_cast<size_t>(id)] += bias;
    for (int32_t id : suppressed_) logits[static_cast<size_t>(id)] = kNegInf;

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

    int32_t chosen = 0;
    if (params_.temperature <= 0.0f) {
        chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
        const float inv_t = 1.0f / params_.temperature;
        candidates_.clear();
        for (int64_t i = 0; i < vocab_; ++i) {
            const float v = logits[static_cast<size_t>(i)];
            if (v != kNegInf) candidates_.emplace_back(v * inv_t, static_cast<int32_t>(i));
        }
        if (candidates_.empty()) {
            chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        } else {
            auto by_logit = [](const auto& a, const auto& b) {
                return a.first > b.first || (a.first == b.first && a.second < b.second);
            };
            size_t keep = candidates_.size();
            if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
                keep = static_cast<size_t>(params_.top_k);
                std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep),
                                  candidates_.end(), by_logit);
                candidates_.resize(keep);
            } else {
                std::sort(candidates_.begin(), candidates_.end(), by_logit);
            }
            // Softmax over the survivors (sorted by probability, descending).
            const float mx = candidates_[0].first;
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
                    acc += candidates_[n].first;
                    ++n;
                    if (acc >= params_.top_p) break;
                }
                candidates_.resize(std::max<size_t>(1, n));
            }
            if (params_.min_p > 0.0f) {
                const float floor = params_.min_p * candidates_[0].first;
                size_t n = 1;
                while (n < candidates_.size() && candidates_[n].first >= floor) ++n;
                candidates_.resize(n);
            }
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

    if (event != nullptr) {
        event->token = chosen;
        event->logprob = log_softmax_at(logits, chosen);
        event->top_logprobs.clear();
        if (options.top_logprobs > 0) {
            std::vector<int32_t> ids(static_cast<size_t>(vocab_));
            for (int64_t i = 0; i < vocab_; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
            const size_t k = std::min<size_t>(static_cast<size_t>(options.top_logprobs), ids.size());
            std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                              [&](int32_t a, int32_t b) {
                                  return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
                              });
            for (size_t i = 0; i < k; ++i)
                event->top_logprobs.emplace_back(ids[i], log_softmax_at(logits, ids[i]));
        }
    }
    return chosen;
}

}  // namespace sluice::runtime
