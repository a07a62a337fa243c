// The memory plan: one budget for the whole process (dense weights, per-session state, scratch,
// expert cache). Streaming models get whatever the rest leaves as expert-cache slots.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "runtime/memory_plan.h"

namespace sluice {

std::string MemoryPlan::describe() const {
    auto gb = [](uint64_t b) { return static_cast<double>(b) / 1e9; };
    std::string s = fmt::format("memory plan: budget {:.2f} GB = dense {:.2f} + state {:.2f} + scratch {:.2f}", gb(budget_bytes),
                                gb(dense_bytes), gb(state_bytes), gb(scratch_bytes));
    if (streaming) {
        s += fmt::format(" + expert cache {:.2f} GB ({} slots of {:.2f} MB)", gb(cache_bytes), cache_slots, slot_bytes / 1e6);
    } else {
        s += " (experts resident: not a packed model)";
    }
    return s;
}

namespace runtime {

uint64_t available_memory_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t value = 0;
    std::string unit;
    while (in >> key >> value >> unit) {
        if (key == "MemAvailable:") return value * 1024;
    }
    return 0;
}

uint64_t scratch_bytes_estimate(const model::ModelConfig& c, int64_t chunk_tokens) {
    // The largest per-token buffers of the forward (model.h Workspace), times the chunk, plus one
    // vocabulary-sized logits row per chunk token for all-position logits.
    const int64_t qkvz = std::max<int64_t>(2 * c.linear_key_dim() + 2 * c.linear_value_dim(), 2 * c.n_heads * c.head_dim);
    const int64_t ffn = std::max({c.expert_ffn, c.shared_expert_ffn, c.dense_ffn});
    const int64_t per_token = 8 * c.hidden + 2 * qkvz + 3 * c.conv_dim() + 4 * c.linear_value_dim() + 2 * c.n_experts +
                              4 * c.n_heads * c.head_dim + 4 * ffn * c.top_k + c.vocab;
    return static_cast<uint64_t>(per_token * chunk_tokens) * 4;
}

}  // namespace runtime
}  // namespace sluice
