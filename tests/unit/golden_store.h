// The expert store over a packed golden, opened the way the store's tests (expert_cache_test,
// moe_order_test) open it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "convert/packer.h"
#include "experts/expert_store.h"
#include "format/pack.h"
#include "test_util.h"

namespace sluice::testing {

// The qwen3_next_mlx_q4 golden packed into `out`: a small streamed model with 8 experts per MoE layer.
inline Expected<format::PackLayout> pack_streamed_golden(const std::string& out) {
    convert::PackOptions o;
    o.src_dir = test_data_dir() + "/goldens/qwen3_next_mlx_q4";
    o.out_dir = out;
    if (auto packed = convert::pack_model(o); !packed.has_value()) return packed.status();
    return format::open_packed_dir(out);
}

// A store over that golden: its layout, a slot's bytes, the experts of a layer, the MoE layers in file
// order and every expert id of a layer (0 .. n_experts - 1).
struct GoldenStore {
    format::PackLayout layout;
    std::unique_ptr<experts::ExpertStore> store;
    uint64_t slot = 0;
    int64_t n_experts = 0;
    std::vector<int32_t> layers;
    std::vector<int32_t> all;
};

// Sets a store's options from the golden's shape (every field of GoldenStore but the store).
using GoldenStoreOptions = std::function<void(experts::ExpertStoreOptions&, const GoldenStore&)>;

// Packs the golden into `packed` and opens a store over it with the options `options` sets (call under
// ASSERT_NO_FATAL_FAILURE: it fails the test when either step fails).
inline void open_golden_store(const std::string& packed, const GoldenStoreOptions& options,
                              GoldenStore* out) {
    auto layout = pack_streamed_golden(packed);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    out->layout = *layout;
    out->slot = experts::ExpertStore::slot_bytes_for(out->layout);
    out->n_experts = out->layout.n_experts;
    ASSERT_GE(out->n_experts, 8);
    out->layers.clear();
    for (const auto& f : out->layout.expert_files) out->layers.push_back(static_cast<int32_t>(f.layer));
    ASSERT_GE(out->layers.size(), 2u);
    out->all.resize(static_cast<size_t>(out->n_experts));
    std::iota(out->all.begin(), out->all.end(), 0);
    experts::ExpertStoreOptions so;
    options(so, *out);
    auto opened = experts::ExpertStore::open(packed, out->layout, so);
    ASSERT_TRUE(opened.has_value()) << opened.status().message();
    out->store = std::move(opened).value();
}

// The golden's store with room for every expert of a layer, a floor of `floor_slots` slots and no
// prefetch, reading with `io_threads` threads.
inline void open_layer_store(const std::string& packed, int64_t floor_slots, int io_threads,
                             GoldenStore* out) {
    open_golden_store(
        packed,
        [&](experts::ExpertStoreOptions& so, const GoldenStore& g) {
            so.cache_bytes = g.slot * static_cast<uint64_t>(g.n_experts);
            so.floor_bytes = g.slot * static_cast<uint64_t>(floor_slots);
            so.prefetch = false;
            so.io_threads = io_threads;
        },
        out);
}

}  // namespace sluice::testing
