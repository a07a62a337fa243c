// The CUDA backend (its class and device types, shared by the files of src/runtime/cuda/): the whole model
// resident in GPU memory (dense core, every routed expert, each session's KV cache and DeltaNet state) and
// the forward of model.cpp / attention.cpp / gated_deltanet.cpp / moe.cpp enqueued on one stream as the
// kernels of cuda/ops.h.
//
// Memory: weights are copied once at load into one device arena (a single cudaMalloc, 256-byte
// aligned sub-allocations); packed models' experts are read through the model's ExpertSource in
// rounds and copied up. When the routed experts do not fit the GPU budget (or
// CudaBackendOptions::expert_cache_bytes caps them), only the dense core goes into the arena and the
// experts are tiered (cuda/expert_tier.h): a VRAM slot cache fed from the host's expert source, whose
// streaming cache slots are page-locked while in use (cuda::PinnedHostSlots), so memory pressure can
// still shrink it. The forward's scratch is one block sized for the largest batch seen (grown, never
// shrunk). Each sequence's state
// (DeviceState: KV, the DeltaNet state twice for failure atomicity, snapshot slots) lives only on the
// device. Decode (one token) is captured once per sequence and state parity as a CUDA graph:
// positions and token ids are read from device memory that a captured copy fills from pinned host memory, so
// the same graph replays every step; growing the scratch invalidates the graphs.
//
// MoE: routing stays on the GPU. Decode runs a MoE layer in three launches: the router's product
// (with the shared expert's gate logit) whose last block runs the top-k; the routed experts' and the
// shared expert's gate and up products with SwiGLU in their epilogue (experts picked from a device
// table by routed id); and one down projection over all of them with the weighted sum. Prefill sorts
// the (token, expert) pairs by expert on the GPU and runs grouped tiled products on tensor cores
// (3xTF32, f32 accuracy). The decode graph ends with the logits summary (greedy token and softmax
// normaliser, Backend::logits_summary), so greedy sampling needs no pass over the row on the host.
//
// Tiered forward: the forward runs as segments (enqueue_segment) that stop after each MoE
// layer's routing; the routed ids are copied to the host, ExpertTier::use() makes those experts
// resident, and the next segment starts with their products. Decode also computes the next
// layer's router on the current residual stream and hands its top-k to ExpertTier::prefetch(), so
// those copies overlap this layer's compute, and captures each segment as a graph (one per MoE
// layer, replayed every token). A prefill chunk whose experts outnumber the slots runs its MoE in
// token sub-ranges whose unions fit.
//
// Threading: one forward at a time (the engine's compute mutex). Rejected: cuBLAS for prefill
// products — it needs dequantized weights (bf16 copies of 4-bit experts) or per-call dequant
// buffers, and a large runtime dependency; the tiled kernel reads the codes directly.
//
// Fused glue (decode is bound by its chain of small dependent kernels, not by bytes): attention
// norms + RoPE + KV write in one kernel (attention_prep, every batch size) with the output gate in
// the attention epilogue; the DeltaNet l2 norms + gates + recurrence + gated norm in one kernel
// (deltanet_fused, decode only); in decode each residual add + norm in the prologue of the product
// that reads it (cuda::NormIn; the residual alternates between d_.x and d_.x2), and the MoE forms
// above. The diagnostic switches (CudaDiagnostics in include/sluice/types.h; the CLI reads them from
// SLUICE_CUDA_* in the environment) are options of this backend: `unfused` switches back
// to the unfused kernel sequences (the fused kernels' reference twins: separate residual norms,
// router top-k, gate and up, SwiGLU, shared expert) so a mismatch on a device can be bisected. The other
// diagnostic switches: SLUICE_CUDA_MATMUL=simt (prefill products without tensor cores),
// SLUICE_CUDA_MATVEC_SPLIT=N (one column split for every decode product), SLUICE_CUDA_TIMING=1 (GPU time per
// decode step, logged at close), SLUICE_CUDA_PDL=0 (no programmatic dependent launch of the decode products).
//
// The backend's code is split along its seams: backend.cpp (init, the budget, the forward's entry and
// the decode graphs, statistics), upload.cpp (weights into the arena), device_state.cpp (sequence
// state and scratch), layers.cpp (the layer program: attention, DeltaNet, MoE, the fused residual
// norms, enqueue_segment), tiered.cpp (segments between expert-tier stops and the tier's use).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "core/log.h"
#include "kernels/cuda/ops.h"
#include "model/workspace.h"
#include "runtime/backend.h"
#include "runtime/cuda/collective.h"
#include "runtime/cuda/expert_tier.h"
#include "runtime/expert_shard.h"
#include "runtime/memory_plan.h"

