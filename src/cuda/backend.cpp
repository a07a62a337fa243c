// The CUDA backend: the whole model resident in GPU memory (dense core, every routed expert, each
// session's KV cache and DeltaNet state) and the forward of model.cpp / attention.cpp /
// gated_deltanet.cpp / moe.cpp enqueued on one stream as the kernels of cuda/ops.h.
//
// Memory: weights are copied once at load into one device arena (a single cudaMalloc, 256-byte
// aligned sub-allocations); packed models' experts are read through the model's ExpertSource in
// rounds and copied up. When the routed experts do not fit the GPU budget (or
// CudaBackendOptions::expert_cache_bytes caps them), only the dense core goes into the arena and the
// experts are tiered (cuda/expert_tier.h): a VRAM slot cache fed from the host's expert source, whose
// streaming cache memory is page-locked here so its O_DIRECT reads land in pinned memory. The forward's
// scratch is one block sized for the largest batch seen (grown, never shrunk). Each sequence's state
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
#include "runtime/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "core/log.h"
#include "cuda/expert_tier.h"
#include "cuda/ops.h"
#include "model/workspace.h"
#include "runtime/memory_plan.h"

namespace sluice::runtime {
namespace {

using cuda::DevWeight;
using cuda::HeadLayout;

// Device counters of the kernels that finish in their last block (fused router top-k, logits summary,
// and one per value head for the fused DeltaNet step's output norm).
constexpr int kRouteCounter = 0, kPredictCounter = 1, kSummaryCounter = 2, kDeltaCounters = 3;
constexpr int kMaxDeltaHeads = 256;
constexpr int kCounters = kDeltaCounters + kMaxDeltaHeads;

Status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(ErrorCode::kInternal, fmt::format("[cuda] {}: {}", what, cudaGetErrorString(e)));
}

#define SLUICE_CUDA_TRY(expr, what) SLUICE_RETURN_IF_ERROR(cuda_status((expr), (what)))

// Whether an MLP's three projections have the decode kernels' code-word layout, gate and up in one
// code width and shape.
bool vector_mlp(const kernels::WeightView& gate, const kernels::WeightView& up,
                const kernels::WeightView& down) {
    auto vec = [](const kernels::WeightView& w) {
        return cuda::vector_layout(cuda::dev_weight(w, nullptr, nullptr, nullptr));
    };
    return vec(gate) && vec(up) && vec(down) && gate.type == up.type && gate.group_size == up.group_size &&
           gate.scale_type == up.scale_type && gate.cols == up.cols;
}

size_t scale_bytes(kernels::ScaleType t) {
    return t == kernels::ScaleType::kF32 ? 4 : 2;
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
    bool moe() const { return plan->ffn == model::FfnKind::kMoe; }
    bool has_shared() const { return moe() && plan->moe.shared_expert; }
    float *input_norm = nullptr, *post_norm = nullptr;
    DevWeight q_proj, k_proj, v_proj, o_proj;
    float *q_norm = nullptr, *k_norm = nullptr;
    DevWeight in_qkvz, in_ba, in_qkv, in_z, in_b, in_a, out_proj;
    float *conv = nullptr, *neg_a = nullptr, *dt_bias = nullptr, *dnorm = nullptr;
    DevWeight router, shared_gate_proj, shared_up, shared_down, shared_gate;
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
    float* attn_split = nullptr;  // split decode attention partials (part of block)
    // Per layer (null where the layer has none): KV, and the recurrent buffers of each parity.
    std::vector<float*> k, v;
    std::vector<float*> conv[2], recurrent[2];
    std::vector<std::vector<float*>> snap_conv, snap_recurrent;  // [slot][layer]
    int parity = 0;  // conv[parity] / recurrent[parity] hold the committed state

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
        if (k[l] != nullptr) return b == model::kKeysBuffer ? k[l] : v[l];
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
            if (k[l] != nullptr) continue;
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
            if (k[l] != nullptr) continue;
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
    CudaBackend(std::shared_ptr<const model::Model> model, int device)
        : model_(std::move(model)), device_(device) {}
    ~CudaBackend() override {
        if (stream_ != nullptr) cudaStreamSynchronize(stream_);
        if (timed_steps_ > 0)
            log::info("[cuda] {} decode steps: {:.3f} ms of GPU time per step", timed_steps_,
                      timed_ms_ / static_cast<double>(timed_steps_));
        if (timing_[0] != nullptr) cudaEventDestroy(timing_[0]);
        if (timing_[1] != nullptr) cudaEventDestroy(timing_[1]);
        tier_.reset();  // releases its host views before the host memory is unregistered
        if (registered_ != nullptr) cudaHostUnregister(registered_);
        if (host_ids_ != nullptr) cudaFreeHost(host_ids_);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
        if (ws_block_ != nullptr) cudaFree(ws_block_);
        if (weights_block_ != nullptr) cudaFree(weights_block_);
        if (host_io_ != nullptr) cudaFreeHost(host_io_);
        if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
        if (host_summary_ != nullptr) cudaFreeHost(host_summary_);
    }

    Status init(const CudaBackendOptions& options);
    std::string name() const override { return name_; }
    uint64_t device_weight_bytes() const override { return weight_bytes_; }
    double measure_memory_gb_s() override;
    uint64_t decode_bytes_per_token() const override { return decode_bytes_per_token_; }
    GpuExpertCacheStats expert_tier_stats() const override;
    void reset_expert_tier_stats() override {
        if (tier_) tier_->reset_stats();
    }
    Expected<std::unique_ptr<SequenceState>> new_sequence(int64_t max_positions, int max_snapshots) override;
    Status forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                   bool all_logits) override;
    std::optional<LogitsSummary> logits_summary() const override;

 private:
    // Weights.
    Status upload_weights(Arena& arena);
    DevWeight put(Arena& arena, const kernels::WeightView& w, Status& st);
    float* put(Arena& arena, const std::vector<float>& v, Status& st);
    Status put_bytes(void* dst, const void* src, uint64_t bytes);

