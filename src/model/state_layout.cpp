// StateLayout (state_layout.h): the buffers of one sequence, from the config.
#include "model/state_layout.h"

namespace sluice::model {

int64_t StateBuffer::row_elems() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

uint64_t StateBuffer::row_bytes() const {
    if (window) {
        const uint64_t slots = static_cast<uint64_t>(shape[0]);
        const auto row =
            static_cast<uint64_t>(shape[1] * kernels::kv_head_bytes(kernels::KvType::kF16, shape[2]));
        return slots * (2 * row + sizeof(int64_t));
    }
    // Per-position rows are [heads, head_dim], each head stored on its own (kv_format.h).
    const int64_t head_dim = shape.empty() ? 1 : shape.back();
    return static_cast<uint64_t>(row_elems() / head_dim * kernels::kv_head_bytes(elem, head_dim));
}

uint64_t StateBuffer::bytes(int64_t positions) const {
    const uint64_t row = row_bytes();
    return per_position ? row * static_cast<uint64_t>(positions) : row;
}

bool StateLayout::has_recurrent() const {
    for (const auto& l : layers)
        for (const auto& b : l.buffers)
            if (b.recurrent()) return true;
    return false;
}

uint64_t StateLayout::per_position_bytes(int64_t positions) const {
    uint64_t total = 0;
    for (const auto& l : layers)
        for (const auto& b : l.buffers)
            if (b.per_position) total += b.bytes(positions);
    return total;
}

uint64_t StateLayout::recurrent_bytes() const {
    uint64_t total = 0;
    for (const auto& l : layers)
        for (const auto& b : l.buffers)
            if (b.recurrent()) total += b.bytes(0);
    return total;
}

uint64_t StateLayout::window_bytes() const {
    uint64_t total = 0;
    for (const auto& l : layers)
        for (const auto& b : l.buffers)
            if (b.window) total += b.bytes(0);
    return total;
}

uint64_t StateLayout::sequence_bytes(int64_t positions, int64_t snapshots) const {
    return per_position_bytes(positions) + window_bytes() +
           recurrent_bytes() * static_cast<uint64_t>(2 + snapshots);
}

bool kv_window_applies(StateElem kv_elem) {
    return kv_elem != StateElem::kF32 && kv_elem != StateElem::kF16;
}

StateLayout state_layout(const ModelConfig& c, StateElem kv_elem, int64_t kv_window) {
    StateLayout layout;
    layout.kv = kv_elem;
    if (kv_window > 0 && kv_window_applies(kv_elem)) {
        layout.kv_window = kv_window;
        layout.kv_ring_slots = kv_window + kKvRingSlack;
    }
    layout.layers.resize(static_cast<size_t>(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l) {
        auto& buffers = layout.layers[static_cast<size_t>(l)].buffers;
        if (c.is_full_attention(l)) {
            // After k-norm and RoPE; row = position.
            // Latent attention caches one row per position, [normed latent | roped key], that its
            // attention reads as keys and as values: its "values" buffer holds nothing.
            const int64_t heads = c.kv_cache_heads(), dim = c.kv_cache_dim();
            buffers.push_back({"keys", kv_elem, {heads, dim}, true});
            buffers.push_back({"values", kv_elem, {c.latent_attention() ? 0 : heads, dim}, true});
            if (layout.kv_ring_slots > 0)
                buffers.push_back(
                    {"recent", StateElem::kF16, {layout.kv_ring_slots, heads, dim}, false, true});
        } else {
            // The K-1 previous raw conv inputs (oldest first) and the delta-rule state per value head.
            buffers.push_back({"conv", StateElem::kF32, {c.conv_kernel - 1, c.conv_dim()}, false});
            buffers.push_back(
                {"recurrent", StateElem::kF32, {c.linear_v_heads, c.linear_k_dim, c.linear_v_dim}, false});
        }
    }
    return layout;
}

}  // namespace sluice::model