namespace sluice::runtime::cuda_impl {

using cuda::DevWeight;
using cuda::HeadLayout;

// Device counters of the kernels that finish in their last block (fused router top-k, logits summary,
// and one per value head for the fused DeltaNet step's output norm).
constexpr int kRouteCounter = 0, kPredictCounter = 1, kSummaryCounter = 2, kDeltaCounters = 3;
constexpr int kMaxDeltaHeads = 256;
// Products over at most this many rows run as one matvec per row (the decode kernels), and routed
// experts token by token: the tensor-core matmul gives one block per 64 output rows, so a small
// batch leaves the GPU idle — measured on the H200 (bench/results/cuda/session7): a 4-token
// forward of the 35B spent 97 ms in matmul_tc (≈170 µs per [512, 2048] product whatever the
// rows) against ≈3 ms for a whole decode token.
constexpr int64_t kMatvecRows = 16;
// (the fused DeltaNet step of a multi-sequence batch counts per sequence and value head)
constexpr int kCounters = kDeltaCounters + kMaxDeltaHeads * kMatvecRows;

inline Status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(ErrorCode::kInternal, fmt::format("[cuda] {}: {}", what, cudaGetErrorString(e)));
}

#define SLUICE_CUDA_TRY(expr, what) SLUICE_RETURN_IF_ERROR(cuda_status((expr), (what)))

// Whether an MLP's three projections have the decode kernels' code-word layout, gate and up in one
// code width and shape.
inline bool vector_mlp(const kernels::WeightView& gate, const kernels::WeightView& up,
                       const kernels::WeightView& down) {
    auto vec = [](const kernels::WeightView& w) {
        return cuda::vector_layout(cuda::dev_weight(w, nullptr, nullptr, nullptr));
    };
    return vec(gate) && vec(up) && vec(down) && gate.type == up.type && gate.group_size == up.group_size &&
           gate.scale_type == up.scale_type && gate.cols == up.cols;
}

// Sub-allocates one cudaMalloc; in counting mode (base null) only adds up the sizes.
class Arena {
 public:
    explicit Arena(char* base = nullptr, uint64_t capacity = 0) : base_(base), capacity_(capacity) {}
    void* take(uint64_t bytes) {
        const uint64_t at = used_;
        used_ += (bytes + 255) / 256 * 256;
        if (base_ == nullptr) return nullptr;
        return used_ <= capacity_ ? base_ + at : nullptr;
    }
    uint64_t used() const { return used_; }
    bool counting() const { return base_ == nullptr; }

 private:
    char* base_;
    uint64_t capacity_;
    uint64_t used_ = 0;
};

struct DevLayer {
    const model::LayerPlan* plan = nullptr;  // what this layer computes (model/plan.h)
    bool attention() const { return plan->mixer == model::MixerKind::kAttention; }
    bool latent() const { return plan->mixer == model::MixerKind::kLatentAttention; }
    bool moe() const { return plan->ffn == model::FfnKind::kMoe; }
    // The shared expert, where this rank computes it (ExpertShard::owns_shared: on one rank of an
    // expert-parallel group, whose sum over ranks then counts it once).
    bool has_shared() const { return moe() && plan->moe.shared_expert && shared_here; }
    bool shared_here = true;
    float *input_norm = nullptr, *post_norm = nullptr;
    DevWeight q_proj, k_proj, v_proj, o_proj;
    float *q_norm = nullptr, *k_norm = nullptr;                     // null without q/k norms (Qwen2)
    float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;  // Qwen2's, else null
    float* rope_inv_freq = nullptr;  // YaRN's frequencies (plan.attention / latent.rope_inv_freq), or null
    float* o_bias = nullptr;         // [H]: gpt-oss's o_proj bias, else null
    float* sinks = nullptr;          // [nh]: gpt-oss's per-head sink logits (cuda::KvCache::sinks), else null
    // Latent attention (plan.latent): q_proj above without a q bottleneck; kv_b read in place by the
    // absorption (cuda/latent_attention.h).
    DevWeight q_a_proj, q_b_proj, kv_a_proj, kv_b_proj, embed_q, unembed_out;
    float *q_a_norm = nullptr, *kv_a_norm = nullptr;
    DevWeight in_qkvz, in_ba, in_qkv, in_z, in_b, in_a, out_proj;
    float *conv = nullptr, *neg_a = nullptr, *dt_bias = nullptr, *dnorm = nullptr;
    DevWeight router, shared_gate_proj, shared_up, shared_down,
        shared_gate;                     // shared_gate: null ungated (GLM)
    float* router_bias = nullptr;        // a sigmoid router's selection bias [E], or null
    float* router_logit_bias = nullptr;  // [E]: gpt-oss's router bias, added to the logits; or null
    // gpt-oss's routed-expert biases (plan.moe.expert_bias): gate and up [E, I], down [E, H]; else null.
    float *expert_gate_bias = nullptr, *expert_up_bias = nullptr, *expert_down_bias = nullptr;
    DevWeight dense_gate, dense_up, dense_down;
    DevWeight* experts = nullptr;  // device [E][3]: gate, up, down
};