    // State and scratch.
    // Device bytes of one sequence (state_layout sizes, alignment, the split-attention partials);
    // without the snapshot slots when they live on the host (host_snapshots_).
    uint64_t state_bytes(int64_t max_positions, int max_snapshots) const;
    // The scratch buffers for n tokens with logit_rows rows of logits: placed into d_ (plan only
    // lists them), and their total size.
    using ScratchPlan = std::vector<std::pair<void**, uint64_t>>;
    ScratchPlan scratch_plan(int64_t n, int64_t logit_rows);
    uint64_t scratch_bytes(int64_t n, int64_t logit_rows);
    Status reserve_scratch(int64_t n, int64_t logit_rows);
    // The forward of n tokens (ids and first position already in host_io_) as segments between
    // the points where the tiered experts need the host (see enqueue_segment).
    int64_t enqueue_segment(DeviceState& ds, int64_t n, bool all_logits, int64_t after);
    // Whether layer l's decode predicts layer l + 1's experts for the prefetcher.
    bool predicts(int64_t l, int64_t n) const;
    Status tiered_experts(int64_t l, int64_t n);
    Status run_tiered(DeviceState& ds, int64_t n, bool all_logits);
    void linear(const DevWeight& w, const float* x, int64_t n, float* y);
    void swiglu_mlp(const DevWeight& gate, const DevWeight& up, const DevWeight& down, const float* x,
                    int64_t n, float* out);
    // in_norm (decode, nullable): the residual add and norm that produce the layer's input, run by
    // its first product (see cuda::NormIn); otherwise the input is d_.norm.
    void attention_layer(const DevLayer& L, DeviceState& ds, int64_t l, int64_t n,
                         const cuda::NormIn* in_norm);
    void deltanet_layer(const DevLayer& L, DeviceState& ds, int64_t l, int64_t n,
                        const cuda::NormIn* in_norm);
    void moe_layer(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm);
    // The decode NormIn that adds d_.mix to the residual stream (resid_) and norms it with `weight`
    // into d_.norm; the residual moves to the other of d_.x / d_.x2.
    cuda::NormIn residual_norm(const float* weight, float eps);
    bool fused_shared(const DevLayer& L, int64_t n) const;
    // Whether decode folds the shared expert into the routed down projection (moe_shared then skips).
    bool shared_folded(const DevLayer& L, int64_t n) const;
    // The fused router top-k of a matvec_multi launch (slice `which`) into ids / weights.
    cuda::MatvecTopk route_topk(const model::MoePlan& plan, int which, int32_t* ids, float* weights,
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

    std::shared_ptr<const model::Model> model_;
    int device_;
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
    bool tiered_ = false;
    // Tiered experts: VRAM is the expert cache's, so each sequence's snapshot slots live in
    // page-locked host memory (a snapshot of the 80B's DeltaNet state is 76 MB: 1.6 ms at 48 GB/s,
    // once per turn boundary); on the device they took 224 of 1256 expert slots of the 80B under a
    // 4 GB budget and 3.6% of its decode speed (bench/results/cuda/README.md, session 6).
    bool host_snapshots_ = false;
    std::unique_ptr<cuda::ExpertTier> tier_;
    void* registered_ = nullptr;  // page-locked host expert cache (cudaHostRegister)
    bool prefetch_ = true;
    std::unique_ptr<DevLayer[]> layers_;  // [n_layers]
    DevWeight embed_, lm_head_;
    float* final_norm_ = nullptr;

    // Scratch for batches of up to ws_tokens_ tokens.
    int64_t ws_tokens_ = 0, ws_logit_rows_ = 0;
    uint64_t ws_generation_ = 0;
    char* ws_block_ = nullptr;
    struct {
        float *x, *x2, *norm, *mix, *tmp, *q, *k, *v, *gate, *z, *beta, *g, *conv_in, *conv_out, *attn, *y;
        float *router, *topk_w, *pred_logits, *pred_w, *pair_gate, *pair_up, *pair_act, *pair_out, *sh_gate,
            *sh_up, *sh_act, *sh_out, *sg, *logits;
        int32_t *topk_ids, *pred_ids, *offsets, *order, *io;  // io: [0] first position, [1..] token ids
        float* summary_partial;
        cuda::DevLogitsSummary* summary;
        unsigned* counters;  // zeroed at allocation; the kernels that use them leave them 0
    } d_{};
    int32_t* host_ids_ = nullptr;   // pinned [ws_tokens_ · K + K]: routed and predicted ids (tiered)
    int32_t* host_io_ = nullptr;    // pinned mirror of d_.io, [ws_tokens_ + 1]
    float* host_logits_ = nullptr;  // pinned [V] for graph decode
    cuda::DevLogitsSummary* host_summary_ = nullptr;  // pinned: the last decode's logits summary
    bool summary_valid_ = false;                      // host_summary_ belongs to the last forward
    // Where the residual stream is while a forward is enqueued: d_.x, or d_.x2 after a fused
    // residual norm (which cannot update it in place; see cuda::NormIn).
    float* resid_ = nullptr;
    int major_ = 0;               // the device's compute capability
    cudaEvent_t timing_[2] = {};  // SLUICE_CUDA_TIMING: around each decode step
    int64_t timed_steps_ = 0;
    double timed_ms_ = 0.0;
};

DevWeight CudaBackend::put(Arena& arena, const kernels::WeightView& w, Status& st) {
    if (w.data == nullptr) return cuda::dev_weight(w, nullptr, nullptr, nullptr);
    const uint64_t data_bytes = static_cast<uint64_t>(w.rows) * w.row_bytes();
    void* data = arena.take(data_bytes);
    if (!arena.counting() && st.is_ok()) st = put_bytes(data, w.data, data_bytes);
    void *scales = nullptr, *biases = nullptr;
    if (w.quantized()) {
        const uint64_t sb = static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols / w.group_size) *
                            scale_bytes(w.scale_type);
        scales = arena.take(sb);
        biases = arena.take(sb);
        if (!arena.counting() && st.is_ok()) st = put_bytes(scales, w.scales, sb);
        if (!arena.counting() && st.is_ok()) st = put_bytes(biases, w.biases, sb);
    }
    return cuda::dev_weight(w, data, scales, biases);
}

float* CudaBackend::put(Arena& arena, const std::vector<float>& v, Status& st) {
    if (v.empty()) return nullptr;
    void* p = arena.take(v.size() * sizeof(float));
    if (!arena.counting() && st.is_ok()) st = put_bytes(p, v.data(), v.size() * sizeof(float));
    return static_cast<float*>(p);
}

Status CudaBackend::put_bytes(void* dst, const void* src, uint64_t bytes) {
    if (dst == nullptr) return error(ErrorCode::kInternal, "[cuda] weight arena overflow");
    return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copying weights to the GPU");
}

// Walks every tensor the forward reads, in a fixed order, counting (arena without base) or copying.
Status CudaBackend::upload_weights(Arena& arena) {
    const model::ModelWeights& W = model_->weights();
    const model::ModelConfig& c = model_->config();
    Status st;
    embed_bytes_ = arena.used();
    embed_ = put(arena, W.embed, st);
    embed_bytes_ = arena.used() - embed_bytes_;
    if (arena.counting()) {
        routed_bytes_ = 0;
        expert_slot_bytes_ = 0;
        experts_vector_ = true;
    }
    lm_head_ = W.lm_head.data == W.embed.data ? embed_ : put(arena, W.lm_head, st);
    final_norm_ = put(arena, W.final_norm, st);
    layers_ = std::make_unique<DevLayer[]>(W.layers.size());
    model::ExpertSource* source = model_->expert_source();
    std::vector<model::ExpertWeights> views;
    const size_t table_size = static_cast<size_t>(c.n_experts * 3);
    std::unique_ptr<DevWeight[]> table = std::make_unique<DevWeight[]>(table_size);
    for (size_t l = 0; l < W.layers.size(); ++l) {
        const model::LayerWeights& lw = W.layers[l];
        DevLayer& L = layers_[l];
        L.plan = &model_->plan().layers[l];
        L.input_norm = put(arena, lw.input_norm, st);
        L.post_norm = put(arena, lw.post_norm, st);
        if (L.attention()) {
            L.q_proj = put(arena, lw.attn.q_proj, st);
            L.k_proj = put(arena, lw.attn.k_proj, st);
            L.v_proj = put(arena, lw.attn.v_proj, st);
            L.o_proj = put(arena, lw.attn.o_proj, st);
            L.q_norm = put(arena, lw.attn.q_norm, st);
            L.k_norm = put(arena, lw.attn.k_norm, st);
        } else {
            const model::DeltaNetWeights& d = lw.linear;
            L.in_qkvz = put(arena, d.in_qkvz, st);
            L.in_ba = put(arena, d.in_ba, st);
            L.in_qkv = put(arena, d.in_qkv, st);
            L.in_z = put(arena, d.in_z, st);
            L.in_b = put(arena, d.in_b, st);
            L.in_a = put(arena, d.in_a, st);
            L.out_proj = put(arena, d.out_proj, st);
            L.conv = put(arena, d.conv, st);
            L.neg_a = put(arena, d.neg_a, st);
            L.dt_bias = put(arena, d.dt_bias, st);
            L.dnorm = put(arena, d.norm, st);
        }
        if (!L.moe()) {
            L.dense_gate = put(arena, lw.dense_mlp.gate, st);
            L.dense_up = put(arena, lw.dense_mlp.up, st);
            L.dense_down = put(arena, lw.dense_mlp.down, st);
            continue;
        }
        const model::MoeWeights& m = lw.moe_w;
        L.router = put(arena, m.router, st);
        if (arena.counting() && m.has_shared)
            experts_vector_ = experts_vector_ && vector_mlp(m.shared.gate, m.shared.up, m.shared.down);
        if (m.has_shared) {
            L.shared_gate_proj = put(arena, m.shared.gate, st);
            L.shared_up = put(arena, m.shared.up, st);
            L.shared_down = put(arena, m.shared.down, st);
            L.shared_gate = put(arena, m.shared_gate, st);
        }
        // Routed experts: through the expert source (resident views, or reads of a packed model).
        const int64_t E = c.n_experts;
        if (arena.counting()) {
            // Every expert of a layer has expert 0's shape: size them without reading the others.
            const int32_t first = 0;
            model::ExpertWeights e;
            SLUICE_RETURN_IF_ERROR(
                source->acquire(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1), &e));
            Arena one;
            put(one, e.gate, st);
            put(one, e.up, st);
            put(one, e.down, st);
            expert_slot_bytes_ = std::max(expert_slot_bytes_, cuda::ExpertTier::slot_bytes_for(e));
            experts_vector_ = experts_vector_ && vector_mlp(e.gate, e.up, e.down);
            source->release(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1));
            arena.take(one.used() * static_cast<uint64_t>(E));
            routed_bytes_ += one.used() * static_cast<uint64_t>(E);
        } else if (!tiered_) {
            for (size_t i = 0; i < table_size; ++i) table[i] = DevWeight{};
            const int64_t round = std::max<int64_t>(1, std::min<int64_t>(E, source->max_pinned()));
            std::vector<int32_t> ids;
            for (int64_t first = 0; first < E; first += round) {
                const int64_t count = std::min(round, E - first);
                ids.resize(static_cast<size_t>(count));
                for (int64_t i = 0; i < count; ++i)
                    ids[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
                views.resize(static_cast<size_t>(count));
                SLUICE_RETURN_IF_ERROR(source->acquire(static_cast<int64_t>(l), ids, views.data()));
                for (int64_t i = 0; i < count; ++i) {
                    const model::ExpertWeights& e = views[static_cast<size_t>(i)];
                    table[static_cast<size_t>((first + i) * 3 + 0)] = put(arena, e.gate, st);
                    table[static_cast<size_t>((first + i) * 3 + 1)] = put(arena, e.up, st);
                    table[static_cast<size_t>((first + i) * 3 + 2)] = put(arena, e.down, st);
                }
                source->release(static_cast<int64_t>(l), ids);
                SLUICE_RETURN_IF_ERROR(st);
            }
        }
        // The device table [E][3]: filled here when resident, by the expert tier when tiered.
        void* t = arena.take(table_size * sizeof(DevWeight));
        if (!arena.counting() && !tiered_ && st.is_ok())
            st = put_bytes(t, table.get(), table_size * sizeof(DevWeight));
        L.experts = static_cast<DevWeight*>(t);
    }
    return st;
}

