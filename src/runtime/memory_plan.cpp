// The memory plan: one budget for the whole process (dense weights, per-session state, scratch,
// expert cache). Streaming models get whatever the rest leaves as expert-cache slots.
#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace sluice {

std::string human_bytes(uint64_t b) {
    if (b >= 1000000000ull) return fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9);
    if (b >= 1000000ull) return fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
    return fmt::format("{:.1f} KB", static_cast<double>(b) / 1e3);
}

std::string MemoryPlan::describe() const {
    std::string s = fmt::format(
        "memory plan: budget {} = dense {} + state {} (KV {}{}, {} per token) + scratch {}{} + runtime {}",
        human_bytes(budget_bytes), human_bytes(dense_bytes), human_bytes(state_bytes), kv_type,
        kv_window > 0 ? fmt::format(" + last {} in f16", kv_window) : std::string(),
        human_bytes(kv_bytes_per_token), human_bytes(scratch_bytes),
        sessions > 1 ? fmt::format(" ({} sessions)", sessions) : std::string(), human_bytes(runtime_bytes));
    if (dense_streamed_bytes > 0)
        s += fmt::format(" [dense core streamed: {} of layers read per token, {} layers held at a time]",
                         human_bytes(dense_streamed_bytes), dense_window_layers);
    if (prefix_cache_bytes > 0) s += fmt::format(" + prefix cache {}", human_bytes(prefix_cache_bytes));
    if (streaming) {
        s += fmt::format(" + expert cache {} ({} slots of {})", human_bytes(cache_bytes), cache_slots,
                         human_bytes(slot_bytes));
    } else {
        s += " (no expert cache: every weight mapped, no routed experts streamed)";
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
    // The largest per-token buffers of the forward (model.h Workspace) times the chunk, plus the
    // last position's logits and the sampler's sort buffers (values and indices) over the
    // vocabulary. All-position logits (perplexity, `sluice logits`) are the caller's own n × vocab
    // buffer, outside the plan: budgeting them for every prefill chunk took 155 MB of a 3 GB budget
    // on a 152k vocabulary for nothing during generation.
    const int64_t qkvz =
        std::max<int64_t>(2 * c.linear_key_dim() + 2 * c.linear_value_dim(), 2 * c.n_heads * c.head_dim);
    // MLP buffers (gate, up, activation) are reused expert by expert, so they hold one MLP's
    // rows for at most every token of the chunk, not top_k of them; a dense MLP's width counts
    // only when some layer has one.
    int64_t ffn = std::max(c.expert_ffn, c.shared_expert_ffn);
    for (int64_t l = 0; l < c.n_layers; ++l)
        if (!c.is_moe_layer(l)) ffn = std::max(ffn, c.dense_ffn);
    // Latent attention's: q, the latents, the absorbed queries and their outputs (cache_dim per head).
    const int64_t mla = c.latent_attention()
                            ? c.q_lora_rank + c.kv_cache_dim() + 2 * c.n_heads * c.kv_cache_dim() +
                                  c.n_heads * (c.head_dim + c.v_head_dim)
                            : 0;
    // 12 hidden-wide rows: the residual, norms, mixes and the MoE's reorder ring (2 rows, moe.cpp).
    const int64_t per_token = 12 * c.hidden + 2 * qkvz + 3 * c.conv_dim() + 4 * c.linear_value_dim() +
                              2 * c.n_experts + 4 * c.n_heads * c.head_dim + 3 * ffn + 2 * c.top_k + mla;
    return static_cast<uint64_t>(per_token * chunk_tokens + 3 * c.vocab) * 4;
}

}  // namespace runtime
}  // namespace sluice