// One sequence's state on the device, authoritative there (nothing mirrors it on the host): the
// KV rows, the DeltaNet conv and recurrent state twice — `parity` says which copy is committed; a
// forward reads it and writes the other, and the backend flips parity when the whole forward has
// succeeded — and the snapshot slots, all in one cudaMalloc. Decode graphs read and write fixed
// state pointers, so each parity has its own.
class DeviceState final : public SequenceState {
 public:
    DeviceState(const model::StateLayout& layout, int64_t capacity, int max_snapshots, cudaStream_t stream)
        : SequenceState(layout, capacity, max_snapshots), stream_(stream) {}
    ~DeviceState() override {
        for (int p = 0; p < 2; ++p) {
            clear_segments(p);
            if (graph[p] != nullptr) cudaGraphExecDestroy(graph[p]);
        }
        if (block != nullptr) cudaFree(block);
        if (host_block != nullptr) cudaFreeHost(host_block);
    }

    char* block = nullptr;
    // The snapshot slots when they live in page-locked host memory (tiered experts: VRAM is the
    // expert cache's; see CudaBackend::host_snapshots_), else null and the slots are in `block`.
    char* host_block = nullptr;
    float* attn_split = nullptr;  // split attention partials (part of block)
    int64_t attn_split_floats = 0;
    // Per layer (null where the layer has none): KV (in the layout's KV type), the --kv-window ring
    // (cuda::KvCache::ring), and the recurrent buffers of each parity.
    std::vector<float*> k, v, ring;
    std::vector<float*> conv[2], recurrent[2];
    std::vector<std::vector<float*>> snap_conv, snap_recurrent;  // [slot][layer]
    int parity = 0;  // conv[parity] / recurrent[parity] hold the committed state
    // Unique among this backend's sequences (an address may be reused): keys the multi-row graphs.
    uint64_t id = 0;
    // As a rank's part of an expert-parallel group's sequence (runtime/sharded_state.h): the parity.
    int committed_copy() const override { return parity; }
    void set_committed_copy(int copy) override { parity = copy; }

    cudaGraphExec_t graph[2] = {nullptr, nullptr};
    uint64_t graph_generation[2] = {0, 0};
    // Tiered decode: one graph per segment between expert-tier stops, and the layer it stops at.
    struct Segment {
        cudaGraphExec_t exec;
        int64_t next;
    };
    std::vector<Segment> segments[2];
    uint64_t segments_generation[2] = {0, 0};
    void clear_segments(int p) {
        for (Segment& s : segments[p]) cudaGraphExecDestroy(s.exec);
        segments[p].clear();
    }
    // The forward succeeded: its written buffers become the committed ones.
    void commit(int64_t n) {
        if (layout().has_recurrent()) parity ^= 1;
        advance(n);
    }