uint64_t CudaBackend::state_bytes(int64_t max_positions, int max_snapshots) const {
    const model::ModelConfig& c = model_->config();
    const model::StateLayout& layout = model_->state_layout();
    const int on_device = host_snapshots_ ? 0 : max_snapshots;
    const uint64_t buffers = static_cast<uint64_t>(layout.layers.size()) * 2 * (3 + on_device);
    const uint64_t split_floats =
        static_cast<uint64_t>(cuda::attention_split_scratch_floats(c.n_heads, c.head_dim, max_positions));
    return layout.sequence_bytes(max_positions, on_device) + split_floats * 4 + (buffers + 1) * 256;
}

Status CudaBackend::init(const CudaBackendOptions& options) {
    const model::ModelConfig& c = model_->config();
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    cudaDeviceProp prop{};
    SLUICE_CUDA_TRY(cudaGetDeviceProperties(&prop, device_), "reading device properties");
    major_ = prop.major;
    size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free memory");
    name_ = fmt::format("cuda:{} ({}, {}, sm_{}{})", device_, prop.name, human_bytes(total_bytes), prop.major,
                        prop.minor);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        if (c.is_full_attention(l) && c.head_dim > 256)
            return error(ErrorCode::kUnsupported,
                         fmt::format("[cuda] head_dim {} (at most 256)", c.head_dim));
        if (!c.is_full_attention(l) && (c.linear_k_dim > 256 || c.conv_kernel > 8))
            return error(ErrorCode::kUnsupported,
                         fmt::format("[cuda] DeltaNet key dim {} (at most 256) / conv kernel {} (at most 8)",
                                     c.linear_k_dim, c.conv_kernel));
    }
    if (c.n_experts > 1024)
        return error(ErrorCode::kUnsupported, fmt::format("[cuda] {} experts (at most 1024)", c.n_experts));
    for (const model::LayerPlan& p : model_->plan().layers)
        if (p.ffn == model::FfnKind::kMoe && p.moe.shared_expert && !p.moe.shared_gate)
            return error(ErrorCode::kUnsupported, "[cuda] a shared expert without its sigmoid gate");

    Arena counter;
    SLUICE_RETURN_IF_ERROR(upload_weights(counter));
    weight_bytes_ = counter.used();
    {
        // Everything but the embedding table (one row per token) and the routed experts (k of E
        // per MoE layer) is read every decode token.
        const model::ModelWeights& W = model_->weights();
        const uint64_t embed = W.lm_head.data == W.embed.data ? 0 : embed_bytes_;
        decode_bytes_per_token_ = weight_bytes_ - embed - routed_bytes_ + W.embed.row_bytes() +
                                  (c.n_experts > 0 ? routed_bytes_ / static_cast<uint64_t>(c.n_experts) *
                                                         static_cast<uint64_t>(c.top_k)
                                                   : 0);
    }
    const uint64_t budget = options.gpu_memory_bytes > 0 ? options.gpu_memory_bytes : free_bytes / 10 * 9;
    const uint64_t state = state_bytes(options.context_tokens, static_cast<int>(kSessionCheckpoints));
    // Scratch for a 512-token prefill chunk, one row of logits; it grows on demand beyond that.
    const uint64_t scratch_estimate = scratch_bytes(512, 1);
    const uint64_t dense = weight_bytes_ - routed_bytes_;
    const bool capped = options.expert_cache_bytes > 0 && options.expert_cache_bytes < routed_bytes_;
    tiered_ = routed_bytes_ > 0 && (capped || weight_bytes_ + state + scratch_estimate > budget);
    prefetch_ = options.prefetch;
    int64_t n_slots = 0;
    if (tiered_) {
        host_snapshots_ = true;
        const uint64_t device_state =
            state_bytes(options.context_tokens, static_cast<int>(kSessionCheckpoints));
        const uint64_t tiered_fixed = dense + device_state + scratch_estimate;
        const uint64_t room =
            capped ? options.expert_cache_bytes : (budget > tiered_fixed ? budget - tiered_fixed : 0);
        n_slots = static_cast<int64_t>(room / expert_slot_bytes_);
        // One layer's routed experts plus the next layer's prefetch must fit at once.
        const int64_t need = 2 * std::max<int64_t>(c.top_k, 1);
        if (n_slots < need) {
            return error(
                ErrorCode::kOutOfMemory,
                fmt::format("[cuda] the GPU memory budget of {} leaves {} for routed experts (dense core "
                            "{}, one session's state {}, scratch about {}): {} expert slots of {}, at "
                            "least {} needed; raise --gpu-memory",
                            human_bytes(budget), human_bytes(room), human_bytes(dense),
                            human_bytes(device_state), human_bytes(scratch_estimate), n_slots,
                            human_bytes(expert_slot_bytes_), need));
        }
    }
    if (!tiered_ && weight_bytes_ + state + scratch_estimate > budget) {
        return error(ErrorCode::kOutOfMemory,
                     fmt::format("[cuda] the model does not fit the GPU memory budget of {}: weights {}, one "
                                 "session's state {}, scratch about {}",
                                 human_bytes(budget), human_bytes(weight_bytes_), human_bytes(state),
                                 human_bytes(scratch_estimate)));
    }
    const uint64_t arena_bytes = tiered_ ? dense : weight_bytes_;
    SLUICE_CUDA_TRY(cudaMalloc(&weights_block_, arena_bytes), "allocating the weight arena");
    Arena arena(weights_block_, arena_bytes);
    SLUICE_RETURN_IF_ERROR(upload_weights(arena));
    if (tiered_) {
        std::vector<DevWeight*> tables(static_cast<size_t>(c.n_layers), nullptr);
        for (int64_t l = 0; l < c.n_layers; ++l)
            if (layers_[static_cast<size_t>(l)].moe())
                tables[static_cast<size_t>(l)] = layers_[static_cast<size_t>(l)].experts;
        cuda::ExpertTier::Options to;
        to.n_slots = n_slots;
        to.slot_bytes = expert_slot_bytes_;
        to.n_experts = c.n_experts;
        to.prefetch = options.prefetch;
        to.policy = options.cache_policy;
        SLUICE_ASSIGN_OR_RETURN(tier_,
                                cuda::ExpertTier::create(model_->expert_source(), std::move(tables), to));
        // Page-lock the host expert cache so copies from it are DMA (and its O_DIRECT reads land in
        // pinned memory); a mapped checkpoint is copied from pageable memory.
        const std::span<uint8_t> host = model_->expert_source()->host_memory();
        if (!host.empty()) {
            const cudaError_t e = cudaHostRegister(host.data(), host.size(), cudaHostRegisterDefault);
            if (e == cudaSuccess) {
                registered_ = host.data();
            } else {
                cudaGetLastError();
                log::warn(
                    "[cuda] cannot page-lock the {} host expert cache ({}); copies to the GPU are staged",
                    human_bytes(host.size()), cudaGetErrorString(e));
            }
        }
        log::info(
            "[cuda] routed experts ({}) exceed the GPU budget: {} VRAM slots of {} ({}), fed from the host "
            "expert cache{}",
            human_bytes(routed_bytes_), n_slots, human_bytes(expert_slot_bytes_),
            human_bytes(static_cast<uint64_t>(n_slots) * expert_slot_bytes_),
            registered_ != nullptr ? " (page-locked)" : "");
    }
    SLUICE_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    SLUICE_CUDA_TRY(cudaMallocHost(&host_logits_, static_cast<size_t>(c.vocab) * sizeof(float)),
                    "allocating pinned logits");
    SLUICE_CUDA_TRY(cudaMallocHost(&host_summary_, sizeof(cuda::DevLogitsSummary)),
                    "allocating pinned summary");
    SLUICE_RETURN_IF_ERROR(reserve_scratch(256, 1));
    const CudaDiagnostics& diag = options.diagnostics;
    unfused_ = diag.unfused;
    launch_ =
        cuda::make_launch_context(device_, diag.matvec_split, !diag.simt_matmul, !diag.no_dependent_launch);
    // Diagnostic switches are logged when set (include/sluice/types.h).
    if (diag.unfused) log::info("[cuda] SLUICE_CUDA_UNFUSED=1: running the unfused kernel sequences");
    if (diag.simt_matmul) log::info("[cuda] SLUICE_CUDA_MATMUL=simt: prefill products on the SIMT kernel");
    if (launch_.forced_split > 0)
        log::info("[cuda] SLUICE_CUDA_MATVEC_SPLIT={}: decode products split columns over {} warps",
                  launch_.forced_split, launch_.forced_split);
    if (diag.no_dependent_launch)
        log::info("[cuda] SLUICE_CUDA_PDL=0: decode products wait for the kernel before them to finish");
    if (diag.timing) {
        SLUICE_CUDA_TRY(cudaEventCreate(&timing_[0]), "creating timing events");
        SLUICE_CUDA_TRY(cudaEventCreate(&timing_[1]), "creating timing events");
    }
    log::info("[cuda] {}: weights {} in GPU memory", name_, human_bytes(arena_bytes));
    return Status::ok();
}

