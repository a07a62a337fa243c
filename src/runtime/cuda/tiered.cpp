// The CUDA backend's tiered forward: the expert tier between segments, the decode segment graphs.
#include "runtime/cuda/backend_impl.h"

namespace sluice::runtime::cuda_impl {

bool CudaBackend::predicts(int64_t l, int64_t n) const {
    const model::ModelConfig& c = model_->config();
    return n == 1 && prefetch_ && l + 1 < c.n_layers && layers_[static_cast<size_t>(l + 1)].moe();
}

// Between segments, layer l's routed ids in host_ids_: makes the experts resident through the
// tier. Decode hands the predicted next-layer experts to the prefetcher (the next segment runs
// the products); prefill enqueues the products here, in token sub-ranges whose expert unions fit
// the slots (all tokens at once when they fit).
Status CudaBackend::tiered_experts(int64_t l, int64_t n) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = c.n_experts, K = c.top_k;
    const int64_t checked = predicts(l, n) ? n * K + K : n * K;
    for (int64_t i = 0; i < checked; ++i)
        if (host_ids_[i] < 0 || host_ids_[i] >= E)
            return error(ErrorCode::kInternal,
                         fmt::format("[cuda] layer {} routed to expert {} of {} (non-finite router logits?)",
                                     l, host_ids_[i], E));
    // A rank of an expert-parallel group holds its shard's experts only: the others' table entries
    // are its null expert, never the tier's.
    auto owned = [&](const int32_t* ids, int64_t count) {
        std::vector<int32_t> out;
        for (int64_t i = 0; i < count; ++i)
            if (shard_.owns_expert(ids[i])) out.push_back(ids[i]);
        return out;
    };
    if (n == 1) {
        SLUICE_RETURN_IF_ERROR(tier_->use(l, owned(host_ids_, K), stream_));
        if (predicts(l, n)) tier_->prefetch(l + 1, owned(host_ids_ + K, K));
        return Status::ok();
    }
    const DevLayer& L = layers_[static_cast<size_t>(l)];
    const int64_t cap = std::max<int64_t>(K, tier_->n_slots() - 2 * K);
    std::vector<uint8_t> seen(static_cast<size_t>(E), 0);
    std::vector<int32_t> uni;
    int64_t begin = 0;
    auto flush = [&](int64_t end) -> Status {
        SLUICE_RETURN_IF_ERROR(tier_->use(l, uni, stream_));
        moe_routed(L, d_.norm + begin * H, d_.topk_ids + begin * K, d_.topk_w + begin * K, end - begin,
                   d_.mix + begin * H, false);
        if (end < n) SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "expert sub-range");  // before eviction
        for (int32_t e : uni) seen[static_cast<size_t>(e)] = 0;
        uni.clear();
        begin = end;
        return Status::ok();
    };
    for (int64_t t = 0; t < n; ++t) {
        int64_t fresh = 0;
        for (int64_t j = 0; j < K; ++j) {
            const int32_t e = host_ids_[t * K + j];
            fresh += seen[static_cast<size_t>(e)] || !shard_.owns_expert(e) ? 0 : 1;
        }
        if (static_cast<int64_t>(uni.size()) + fresh > cap) SLUICE_RETURN_IF_ERROR(flush(t));
        for (int64_t j = 0; j < K; ++j) {
            const int32_t e = host_ids_[t * K + j];
            if (!seen[static_cast<size_t>(e)] && shard_.owns_expert(e)) {
                seen[static_cast<size_t>(e)] = 1;
                uni.push_back(e);
            }
        }
    }
    return flush(n);
}

// The tiered forward: segments with the expert tier between them. Decode captures each segment as
// a graph once per state (and scratch generation) and replays them.
Status CudaBackend::run_tiered(DeviceState& ds, int64_t n) {
    const model::ModelConfig& c = model_->config();
    const bool graphs = n == 1;
    const int p = ds.parity;  // the graphs read this parity's state and write the other's
    if (graphs && ds.segments_generation[p] != ws_generation_) {
        ds.clear_segments(p);
        ds.segments_generation[p] = ws_generation_;
    }
    auto& segments = ds.segments[p];
    int64_t at = -1;
    for (size_t seg = 0;; ++seg) {
        int64_t next = 0;
        if (!graphs) {
            next = enqueue_segment(n, at);
        } else if (seg < segments.size()) {
            SLUICE_CUDA_TRY(cudaGraphLaunch(segments[seg].exec, stream_), "launching a decode segment");
            next = segments[seg].next;
        } else {
            cudaGraph_t graph = nullptr;
            SLUICE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                            "capturing decode");
            next = enqueue_segment(1, at);
            if (next == c.n_layers)
                cudaMemcpyAsync(host_logits_, d_.logits, static_cast<size_t>(c.vocab) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_);
            SLUICE_CUDA_TRY(cudaStreamEndCapture(stream_, &graph), "capturing decode");
            cudaGraphExec_t exec = nullptr;
            const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
            cudaGraphDestroy(graph);
            SLUICE_CUDA_TRY(e, "instantiating a decode segment");
            segments.push_back({exec, next});
            SLUICE_CUDA_TRY(cudaGraphLaunch(exec, stream_), "launching a decode segment");
        }
        SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "forward");
        if (next == c.n_layers) return Status::ok();
        SLUICE_RETURN_IF_ERROR(tiered_experts(next, n));
        at = next;
    }
}

}  // namespace sluice::runtime::cuda_impl