 protected:
    float* buffer(int slot, int64_t layer, int b) const {
        const auto l = static_cast<size_t>(layer);
        if (k[l] != nullptr)
            return b == model::kKeysBuffer ? k[l] : b == model::kValuesBuffer ? v[l] : ring[l];
        if (slot == kLive) return b == model::kConvBuffer ? conv[parity][l] : recurrent[parity][l];
        const auto s = static_cast<size_t>(slot);
        return b == model::kConvBuffer ? snap_conv[s][l] : snap_recurrent[s][l];
    }
    uint64_t row_bytes(int64_t layer, int b) const {
        return layout().layers[static_cast<size_t>(layer)].buffers[static_cast<size_t>(b)].bytes(1);
    }
    Status read_rows(int slot, int64_t layer, int b, int64_t row0, int64_t rows, void* dst) const override {
        const uint64_t row = row_bytes(layer, b);
        return cuda_status(cudaMemcpy(dst, reinterpret_cast<const char*>(buffer(slot, layer, b)) + row0 * row,
                                      rows * row, cudaMemcpyDefault),
                           "downloading session state");
    }
    Status write_rows(int slot, int64_t layer, int b, int64_t row0, int64_t rows, const void* src) override {
        const uint64_t row = row_bytes(layer, b);
        return cuda_status(cudaMemcpy(reinterpret_cast<char*>(buffer(slot, layer, b)) + row0 * row, src,
                                      rows * row, cudaMemcpyDefault),
                           "uploading session state");
    }
    Status copy_recurrent(int from, int to) override {
        for (size_t l = 0; l < k.size(); ++l) {
            if (k[l] != nullptr || conv[0][l] == nullptr) continue;  // attention, or a layer not held
            for (int b : {model::kConvBuffer, model::kRecurrentBuffer}) {
                const auto li = static_cast<int64_t>(l);
                // Device to device, or to / from page-locked host slots.
                SLUICE_RETURN_IF_ERROR(
                    cuda_status(cudaMemcpyAsync(buffer(to, li, b), buffer(from, li, b), row_bytes(li, b),
                                                cudaMemcpyDefault, stream_),
                                "copying a state snapshot"));
            }
        }
        return cuda_status(cudaStreamSynchronize(stream_), "copying a state snapshot");
    }
    Status zero_recurrent() override {
        for (size_t l = 0; l < k.size(); ++l) {
            if (k[l] != nullptr || conv[0][l] == nullptr) continue;  // attention, or a layer not held
            for (int b : {model::kConvBuffer, model::kRecurrentBuffer}) {
                const auto li = static_cast<int64_t>(l);
                SLUICE_RETURN_IF_ERROR(cuda_status(
                    cudaMemsetAsync(buffer(kLive, li, b), 0, row_bytes(li, b), stream_), "zeroing state"));
            }
        }
        return cuda_status(cudaStreamSynchronize(stream_), "zeroing state");
    }

 private:
    cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
    // shard / collective: this backend is one rank of an expert-parallel group (expert_parallel.cpp):
    // it holds the dense core and its shard's routed experts, and sums each MoE layer's output over the
    // group through `collective` (which must outlive it).
    CudaBackend(std::shared_ptr<const model::Model> model, int device, ExpertShard shard = {},
                Collective* collective = nullptr)
        : model_(std::move(model)), device_(device), shard_(shard), collective_(collective) {}
    ~CudaBackend() override {
        if (stream_ != nullptr) cudaStreamSynchronize(stream_);
        if (timed_steps_ > 0)
            log::info("[cuda] {} decode steps: {:.3f} ms of GPU time per step", timed_steps_,
                      timed_ms_ / static_cast<double>(timed_steps_));
        if (timing_[0] != nullptr) cudaEventDestroy(timing_[0]);
        if (timing_[1] != nullptr) cudaEventDestroy(timing_[1]);
        tier_.reset();  // releases its host views before the host slots are unregistered
        if (host_slots_) model_->expert_source()->set_slot_observer(nullptr);
        if (host_ids_ != nullptr) cudaFreeHost(host_ids_);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
        if (ws_block_ != nullptr) cudaFree(ws_block_);
        if (weights_block_ != nullptr) cudaFree(weights_block_);
        if (mxfp4_q8_block_ != nullptr) cudaFree(mxfp4_q8_block_);
        if (null_block_ != nullptr) cudaFree(null_block_);
        if (host_io_ != nullptr) cudaFreeHost(host_io_);
        if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
        if (host_summary_ != nullptr) cudaFreeHost(host_summary_);
        for (RowsGraph& g : rows_graphs_) {
            cudaGraphExecDestroy(g.exec);
            if (g.parts != nullptr) cudaFree(g.parts);
        }
    }