CudaBackend::ScratchPlan CudaBackend::scratch_plan(int64_t n, int64_t logit_rows) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = std::max<int64_t>(c.n_experts, 1), K = std::max<int64_t>(c.top_k, 1);
    const int64_t I = std::max({c.expert_ffn, c.dense_ffn, int64_t{1}});
    const int64_t Is = std::max<int64_t>(c.shared_expert_ffn, 1);
    const int64_t q_rows = c.n_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
    const int64_t kd = c.linear_key_dim(), vd = c.linear_value_dim(), cd = c.conv_dim();
    const int64_t nv = std::max<int64_t>(c.linear_v_heads, 1);
    const int64_t qkvz = 2 * kd + 2 * vd;
    const int64_t wide = std::max({q_rows, qkvz, c.n_heads * c.head_dim, H, kd, vd, cd});
    ScratchPlan plan;
    auto add = [&](auto*& p, int64_t elems) {
        plan.emplace_back(reinterpret_cast<void**>(&p),
                          static_cast<uint64_t>(std::max<int64_t>(elems, 1)) * 4);
    };
    add(d_.x, n * H);
    add(d_.x2, n * H);
    add(d_.norm, n * H);
    add(d_.mix, n * H);
    add(d_.tmp, n * wide);
    add(d_.q, n * wide);
    add(d_.k, n * wide);
    add(d_.v, n * wide);
    add(d_.gate, n * std::max(wide, 2 * nv));
    add(d_.z, n * std::max<int64_t>(vd, 1));
    add(d_.beta, n * nv);
    add(d_.g, n * nv);
    add(d_.conv_in, n * std::max<int64_t>(cd, 1));
    add(d_.conv_out, n * std::max<int64_t>(cd, 1));
    add(d_.attn, n * wide);
    add(d_.y, n * wide);
    add(d_.router, n * E);
    add(d_.topk_w, n * K);
    add(d_.pred_logits, E);
    add(d_.pred_w, K);
    add(d_.pair_gate, n * K * I);
    add(d_.pair_up, n * K * I);
    add(d_.pair_act, std::max(n * K * I, K * I + Is));  // decode: the shared expert's act after the routed
    add(d_.pair_out, n * K * H);
    add(d_.sh_gate, n * Is);
    add(d_.sh_up, n * Is);
    add(d_.sh_act, n * Is);
    add(d_.sh_out, n * H);
    add(d_.sg, n);
    add(d_.logits, logit_rows * c.vocab);
    add(d_.topk_ids, n * K);
    add(d_.pred_ids, K);
    add(d_.offsets, E + 1);
    add(d_.order, n * K);
    add(d_.io, n + 1);
    add(d_.summary_partial, cuda::logits_summary_scratch_floats());
    add(d_.summary, 4);
    add(d_.counters, kCounters);
    return plan;
}

uint64_t CudaBackend::scratch_bytes(int64_t n, int64_t logit_rows) {
    uint64_t used = 0;
    for (const auto& [p, bytes] : scratch_plan(n, logit_rows)) used += (bytes + 255) / 256 * 256;
    return used;
}

