#include "runtime/dense_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace sluice::runtime {

DenseLayerStreamer::DenseLayerStreamer(std::vector<std::vector<model::MappedRange>> layers,
                                       int64_t main_layers, int64_t window)
    : layers_(std::move(layers)), main_layers_(main_layers), window_(std::max<int64_t>(window, 1)) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (auto& ranges : layers_) {
        for (model::MappedRange& r : ranges) {
            // Whole pages: the first one down, the last one up (a page a neighbour shares is read again
            // after its hand-back, from the page cache).
            const auto begin = reinterpret_cast<uintptr_t>(r.begin) & ~(page - 1);
            const auto end = (reinterpret_cast<uintptr_t>(r.begin) + r.bytes + page - 1) & ~(page - 1);
            r.begin = reinterpret_cast<const uint8_t*>(begin);
            r.bytes = end - begin;
            layer_bytes_ += r.bytes;
        }
    }
}

void DenseLayerStreamer::advise(int64_t layer, int advice) {
    if (layer < 0 || layer >= static_cast<int64_t>(layers_.size())) return;
    for (const model::MappedRange& r : layers_[static_cast<size_t>(layer)])
        // Advice only: a failure (not expected on a mapping of our own) leaves the pages as they were.
        (void)madvise(const_cast<uint8_t*>(r.begin), r.bytes, advice);
}

void DenseLayerStreamer::before_layer(int64_t layer) {
    if (layer >= main_layers_) {  // the MTP head's layer: only its own pages
        advise(layer, MADV_WILLNEED);
        return;
    }
    // The first layer of a forward asks for the whole window; later ones for the layer entering it.
    const int64_t first = layer == 0 ? 0 : window_ - 1;
    for (int64_t i = first; i < window_; ++i) advise((layer + i) % main_layers_, MADV_WILLNEED);
}

void DenseLayerStreamer::after_layer(int64_t layer) {
    advise(layer, MADV_DONTNEED);
    handed_back_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace sluice::runtime