    Status init(const CudaBackendOptions& options);
    // The scratch for a forward of n rows with logit_rows rows of logits, made now (an expert-parallel
    // group prepares every rank before any starts, so none fails an allocation mid-forward while the
    // others wait in a collective).
    Status prepare(int64_t n, int64_t logit_rows) {
        SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
        return reserve_scratch(n, logit_rows);
    }
    int device() const { return device_; }
    const ExpertShard& shard() const { return shard_; }
    // `reps` all-reduces of `rows` rows of d_.mix over the group (scratch prepared for them), timed with
    // events on this rank's stream: µs each, into *us.
    Status time_all_reduce(int64_t rows, int reps, double* us) {
        SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
        cudaEvent_t ev[2] = {nullptr, nullptr};
        SLUICE_CUDA_TRY(cudaEventCreate(&ev[0]), "creating timing events");
        SLUICE_CUDA_TRY(cudaEventCreate(&ev[1]), "creating timing events");
        reduce_experts(rows);  // warm
        cudaEventRecord(ev[0], stream_);
        for (int i = 0; i < reps; ++i) reduce_experts(rows);
        cudaEventRecord(ev[1], stream_);
        const cudaError_t e = cudaEventSynchronize(ev[1]);
        float ms = 0.0f;
        if (e == cudaSuccess) cudaEventElapsedTime(&ms, ev[0], ev[1]);
        cudaEventDestroy(ev[0]);
        cudaEventDestroy(ev[1]);
        SLUICE_CUDA_TRY(e, "timing the group's all-reduce");
        *us = 1000.0 * ms / reps;
        return collective_ != nullptr ? collective_->check() : Status::ok();
    }
    // One all-reduce over the group, waited for: NCCL connects its channels on a communicator's first
    // collective, which must not happen inside a graph capture.
    Status warm_collective() {
        SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
        reduce_experts(1);
        SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "the group's first all-reduce");
        return collective_ != nullptr ? collective_->check() : Status::ok();
    }
    std::string name() const override { return name_; }
    uint64_t device_weight_bytes() const override { return weight_bytes_; }
    double measure_memory_gb_s() override;
    uint64_t decode_bytes_per_token() const override { return decode_bytes_per_token_; }
    GpuExpertCacheStats expert_tier_stats() const override;
    void reset_expert_tier_stats() override {
        if (tier_) tier_->reset_stats();
    }
    Expected<std::unique_ptr<SequenceState>> new_sequence(int64_t max_positions, int max_snapshots,
                                                          const model::StateLayout* layout) override;
    Status forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                   bool all_logits) override {
        return forward_rows(seq, tokens, logits, all_logits, nullptr);
    }
    Status forward_batch(std::span<const BatchStep> steps) override;
    std::optional<LogitsSummary> logits_summary() const override;
    // The multi-token-prediction head (model.h forward_mtp), with the experts resident: its layer is
    // layers_[n_layers], its state a DeviceState of Model::mtp_layout.
    bool runs_mtp() const override { return mtp_uploaded_; }
    Expected<std::unique_ptr<SequenceState>> new_mtp_sequence(int64_t max_positions,
                                                              const model::StateLayout* layout) override;
    Status forward_mtp(SequenceState& mtp, std::span<const int32_t> tokens, const float* hidden,
                       float* logits, bool all_logits, float* hidden_out) override;

 private:
    // forward() with every row's final-normed hidden state copied into `hidden` [n, H] when not null.
    Status forward_rows(SequenceState& seq, std::span<const int32_t> tokens, float* logits, bool all_logits,
                        float* hidden);
    // The final norm of rows [row0, row0 + n) of the residual stream of the forward just run, to `hidden`.
    Status copy_hidden(int64_t row0, int64_t n, float* hidden);
    // The head over parts_[0]'s n rows: input rows from the embedding and `hidden` (host), its
    // layer, mtp.norm into d_.norm (every row) and lm_head over the part's logit rows.
    void enqueue_mtp(int64_t n, int64_t position, const float* hidden);
    // Weights.
    Status upload_weights(Arena& arena);
    // One routed expert projection into the arena: as the MLX affine it is when experts_as_mlx_ (an error
    // if a block does not convert: the kernels were chosen for every expert from expert 0).
    DevWeight put_expert(Arena& arena, const kernels::WeightView& w, Status& st);
    // as_mlx: a GGUF Q4_0 / Q4_1 / Q8_0 weight goes up as MLX affine (upload.cpp); false for routed experts.
    DevWeight put(Arena& arena, const kernels::WeightView& w, Status& st, bool as_mlx = true);
    // w's bytes as put() lays them out in the arena (no conversion), copied when `copy`.
    DevWeight lay_out(Arena& arena, const kernels::WeightView& w, Status& st, bool copy);
    // An expert-parallel rank's stand-in for the routed experts of a layer that it does not hold: zero
    // bytes in null_block_ (every weight format decodes zero bytes as 0), laid out as expert `e` goes up
    // (put_expert), so the MoE kernels read it like any expert and it adds exactly 0. Into out[3].
    void null_expert(const model::ExpertWeights& e, DevWeight* out, Status& st);
    float* put(Arena& arena, const std::vector<float>& v, Status& st);
    Status put_bytes(void* dst, const void* src, uint64_t bytes);

    // State and scratch.
    // Device bytes of one sequence (state_layout sizes, alignment, the split-attention partials);
    // without the snapshot slots when they live on the host (host_snapshots_).
    uint64_t state_bytes(int64_t max_positions, int max_snapshots, const model::StateLayout& layout) const;
    // Floats of split-attention scratch a sequence of this capacity needs (standard or latent heads).
    int64_t split_scratch_floats(int64_t max_positions) const;
    // The scratch buffers for n tokens with logit_rows rows of logits: placed into d_ (plan only
    // lists them), and their total size.
    using ScratchPlan = std::vector<std::pair<void**, uint64_t>>;
    ScratchPlan scratch_plan(int64_t n, int64_t logit_rows);
    uint64_t scratch_bytes(int64_t n, int64_t logit_rows);
    Status reserve_scratch(int64_t n, int64_t logit_rows);
    // The checks of forward() for one step; the sequence as this backend's.
    Expected<DeviceState*> check_step(SequenceState* seq, std::span<const int32_t> tokens) const;
    // The forward of the n rows of parts_ (first positions and ids already in host_io_) as
    // segments between the points where the tiered experts need the host (see enqueue_segment).
    int64_t enqueue_segment(int64_t n, int64_t after);
    // Whether layer l's decode predicts layer l + 1's experts for the prefetcher.
    bool predicts(int64_t l, int64_t n) const;
    Status tiered_experts(int64_t l, int64_t n);
    Status run_tiered(DeviceState& ds, int64_t n);
    Status run_enqueued(DeviceState& first, int64_t n);
    // The resident forward of parts_ (n ≤ kMatvecRows rows in all, through the decode kernels) as a CUDA
    // graph, captured the first time its shape is seen, and its logit_rows rows of logits copied into
    // host_logits_; then waited for.
    Status run_rows_graph(int64_t n, int64_t logit_rows);
    // y = w · x for n rows: decode matvecs (n ≤ kMatvecRows), else the prefill products — int8 ones
    // where int8_linear() and `int8` (the router and the shared expert's gate stay f32, as on the CPU:
    // Model::use_activations).
    void linear(const DevWeight& w, const float* x, int64_t n, float* y, bool int8 = true);
    // linear() of several weights over one input (q/k/v, the DeltaNet inputs): with the int8
    // products, x is quantised once for all of them.
    struct Product {
        const DevWeight* w;
        float* y;
    };
    void linears(const float* x, int64_t n, std::initializer_list<Product> products);
    // Whether linear(w, ·, n, ·) takes the int8 products.
    bool int8_linear(const DevWeight& w, int64_t n) const;
    void swiglu_mlp(const DevWeight& gate, const DevWeight& up, const DevWeight& down, const float* x,
                    int64_t n, float* out);
    // in_norm (decode, nullable): the residual add and norm that produce the layer's input, run by
    // its first product (see cuda::NormIn); otherwise the input is d_.norm.
    // The projections run over all n rows; the cores per part of parts_, on its own state.
    void attention_layer(const DevLayer& L, int64_t l, int64_t n, const cuda::NormIn* in_norm);
    void deltanet_layer(const DevLayer& L, int64_t l, int64_t n, const cuda::NormIn* in_norm);
    void latent_attention_layer(const DevLayer& L, int64_t l, int64_t n, const cuda::NormIn* in_norm);
    void moe_layer(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm);
    // The decode NormIn that adds d_.mix to the residual stream (resid_) and norms it with `weight`
    // into d_.norm; the residual moves to the other of d_.x / d_.x2.
    cuda::NormIn residual_norm(const float* weight, float eps);
    bool fused_shared(const DevLayer& L, int64_t n) const;
    // Whether decode folds the shared expert into the routed down projection (moe_shared then skips).
    bool shared_folded(const DevLayer& L, int64_t n) const;
    // The fused router top-k of layer L's router (slice `which` of a matvec_multi launch) into ids /
    // weights.
    cuda::MatvecTopk route_topk(const DevLayer& L, int which, int32_t* ids, float* weights,
                                int counter) const;
    // Router logits (and the decode shared-expert projections) and top-k for n tokens.
    void moe_route(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm);
    // mix[t] = Σ routed experts for n tokens of inputs x, routed ids/weights (pointers may be offset
    // into the batch: sub-ranges of a tiered prefill, which may be one token long). `decode`: the
    // forward is one token, so the shared expert may be folded in (shared_folded).
    void moe_routed(const DevLayer& L, const float* x, const int32_t* ids, const float* weights, int64_t n,
                    float* mix, bool decode);
    // mix += the shared expert's gated output.
    void moe_shared(const DevLayer& L, int64_t n);
    // An expert-parallel rank: d_.mix's n rows (this rank's experts, and the shared expert where it
    // computes it) summed over the group, so every rank continues with the layer's whole output.
    void reduce_experts(int64_t n);
    // Whether layer L's routed experts add biases or clamp their SwiGLU (gpt-oss): their products then
    // take the unfused forms with cuda::expert_swiglu between gate/up and down, and the down biases
    // are added by cuda::moe_add_expert_bias.
    static bool expert_extras(const DevLayer& L) {
        return L.plan->moe.expert_bias || L.plan->moe.swiglu_limit > 0.0f;
    }

    std::shared_ptr<const model::Model> model_;
    int device_;
    ExpertShard shard_;                 // the whole model unless a rank of an expert-parallel group
    Collective* collective_ = nullptr;  // that group's (null: none)
    // The zero bytes the null experts point into (a rank of a group), null_bytes_ long: the largest
    // expert as uploaded.
    void* null_block_ = nullptr;
    uint64_t null_bytes_ = 0;
    bool unfused_ = false;        // diagnostics: the fused kernels' reference sequences (CudaDiagnostics)
    cuda::LaunchContext launch_;  // this device's SMs and occupancy, and the launch switches
    std::string name_;
    cudaStream_t stream_ = nullptr;
    char* weights_block_ = nullptr;
    uint64_t weight_bytes_ = 0;
    uint64_t decode_bytes_per_token_ = 0;
    uint64_t embed_bytes_ = 0, routed_bytes_ = 0;  // parts of weight_bytes_
    uint64_t expert_slot_bytes_ = 0;               // one expert in a VRAM slot (tiered)
    // Every routed and shared expert projection has cuda::vector_layout, gate and up alike: the decode
    // MoE launches take their code-word instances.
    bool experts_vector_ = false;
    // The prefill products of 4/8-bit weights on int8 tensor cores (EngineOptions::gpu_int8_prefill)
    // when a weight has cuda::int8_products; experts_int8_bits_: the code width (4 or 8) every routed
    // expert's gate, up and down share with int8_products, else 0 (their grouped products stay f32).
    bool int8_prefill_ = false;
    // Steps of more than kMatvecRows tokens attend on tensor cores (cuda::flash_attention_kv) where it
    // covers the cache; with EngineOptions::gpu_int8_prefill, as the exact path is its `false`.
    bool flash_attention_ = false;
    int experts_int8_bits_ = 0;
    int64_t experts_int8_group_ = 0;  // the smallest group size among them
    // Resident MXFP4 experts (gpt-oss) on the int8 prefill kernels: converted a group at a time into this
    // scratch (cuda::moe_mxfp4_int8); group 0 where they are not, or the scratch could not be had.
    cuda::Mxfp4Q8Scratch mxfp4_q8_{};
    void* mxfp4_q8_block_ = nullptr;
    // The routed experts' kernels as the counting pass finds them, two ways: `raw`, their bytes as the
    // checkpoint holds them (what the expert tier copies), and `mlx`, GGUF Q4_0 / Q4_1 / Q8_0 experts
    // uploaded as the MLX affine 4/8-bit they exactly are (kernels::ggml_as_mlx_affine: the chunk decode
    // kernels and the int8 tensor-core prefill; 5 or 9 bits a weight where the blocks hold 4.5 or 8.5).
    // init() takes `mlx` when every expert converts and the model stays resident so (experts_as_mlx_).
    struct ExpertKernels {
        bool convertible = true;  // mlx: every expert projection counted converted
        bool vector = true;       // experts_vector_
        int int8_bits = -1;       // experts_int8_bits_ (-1: no MoE layer yet)
        int64_t int8_group = 0;   // experts_int8_group_
        bool mxfp4 = true;        // every expert projection has cuda::mxfp4_int8_products
        uint64_t routed_bytes = 0;
    };
    ExpertKernels experts_raw_, experts_mlx_;
    bool experts_as_mlx_ = false;
    bool tiered_ = false;
    // Tiered experts: VRAM is the expert cache's, so each sequence's snapshot slots live in
    // page-locked host memory (a snapshot of the 80B's DeltaNet state is 76 MB: 1.6 ms at 48 GB/s,
    // once per turn boundary); on the device they took 224 of 1256 expert slots of the 80B under a
    // 4 GB budget and 3.6% of its decode speed (bench/results/cuda/README.md, session 6).
    bool host_snapshots_ = false;
    std::unique_ptr<cuda::ExpertTier> tier_;
    // Page-locks the host expert cache's slots in use (tiered, packed model); null otherwise.
    std::unique_ptr<cuda::PinnedHostSlots> host_slots_;
    bool prefetch_ = true;
    std::unique_ptr<DevLayer[]> layers_;  // [n_layers]
    DevWeight embed_, lm_head_;
    float* final_norm_ = nullptr;
    // The MTP head (uploaded with resident experts): fc and its three norms; its layer in layers_.
    bool mtp_uploaded_ = false;
    DevWeight mtp_fc_;
    float *mtp_norm_embedding_ = nullptr, *mtp_norm_hidden_ = nullptr, *mtp_norm_ = nullptr;

    // Scratch for batches of up to ws_tokens_ tokens.
    int64_t ws_tokens_ = 0, ws_logit_rows_ = 0;
    uint64_t ws_generation_ = 0;
    char* ws_block_ = nullptr;
    struct {
        float *x, *x2, *norm, *mix, *tmp, *q, *k, *v, *gate, *z, *beta, *g, *conv_in, *conv_out, *attn, *y;
        float *router, *topk_w, *pred_logits, *pred_w, *pair_gate, *pair_up, *pair_act, *pair_out, *sh_gate,
            *sh_up, *sh_act, *sh_out, *sg, *logits;
        int32_t *topk_ids, *pred_ids, *offsets, *order, *io;  // io: parts' first positions, then token ids
        float* summary_partial;
        cuda::DevLogitsSummary* summary;
        unsigned* counters;  // zeroed at allocation; the kernels that use them leave them 0
        int8_t* xq;          // the int8 products' quantised activations (i8())
        float *xq_d, *xq_dsum;
    } d_{};
    int64_t xq_capacity_ = 0;  // elements d_.xq holds
    cuda::Int8Rows i8() const { return {d_.xq, d_.xq_d, d_.xq_dsum, xq_capacity_}; }
    int32_t* host_ids_ = nullptr;   // pinned [ws_tokens_ · K + K]: routed and predicted ids (tiered)
    int32_t* host_io_ = nullptr;    // pinned mirror of d_.io, [2 · ws_tokens_ + 1]
    float* host_logits_ = nullptr;  // pinned [kMatvecRows, V]: the graphs' logits
    cuda::DevLogitsSummary* host_summary_ = nullptr;  // pinned: the last decode's logits summary
    bool summary_valid_ = false;                      // host_summary_ belongs to the last forward
    // The sequences of the forward being enqueued, as rows of the scratch: one part for forward(),
    // one per step for forward_batch(); d_.io holds each part's first position, then the ids.
    struct Part {
        DeviceState* ds;
        int64_t row0, n;
        int64_t logit_rows;  // rows of logits wanted: its last logit_rows rows (0: none)
    };
    std::vector<Part> parts_;
    // Multi-row decode forwards as graphs (run_rows_graph), keyed by the batch's shape: the scratch
    // generation, then per part its sequence's id, state parity, rows and logit rows. A speculative
    // verification of k proposals, or the decode tokens of the same batched sequences, repeat a shape
    // every other step (parities alternate), so their graphs replay; the least recently used of
    // kRowsGraphs goes when a new shape comes.
    struct RowsGraph {
        std::vector<int64_t> key;
        cudaGraphExec_t exec = nullptr;
        float* resid = nullptr;  // resid_ after the forward
        uint64_t used = 0;
        void* parts = nullptr;  // its device table of DeltaNet parts (delta_parts_), or null
    };
    // While a rows graph of several sequences is captured: each DeltaNet layer's parts in device memory,
    // [n_layers][parts_.size()] (cuda::DeltaPart), for the one-launch conv and fused step over them.
    const cuda::DeltaPart* delta_parts_ = nullptr;
    static constexpr size_t kRowsGraphs = 16;
    std::vector<RowsGraph> rows_graphs_;
    uint64_t rows_graph_clock_ = 0;
    uint64_t sequence_ids_ = 0;  // the last DeviceState::id given
    // Where the residual stream is while a forward is enqueued: d_.x, or d_.x2 after a fused
    // residual norm (which cannot update it in place; see cuda::NormIn).
    float* resid_ = nullptr;
    int major_ = 0;               // the device's compute capability
    cudaEvent_t timing_[2] = {};  // SLUICE_CUDA_TIMING: around each decode step
    int64_t timed_steps_ = 0;
    double timed_ms_ = 0.0;
};

// The checks of a step of `tokens` on `seq` that do not depend on the backend: room in its context, every
// id inside the vocabulary.
Status check_tokens(const SequenceState& seq, std::span<const int32_t> tokens, int64_t vocab);

// The group of CudaBackendOptions::devices (expert_parallel.cpp).
Expected<std::unique_ptr<Backend>> make_expert_parallel_backend(std::shared_ptr<const model::Model> model,
                                                                const CudaBackendOptions& options);

}  // namespace sluice::runtime::cuda_impl