Status CudaBackend::reserve_scratch(int64_t n, int64_t logit_rows) {
    if (n <= ws_tokens_ && logit_rows <= ws_logit_rows_) return Status::ok();
    n = std::max(n, ws_tokens_);
    logit_rows = std::max(logit_rows, ws_logit_rows_);
    const ScratchPlan plan = scratch_plan(n, logit_rows);
    uint64_t used = 0;
    for (const auto& [p, bytes] : plan) used += (bytes + 255) / 256 * 256;
    if (ws_block_ != nullptr) {
        SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "finishing work before growing scratch");
        cudaFree(ws_block_);
        ws_block_ = nullptr;
    }
    if (host_io_ != nullptr) cudaFreeHost(host_io_);
    host_io_ = nullptr;
    if (host_ids_ != nullptr) cudaFreeHost(host_ids_);
    host_ids_ = nullptr;
    SLUICE_CUDA_TRY(cudaMalloc(&ws_block_, used),
                    fmt::format("allocating {} of scratch for {} tokens", human_bytes(used), n).c_str());
    SLUICE_CUDA_TRY(cudaMallocHost(&host_io_, static_cast<size_t>(n + 1) * sizeof(int32_t)),
                    "allocating pinned token ids");
    const int64_t K = std::max<int64_t>(model_->config().top_k, 1);
    SLUICE_CUDA_TRY(cudaMallocHost(&host_ids_, static_cast<size_t>((n + 1) * K) * sizeof(int32_t)),
                    "allocating pinned expert ids");
    uint64_t at = 0;
    for (const auto& [p, bytes] : plan) {
        *p = ws_block_ + at;
        at += (bytes + 255) / 256 * 256;
    }
    SLUICE_CUDA_TRY(cudaMemsetAsync(d_.counters, 0, kCounters * sizeof(unsigned), stream_),
                    "zeroing counters");
    ws_tokens_ = n;
    ws_logit_rows_ = logit_rows;
    ++ws_generation_;  // captured graphs point at the old buffers
    return Status::ok();
}

Expected<std::unique_ptr<SequenceState>> CudaBackend::new_sequence(int64_t max_positions, int max_snapshots) {
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    const model::ModelConfig& c = model_->config();
    const model::StateLayout& layout = model_->state_layout();
    auto ds = std::make_unique<DeviceState>(layout, max_positions, max_snapshots, stream_);
    const int slots = ds->max_snapshots();
    const uint64_t bytes = state_bytes(max_positions, slots);
    SLUICE_CUDA_TRY(cudaMalloc(&ds->block, std::max<uint64_t>(bytes, 256)),
                    fmt::format("allocating {} of session state", human_bytes(bytes)).c_str());
    SLUICE_CUDA_TRY(cudaMemsetAsync(ds->block, 0, bytes, stream_), "zeroing session state");
    uint64_t at = 0;
    auto take = [&](uint64_t n) {
        float* p = reinterpret_cast<float*>(ds->block + at);
        at += (n + 255) / 256 * 256;
        return p;
    };
    ds->attn_split = take(
        static_cast<uint64_t>(cuda::attention_split_scratch_floats(c.n_heads, c.head_dim, max_positions)) *
        4);
    ds->snap_conv.resize(static_cast<size_t>(slots));
    ds->snap_recurrent.resize(static_cast<size_t>(slots));
    uint64_t host_at = 0, host_bytes = 0;
    if (host_snapshots_ && slots > 0) {
        host_bytes =
            (layout.recurrent_bytes() + layout.layers.size() * 2 * 256) * static_cast<uint64_t>(slots);
        SLUICE_CUDA_TRY(
            cudaMallocHost(&ds->host_block, host_bytes),
            fmt::format("allocating {} of page-locked state snapshots", human_bytes(host_bytes)).c_str());
    }
    auto take_snapshot = [&](uint64_t n) {
        if (ds->host_block == nullptr) return take(n);
        float* p = reinterpret_cast<float*>(ds->host_block + host_at);
        host_at += (n + 255) / 256 * 256;
        return p;
    };
    for (const model::LayerStateLayout& l : layout.layers) {
        const auto& b = l.buffers;
        const bool kv = b[0].per_position;
        ds->k.push_back(kv ? take(b[model::kKeysBuffer].bytes(max_positions)) : nullptr);
        ds->v.push_back(kv ? take(b[model::kValuesBuffer].bytes(max_positions)) : nullptr);
        for (int p = 0; p < 2; ++p) {
            ds->conv[p].push_back(kv ? nullptr : take(b[model::kConvBuffer].bytes(0)));
            ds->recurrent[p].push_back(kv ? nullptr : take(b[model::kRecurrentBuffer].bytes(0)));
        }
        for (int s = 0; s < slots; ++s) {
            ds->snap_conv[static_cast<size_t>(s)].push_back(
                kv ? nullptr : take_snapshot(b[model::kConvBuffer].bytes(0)));
            ds->snap_recurrent[static_cast<size_t>(s)].push_back(
                kv ? nullptr : take_snapshot(b[model::kRecurrentBuffer].bytes(0)));
        }
    }
    SLUICE_ASSERT(at <= bytes && host_at <= host_bytes);
    SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "zeroing session state");
    return std::unique_ptr<SequenceState>(std::move(ds));
}

void CudaBackend::linear(const DevWeight& w, const float* x, int64_t n, float* y) {
    if (n == 1) {
        cuda::matvec(launch_, w, x, y, stream_);
    } else {
        cuda::matmul(launch_, w, x, n, y, stream_);
    }
}

void CudaBackend::swiglu_mlp(const DevWeight& gate, const DevWeight& up, const DevWeight& down,
                             const float* x, int64_t n, float* out) {
    const int64_t I = gate.rows;
    linear(gate, x, n, d_.sh_gate);
    linear(up, x, n, d_.sh_up);
    cuda::swiglu(d_.sh_gate, d_.sh_up, n * I, d_.sh_act, stream_);
    linear(down, d_.sh_act, n, out);
}

void CudaBackend::attention_layer(const DevLayer& L, DeviceState& ds, int64_t l, int64_t n,
                                  const cuda::NormIn* in_norm) {
    const model::AttentionPlan& P = L.plan->attention;
    const int64_t nh = P.heads, nkv = P.kv_heads, hd = P.head_dim;
    const bool gated = P.output_gate;
    const int64_t q_rows = nh * hd * (gated ? 2 : 1);
    const int32_t* pos = d_.io;
    if (n == 1) {
        cuda::MatvecMulti m;
        m.add(L.q_proj, d_.tmp);
        m.add(L.k_proj, d_.k);
        m.add(L.v_proj, d_.v);
        if (in_norm != nullptr) m.norm = *in_norm;
        cuda::matvec_multi(launch_, m, d_.norm, stream_);
    } else {
        linear(L.q_proj, d_.norm, n, d_.tmp);  // [n, nh, (q | gate)]
        linear(L.k_proj, d_.norm, n, d_.k);    // [n, nkv, hd]
        linear(L.v_proj, d_.norm, n, d_.v);
    }
    float* k_cache = ds.k[static_cast<size_t>(l)];
    float* v_cache = ds.v[static_cast<size_t>(l)];
    if (!unfused_) {
        cuda::attention_prep(d_.tmp, d_.k, d_.v, L.q_norm, L.k_norm, n, nh, nkv, hd, P.rotary_dim, gated,
                             P.qk_norm_eps, pos, P.rope_theta, d_.q, d_.gate, k_cache, v_cache, stream_);
    } else {
        HeadLayout qh{n, nh, hd, q_rows, hd * (gated ? 2 : 1), nh * hd, hd};
        cuda::row_norm(d_.tmp, L.q_norm, qh, P.qk_norm_eps, false, 1.0f, d_.q, stream_);
        if (gated) cuda::copy_heads(d_.tmp + hd, qh, d_.gate, stream_);
        HeadLayout kh{n, nkv, hd, nkv * hd, hd, nkv * hd, hd};
        cuda::row_norm(d_.k, L.k_norm, kh, P.qk_norm_eps, false, 1.0f, d_.k, stream_);
        cuda::rope_neox(d_.q, n, nh, hd, P.rotary_dim, pos, P.rope_theta, stream_);
        cuda::rope_neox(d_.k, n, nkv, hd, P.rotary_dim, pos, P.rope_theta, stream_);
        cuda::write_rows_at(d_.k, n, nkv * hd, pos, k_cache, stream_);
        cuda::write_rows_at(d_.v, n, nkv * hd, pos, v_cache, stream_);
    }
    const bool gate_in_epilogue = gated && !unfused_;
    cuda::attention(d_.q, k_cache, v_cache, n, pos, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                    gate_in_epilogue ? d_.gate : nullptr, d_.attn, ds.attn_split, ds.capacity(), stream_);
    if (gated && !gate_in_epilogue) cuda::mul_sigmoid(d_.attn, d_.gate, n * nh * hd, stream_);
    linear(L.o_proj, d_.attn, n, d_.mix);
}

