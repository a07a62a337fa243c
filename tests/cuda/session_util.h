// Helpers the GPU session tests share (session_gpu_test.cpp, gpt_oss_session_test.cpp,
// expert_parallel_test.cpp): deterministic prompts, greedy generation, and the largest logit difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sluice/session.h"

namespace sluice::testing {

// n token ids in [3, 203), a different sequence per salt.
inline std::vector<int32_t> prompt(int64_t n, int32_t salt) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + salt) % 200 + 3));
    return ids;
}

// n greedy tokens after p (end of sequence ignored).
inline std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& p, int64_t n) {
    GenerateOptions go;
    go.max_tokens = n;
    go.ignore_eos = true;
    go.sampling.temperature = 0.0f;
    std::vector<int32_t> out;
    auto r = s.generate(p, go, [&](const TokenEvent& ev) {
        out.push_back(ev.token);
        return true;
    });
    EXPECT_TRUE(r.has_value()) << r.status().message();
    return out;
}

// Largest |a − b| (infinite when the sizes differ).
inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return a.size() == b.size() ? d : INFINITY;
}

// The same over two schedules' logits (every sequence, every chunk: batch_schedule.h).
inline float max_diff(const std::vector<std::vector<std::vector<float>>>& a,
                      const std::vector<std::vector<std::vector<float>>>& b) {
    if (a.size() != b.size()) return INFINITY;
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return INFINITY;
        for (size_t c = 0; c < a[i].size(); ++c) d = std::max(d, max_diff(a[i][c], b[i][c]));
    }
    return d;
}

}  // namespace sluice::testing
