// StateLayout: what one sequence's model state is made of, derived once from the config — per
// layer, the named buffers with their element type and shape. Every place that sizes, allocates,
// copies or serialises session state reads it: the memory plan, the CPU state (ModelState), the
// CUDA backend's device state, snapshots and session files. A new mixer kind adds its buffers here.
//
// Two kinds of buffer:
//   - per-position (attention keys and values): one row per token position, so the state can be
//     cut back to any position by moving the position (rows past it are simply overwritten);
//   - recurrent (DeltaNet conv window and recurrent state): a fixed size that every token rewrites,
//     so it cannot be cut back. A sequence keeps it twice (the committed copy and the one a forward
//     writes, swapped when the whole forward succeeded) and keeps snapshots at positions its caller
//     asks for, to return to;
//   - window (a compressed cache's recent f16 rows, --kv-window): a ring of kv_window +
//     kKvRingSlack rows tagged with the position each holds (kernels::KvRing). A fixed size saved
//     with the live state and never snapshotted: a row is read only while its tag names the
//     position asked for, so cutting back needs nothing (a row lost to a cut deeper than the slack
//     is read from the compressed cache instead).
//
// Lifetime: a value, immutable after state_layout(); cheap to copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kv_format.h"
#include "model/config.h"

namespace sluice::model {

// Element type of a state buffer: the KV cache types of kernels/kv_format.h. Attention KV is a
// parameter of the layout (--kv-bits); recurrent state is always f32.
using StateElem = kernels::KvType;

struct StateBuffer {
    std::string name;  // "keys", "values", "conv", "recurrent"
    StateElem elem = StateElem::kF32;
    std::vector<int64_t> shape;  // per-position: one row's shape; recurrent: the whole buffer's;
                                 // window: [slots, heads, head_dim]
    bool per_position = false;
    bool window = false;

    bool recurrent() const { return !per_position && !window; }

    int64_t row_elems() const;   // elements of one row (per-position) or of the whole buffer
    uint64_t row_bytes() const;  // bytes of one row (a compressed type's codes and scales); window: the
                                 // ring's K rows, V rows and int64 tags
    uint64_t bytes(int64_t positions) const;  // whole buffer for a context of `positions`
};

struct LayerStateLayout {
    std::vector<StateBuffer> buffers;  // attention: keys, values; DeltaNet: conv, recurrent
};

// Buffer indices within a layer.
constexpr int kKeysBuffer = 0, kValuesBuffer = 1;
constexpr int kConvBuffer = 0, kRecurrentBuffer = 1;
constexpr int kRecentBuffer = 2;  // attention with a --kv-window: the f16 ring
// Ring rows beyond the window: how far a sequence can be cut back with its window intact, and the
// most rows a forward writes to the ring before their queries read it (attention_layer).
constexpr int64_t kKvRingSlack = 64;

struct StateLayout {
    std::vector<LayerStateLayout> layers;  // [n_layers]
    StateElem kv = StateElem::kF32;        // the attention layers' KV type
    int64_t kv_window = 0;                 // recent positions also kept in f16 (0: none)
    int64_t kv_ring_slots = 0;             // kv_window + kKvRingSlack, or 0

    bool has_recurrent() const;
    // Bytes of the per-position buffers for `positions` tokens (all layers).
    uint64_t per_position_bytes(int64_t positions) const;
    // Bytes of one copy of every recurrent buffer (what one snapshot holds).
    uint64_t recurrent_bytes() const;
    // Bytes of the recent-window rings (all layers).
    uint64_t window_bytes() const;
    // One sequence with a context of `positions` tokens and `snapshots` snapshot slots: the
    // per-position buffers, the recurrent buffers twice (committed + being written) and the slots.
    uint64_t sequence_bytes(int64_t positions, int64_t snapshots) const;
};

// The layout with attention KV stored as `kv_elem` (the caller has checked kv_shape_error) and,
// when kv_elem is a quantized type (q8, q4, q3), the last kv_window positions also in f16.
StateLayout state_layout(const ModelConfig& config, StateElem kv_elem = StateElem::kF32,
                         int64_t kv_window = 0);

// Whether --kv-window applies to `kv_elem` (f32 and f16 caches need no f16 window).
bool kv_window_applies(StateElem kv_elem);

}  // namespace sluice::model