void CudaBackend::deltanet_layer(const DevLayer& L, DeviceState& ds, int64_t l, int64_t n,
                                 const cuda::NormIn* in_norm) {
    const model::DeltaNetPlan& P = L.plan->deltanet;
    const int64_t nk = P.k_heads, nv = P.v_heads, dk = P.k_dim, dv = P.v_dim;
    const int64_t r = nv / nk, kd = nk * dk, vd = nv * dv, cd = P.conv_dim();
    if (P.projection == model::DeltaProjection::kSplit) {
        if (n == 1) {
            cuda::MatvecMulti m;
            m.add(L.in_qkv, d_.conv_in);
            m.add(L.in_z, d_.z);
            m.add(L.in_b, d_.beta);
            m.add(L.in_a, d_.g);
            if (in_norm != nullptr) m.norm = *in_norm;
            cuda::matvec_multi(launch_, m, d_.norm, stream_);
        } else {
            linear(L.in_qkv, d_.norm, n, d_.conv_in);
            linear(L.in_z, d_.norm, n, d_.z);
            linear(L.in_b, d_.norm, n, d_.beta);
            linear(L.in_a, d_.norm, n, d_.g);
        }
    } else {
        if (n == 1) {
            cuda::MatvecMulti m;
            m.add(L.in_qkvz, d_.tmp);
            m.add(L.in_ba, d_.gate);
            if (in_norm != nullptr) m.norm = *in_norm;
            cuda::matvec_multi(launch_, m, d_.norm, stream_);
        } else {
            linear(L.in_qkvz, d_.norm, n, d_.tmp);
            linear(L.in_ba, d_.norm, n, d_.gate);
        }
        cuda::split_qkvz(d_.tmp, d_.gate, n, nk, dk, r, dv, d_.conv_in, d_.z, d_.beta, d_.g, stream_);
    }
    // The committed state (parity) is read and the new one written to the other copy; the backend
    // flips parity once the whole forward has succeeded.
    const auto li = static_cast<size_t>(l);
    const int in = ds.parity, out = ds.parity ^ 1;
    cuda::conv1d_silu(d_.conv_in, n, cd, P.conv_kernel, L.conv, ds.conv[in][li], ds.conv[out][li],
                      d_.conv_out, stream_);
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const float eps = P.l2_eps;
    const float* state = ds.recurrent[in][li];
    float* state_out = ds.recurrent[out][li];
    if (n == 1 && !unfused_ && nv <= kMaxDeltaHeads && cuda::deltanet_fused_fits(dk, dv)) {
        // Decode (prefill keeps the unfused sequence).
        cuda::deltanet_fused(d_.conv_out, d_.beta, d_.g, d_.z, L.neg_a, L.dt_bias, L.dnorm, n, nk, nv, dk, dv,
                             eps, q_scale, P.norm_eps, state, state_out, d_.attn,
                             d_.counters + kDeltaCounters, d_.y, stream_);
    } else {
        HeadLayout qk{n, nk, dk, cd, dk, kd, dk};
        cuda::row_norm(d_.conv_out, nullptr, qk, eps, true, q_scale, d_.q, stream_);
        cuda::row_norm(d_.conv_out + kd, nullptr, qk, eps, true, 1.0f, d_.k, stream_);
        cuda::copy_heads(d_.conv_out + 2 * kd, HeadLayout{n, 1, vd, cd, 0, vd, 0}, d_.v, stream_);
        cuda::deltanet_gates(d_.beta, d_.g, L.neg_a, L.dt_bias, n, nv, stream_);
        cuda::gated_delta(d_.q, d_.k, d_.v, d_.beta, d_.g, n, nk, nv, dk, dv, state, state_out, d_.attn,
                          stream_);
        cuda::rms_norm_gated(d_.attn, d_.z, L.dnorm, n * nv, dv, P.norm_eps, d_.y, stream_);
    }
    linear(L.out_proj, d_.y, n, d_.mix);
}

// Decode (n = 1) fuses: router and shared-expert input projections in one launch, the routed
// gate/up in one grouped launch, SwiGLU inside the down projections, the shared expert's sigmoid
// gate inside its down projection.
void CudaBackend::moe_layer(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm) {
    if (!L.moe()) {
        if (n == 1 && cuda::swiglu_fits(L.dense_gate.rows)) {
            cuda::MatvecMulti m;
            m.add(L.dense_gate, d_.sh_gate);
            m.add(L.dense_up, d_.sh_up);
            if (in_norm != nullptr) m.norm = *in_norm;
            cuda::matvec_multi(launch_, m, d_.norm, stream_);
            cuda::swiglu_down_matvec(L.dense_down, d_.sh_gate, d_.sh_up, nullptr, d_.mix, stream_);
        } else {
            if (in_norm != nullptr)
                cuda::add_rms_norm_to(in_norm->resid_in, in_norm->add, in_norm->weight, 1,
                                      model_->config().hidden, in_norm->eps, in_norm->resid_out, d_.norm,
                                      stream_);
            swiglu_mlp(L.dense_gate, L.dense_up, L.dense_down, d_.norm, n, d_.mix);
        }
        return;
    }
    moe_route(L, n, in_norm);
    moe_routed(L, d_.norm, d_.topk_ids, d_.topk_w, n, d_.mix, n == 1);
    moe_shared(L, n);
}

bool CudaBackend::fused_shared(const DevLayer& L, int64_t n) const {
    return n == 1 && L.has_shared() && cuda::swiglu_fits(L.shared_gate_proj.rows);
}

// Decode runs the router with the shared expert's input projections in one launch whose last block
// runs the top-k (unless SLUICE_CUDA_UNFUSED).
void CudaBackend::moe_route(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm) {
    if (n == 1) {
        cuda::MatvecMulti m;
        m.add(L.router, d_.router);
        if (shared_folded(L, n)) {
            m.add(L.shared_gate, d_.sg);  // its gate and up run with the routed experts'
        } else if (fused_shared(L, n)) {
            m.add(L.shared_gate_proj, d_.sh_gate);
            m.add(L.shared_up, d_.sh_up);
            m.add(L.shared_gate, d_.sg);
        }
        if (!unfused_) m.topk = route_topk(L.plan->moe, 0, d_.topk_ids, d_.topk_w, kRouteCounter);
        if (in_norm != nullptr) m.norm = *in_norm;
        cuda::matvec_multi(launch_, m, d_.norm, stream_);
        if (!unfused_) return;
    } else {
        linear(L.router, d_.norm, n, d_.router);
    }
    const model::MoePlan& P = L.plan->moe;
    cuda::router_topk(d_.router, n, P.experts, P.top_k, P.renormalize, d_.topk_ids, d_.topk_w, stream_);
}

cuda::MatvecTopk CudaBackend::route_topk(const model::MoePlan& plan, int which, int32_t* ids, float* weights,
                                         int counter) const {
    cuda::MatvecTopk t;
    t.which = which;
    t.n_experts = plan.experts;
    t.k = plan.top_k;
    t.renormalize = plan.renormalize;
    t.ids = ids;
    t.weights = weights;
    t.counter = d_.counters + counter;
    return t;
}

bool CudaBackend::shared_folded(const DevLayer& L, int64_t n) const {
    return !unfused_ && n == 1 && L.has_shared();
}

