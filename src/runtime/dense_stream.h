// Streaming a model's dense core layer by layer (EngineOptions::dense_streaming): each decoder
// layer's own weights stay in their mapped file and are read for each forward — the pages of the
// layers ahead asked for while the current one runs (madvise MADV_WILLNEED: the kernel's readahead
// fills the page cache in the background), each layer's pages handed back after it ran
// (MADV_DONTNEED: out of the process's resident set; clean file pages the kernel may keep cached or
// drop). Only the embedding rows touched, lm_head, the norms and a window of layers stay resident.
//
// Threading: called from the forward's thread around each layer (model::LayerObserver); the counters
// are read by anyone.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace sluice::runtime {

class DenseLayerStreamer final : public model::LayerObserver {
 public:
    // `layers`: each layer's mapped ranges (Model::layer_mapped_ranges), the decoder's `main_layers`
    // first (any after them: the MTP head's); `window`: layers resident at once (the one running and
    // window − 1 read ahead, wrapping from the last main layer to the first for the next token).
    DenseLayerStreamer(std::vector<std::vector<model::MappedRange>> layers, int64_t main_layers,
                       int64_t window);

    void before_layer(int64_t layer) override;
    void after_layer(int64_t layer) override;

    // Bytes the layers' ranges span (what one token's forward reads, page cache permitting).
    uint64_t layer_bytes() const { return layer_bytes_; }
    uint64_t layers_handed_back() const { return handed_back_.load(std::memory_order_relaxed); }

 private:
    void advise(int64_t layer, int advice);

    std::vector<std::vector<model::MappedRange>> layers_;  // page-aligned
    int64_t main_layers_, window_;
    uint64_t layer_bytes_ = 0;
    std::atomic<uint64_t> handed_back_{0};
};

}  // namespace sluice::runtime