void CudaBackend::moe_routed(const DevLayer& L, const float* x, const int32_t* ids, const float* weights,
                             int64_t n, float* mix, bool decode) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = c.n_experts, K = c.top_k, I = c.expert_ffn;
    if (n == 1) {
        // Fused: gate, up and SwiGLU of the routed experts and the shared expert in one launch, then
        // one down launch over all of them. Unfused (SLUICE_CUDA_UNFUSED): gate and up, SwiGLU, the
        // routed down; the shared expert in moe_shared().
        const bool fold = decode && shared_folded(L, 1);
        cuda::SharedExpert shared;
        if (fold) {
            shared.gate = L.shared_gate_proj;
            shared.up = L.shared_up;
            shared.down = L.shared_down;
            shared.gate_logit = L.shared_gate.data != nullptr ? d_.sg : nullptr;
        }
        if (!unfused_) {
            cuda::moe_matvec_gate_up(launch_, L.experts, ids, K, I, H, x, nullptr, nullptr, d_.pair_act,
                                     fold ? &shared : nullptr, experts_vector_, stream_);
        } else {
            cuda::moe_matvec_gate_up(launch_, L.experts, ids, K, I, H, x, d_.pair_gate, d_.pair_up, nullptr,
                                     nullptr, experts_vector_, stream_);
            cuda::swiglu(d_.pair_gate, d_.pair_up, K * I, d_.pair_act, stream_);
        }
        cuda::moe_down_matvec(launch_, L.experts, ids, weights, K, H, I, d_.pair_act,
                              fold ? &shared : nullptr, experts_vector_, mix, stream_);
        return;
    }
    const int64_t pairs = n * K;
    cuda::moe_group(ids, pairs, E, d_.offsets, d_.order, stream_);
    cuda::moe_matmul(launch_, L.experts, 0, E, d_.offsets, d_.order, pairs, true, K, false, I, H, x,
                     d_.pair_gate, stream_);
    cuda::moe_matmul(launch_, L.experts, 1, E, d_.offsets, d_.order, pairs, true, K, false, I, H, x,
                     d_.pair_up, stream_);
    cuda::swiglu(d_.pair_gate, d_.pair_up, pairs * I, d_.pair_act, stream_);
    cuda::moe_matmul(launch_, L.experts, 2, E, d_.offsets, d_.order, pairs, false, 1, true, H, I, d_.pair_act,
                     d_.pair_out, stream_);
    cuda::moe_combine(d_.pair_out, weights, n, K, H, mix, stream_);
}

void CudaBackend::moe_shared(const DevLayer& L, int64_t n) {
    if (!L.has_shared() || shared_folded(L, n)) return;
    if (fused_shared(L, n)) {
        cuda::swiglu_down_matvec(L.shared_down, d_.sh_gate, d_.sh_up, d_.sg, d_.mix, stream_);
        return;
    }
    swiglu_mlp(L.shared_gate_proj, L.shared_up, L.shared_down, d_.norm, n, d_.sh_out);
    linear(L.shared_gate, d_.norm, n, d_.sg);
    cuda::add_gated_rows(d_.sh_out, d_.sg, n, model_->config().hidden, d_.mix, stream_);
}

cuda::NormIn CudaBackend::residual_norm(const float* weight, float eps) {
    cuda::NormIn nm;
    nm.resid_in = resid_;
    nm.add = d_.mix;
    nm.weight = weight;
    nm.eps = eps;
    nm.resid_out = resid_ == d_.x ? d_.x2 : d_.x;
    nm.norm_out = d_.norm;
    resid_ = nm.resid_out;
    return nm;
}

// The forward as segments that end where the host must act: after the routing of a MoE layer
// whose experts are tiered, or at the logits. Segment `after` (-1: the first) enqueues the rest of
// layer `after` (its routed experts for one token, the shared expert, the residual add), then whole
// layers up to and including the next tiered MoE layer's routing (ids copied to host_ids_, and for
// decode the next layer's predicted ids after them); it returns that layer, or n_layers once the
// logits are enqueued. With every expert resident the first segment is the whole forward.
int64_t CudaBackend::enqueue_segment(DeviceState& ds, int64_t n, bool all_logits, int64_t after) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = c.n_experts, K = c.top_k;
    // Decode runs each residual add and norm in the prologue of the product that reads it (in_norm).
    const bool fuse_norms = n == 1 && !unfused_;
    std::optional<cuda::NormIn> in_norm;
    auto residual = [&](int64_t l) {  // the block's residual add, fused with the next norm
        if (l + 1 < c.n_layers) {
            const float* weight = layers_[static_cast<size_t>(l + 1)].input_norm;
            const float eps = layers_[static_cast<size_t>(l + 1)].plan->norm_eps;
            if (fuse_norms) {
                in_norm = residual_norm(weight, eps);
            } else {
                cuda::add_rms_norm(resid_, d_.mix, weight, n, H, eps, d_.norm, stream_);
            }
        } else {
            cuda::axpy(1.0f, d_.mix, n * H, resid_, stream_);
        }
    };
    if (after < 0) {
        resid_ = d_.x;
        cudaMemcpyAsync(d_.io, host_io_, static_cast<size_t>(n + 1) * sizeof(int32_t), cudaMemcpyHostToDevice,
                        stream_);
        cuda::dequantize_rows(embed_, d_.io + 1, n, d_.x, stream_);
        const HeadLayout rows{n, 1, H, H, 0, H, 0};
        cuda::row_norm(d_.x, layers_[0].input_norm, rows, layers_[0].plan->norm_eps, false, 1.0f, d_.norm,
                       stream_);
    } else {
        const DevLayer& L = layers_[static_cast<size_t>(after)];
        if (n == 1)
            moe_routed(L, d_.norm, d_.topk_ids, d_.topk_w, 1, d_.mix, true);  // prefill: tiered_experts()
        moe_shared(L, n);
        residual(after);
    }
    for (int64_t l = after + 1; l < c.n_layers; ++l) {
        const DevLayer& L = layers_[static_cast<size_t>(l)];
        const cuda::NormIn* mixer_in = in_norm ? &*in_norm : nullptr;
        if (L.attention()) {
            attention_layer(L, ds, l, n, mixer_in);
        } else {
            deltanet_layer(L, ds, l, n, mixer_in);
        }
        in_norm.reset();
        std::optional<cuda::NormIn> post;
        if (fuse_norms) {
            post = residual_norm(L.post_norm, L.plan->norm_eps);
        } else {
            cuda::add_rms_norm(resid_, d_.mix, L.post_norm, n, H, L.plan->norm_eps, d_.norm, stream_);
        }
        const cuda::NormIn* moe_in = post ? &*post : nullptr;
        if (tiered_ && L.moe()) {
            moe_route(L, n, moe_in);
            if (predicts(l, n)) {
                // The next layer's post-attention norm and router on the residual stream after this
                // layer's mixer (resid_): the CPU backend's predictor (model/moe.cpp), on the GPU.
                const DevLayer& next = layers_[static_cast<size_t>(l + 1)];
                cuda::row_norm(resid_, next.post_norm, HeadLayout{1, 1, H, H, 0, H, 0}, next.plan->norm_eps,
                               false, 1.0f, d_.tmp, stream_);
                cuda::MatvecMulti m;
                m.add(next.router, d_.pred_logits);
                if (!unfused_)
                    m.topk = route_topk(next.plan->moe, 0, d_.pred_ids, d_.pred_w, kPredictCounter);
                cuda::matvec_multi(launch_, m, d_.tmp, stream_);
                if (unfused_)
                    cuda::router_topk(d_.pred_logits, 1, E, K, next.plan->moe.renormalize, d_.pred_ids,
                                      d_.pred_w, stream_);
                cudaMemcpyAsync(host_ids_ + n * K, d_.pred_ids, static_cast<size_t>(K) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_);
            }
            cudaMemcpyAsync(host_ids_, d_.topk_ids, static_cast<size_t>(n * K) * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream_);
            return l;
        }
        moe_layer(L, n, moe_in);
        residual(l);
    }
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t out_rows = n - first;
    cuda::row_norm(resid_ + first * H, final_norm_, HeadLayout{out_rows, 1, H, H, 0, H, 0},
                   model_->plan().final_norm_eps, false, 1.0f, d_.norm, stream_);
    linear(lm_head_, d_.norm, out_rows, d_.logits);
    if (n == 1) {  // decode: the greedy token and the softmax normaliser for the sampler
        cuda::logits_summary(d_.logits, c.vocab, d_.summary_partial, d_.counters + kSummaryCounter,
                             d_.summary, stream_);
        cudaMemcpyAsync(host_summary_, d_.summary, sizeof(cuda::DevLogitsSummary), cudaMemcpyDeviceToHost,
                        stream_);
    }
    return c.n_layers;
}

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
    if (n == 1) {
        SLUICE_RETURN_IF_ERROR(
            tier_->use(l, std::span<const int32_t>(host_ids_, static_cast<size_t>(K)), stream_));
        if (predicts(l, n))
            tier_->prefetch(l + 1, std::span<const int32_t>(host_ids_ + K, static_cast<size_t>(K)));
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
        for (int64_t j = 0; j < K; ++j) fresh += seen[static_cast<size_t>(host_ids_[t * K + j])] ? 0 : 1;
        if (static_cast<int64_t>(uni.size()) + fresh > cap) SLUICE_RETURN_IF_ERROR(flush(t));
        for (int64_t j = 0; j < K; ++j) {
            const int32_t e = host_ids_[t * K + j];
            if (!seen[static_cast<size_t>(e)]) {
                seen[static_cast<size_t>(e)] = 1;
                uni.push_back(e);
            }
        }
    }
    return flush(n);
}

// The tiered forward: segments with the expert tier between them. Decode captures each segment as
// a graph once per state (and scratch generation) and replays them.
Status CudaBackend::run_tiered(DeviceState& ds, int64_t n, bool all_logits) {
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
            next = enqueue_segment(ds, n, all_logits, at);
        } else if (seg < segments.size()) {
            SLUICE_CUDA_TRY(cudaGraphLaunch(segments[seg].exec, stream_), "launching a decode segment");
            next = segments[seg].next;
        } else {
            cudaGraph_t graph = nullptr;
            SLUICE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                            "capturing decode");
            next = enqueue_segment(ds, 1, false, at);
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

Status CudaBackend::forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                            bool all_logits) {
    const model::ModelConfig& c = model_->config();
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return Status::ok();
    auto* ds = dynamic_cast<DeviceState*>(&seq);
    if (ds == nullptr)
        return error(ErrorCode::kInvalidArgument, "[cuda] the sequence was made by another backend");
    if (seq.position() + n > seq.capacity()) {
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[model] context full: {} + {} tokens exceed the {}-token context",
                                 seq.position(), n, seq.capacity()));
    }
    for (int32_t id : tokens)
        if (id < 0 || id >= c.vocab)
            return error(ErrorCode::kInvalidArgument,
                         fmt::format("[model] token id {} is outside the vocabulary [0, {})", id, c.vocab));
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    summary_valid_ = false;
    const int64_t logit_rows = all_logits ? n : 1;
    SLUICE_RETURN_IF_ERROR(reserve_scratch(n, logit_rows));
    host_io_[0] = static_cast<int32_t>(seq.position());
    std::memcpy(host_io_ + 1, tokens.data(), tokens.size() * sizeof(int32_t));
    const int64_t V = c.vocab;
    if (n == 1 && !tiered_) {
        // Decode: replay this state's graph for its parity (captured on first use or after scratch moved).
        const int p = ds->parity;
        if (ds->graph[p] == nullptr || ds->graph_generation[p] != ws_generation_) {
            if (ds->graph[p] != nullptr) cudaGraphExecDestroy(ds->graph[p]);
            ds->graph[p] = nullptr;
            cudaGraph_t graph = nullptr;
            SLUICE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                            "capturing decode");
            enqueue_segment(*ds, 1, false, -1);  // resident: the whole forward
            cudaMemcpyAsync(host_logits_, d_.logits, static_cast<size_t>(V) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_);
            SLUICE_CUDA_TRY(cudaStreamEndCapture(stream_, &graph), "capturing decode");
            const cudaError_t e = cudaGraphInstantiate(&ds->graph[p], graph, 0);
            cudaGraphDestroy(graph);
            SLUICE_CUDA_TRY(e, "instantiating the decode graph");
            ds->graph_generation[p] = ws_generation_;
        }
        if (timing_[0] != nullptr) cudaEventRecord(timing_[0], stream_);
        SLUICE_CUDA_TRY(cudaGraphLaunch(ds->graph[p], stream_), "launching the decode graph");
        if (timing_[0] != nullptr) cudaEventRecord(timing_[1], stream_);
        SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "decode step");
        if (timing_[0] != nullptr) {
            float ms = 0.0f;
            cudaEventElapsedTime(&ms, timing_[0], timing_[1]);
            timed_ms_ += ms;
            ++timed_steps_;
        }
        if (logits != nullptr) std::memcpy(logits, host_logits_, static_cast<size_t>(V) * sizeof(float));
    } else {
        Status st;
        if (tiered_) {
            st = run_tiered(*ds, n, all_logits);
        } else {
            enqueue_segment(*ds, n, all_logits, -1);
        }
        if (st.is_ok()) st = cuda_status(cudaGetLastError(), "launching the forward");
        if (st.is_ok()) st = cuda_status(cudaStreamSynchronize(stream_), "forward");
        if (tier_) {
            const Status finished = tier_->finish();
            if (st.is_ok()) st = finished;
        }
        if (!st.is_ok()) {
            // A forward that fails part-way (an expert read error) wrote only the uncommitted copy
            // of the recurrent state and KV rows past the position: the sequence is as it was.
            cudaStreamSynchronize(stream_);
            return st;
        }
        if (logits != nullptr && tiered_ && n == 1) {
            std::memcpy(logits, host_logits_,
                        static_cast<size_t>(V) * sizeof(float));  // the last segment's copy
        } else if (logits != nullptr) {
            SLUICE_CUDA_TRY(cudaMemcpy(logits, d_.logits, static_cast<size_t>(logit_rows * V) * sizeof(float),
                                       cudaMemcpyDeviceToHost),
                            "copying logits");
        }
    }
    ds->commit(n);
    summary_valid_ = n == 1;  // the decode forms (graphs) computed the summary
    return Status::ok();
}

std::optional<LogitsSummary> CudaBackend::logits_summary() const {
    if (!summary_valid_) return std::nullopt;
    return LogitsSummary{host_summary_->argmax, host_summary_->max, host_summary_->sum_exp};
}

GpuExpertCacheStats CudaBackend::expert_tier_stats() const {
    if (tier_) return tier_->stats();
    GpuExpertCacheStats out;
    out.slot_bytes = expert_slot_bytes_;
    return out;
}

double CudaBackend::measure_memory_gb_s() {
    constexpr size_t kBytes = 1ull << 30;
    char* buf = nullptr;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMalloc(&buf, 2 * kBytes) != cudaSuccess) return 0.0;
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaMemcpyAsync(buf + kBytes, buf, kBytes, cudaMemcpyDeviceToDevice, stream_);  // warm-up
    constexpr int kReps = 10;
    cudaEventRecord(start, stream_);
    for (int i = 0; i < kReps; ++i)
        cudaMemcpyAsync(buf + kBytes, buf, kBytes, cudaMemcpyDeviceToDevice, stream_);
    cudaEventRecord(stop, stream_);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(buf);
    return ms > 0 ? 2.0 * kBytes * kReps / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace

Expected<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                     const CudaBackendOptions& options) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return error(ErrorCode::kUnsupported,
                     fmt::format("[cuda] no CUDA device found ({})",
                                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none"));
    if (options.device_index >= count)
        return error(
            ErrorCode::kInvalidArgument,
            fmt::format("[cuda] no device cuda:{} (this machine has {})", options.device_index, count));
    auto backend = std::make_unique<CudaBackend>(std::move(model), options.device_index);
    SLUICE_RETURN_IF_ERROR(backend->init(options));
    return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sluice::runtime
