// The CUDA backend's scratch and sequence state (DeviceState: KV, the DeltaNet state twice, snapshot slots).
#include "runtime/cuda/backend_impl.h"

namespace sluice::runtime::cuda_impl {

CudaBackend::ScratchPlan CudaBackend::scratch_plan(int64_t n, int64_t logit_rows) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = std::max<int64_t>(c.n_experts, 1), K = std::max<int64_t>(c.top_k, 1);
    // pair_*: routed experts' rows (I); sh_*: the shared expert's rows and a dense layer's MLP
    // (swiglu_mlp), so intermediate_size counts only where a layer is dense (configs of MoE models
    // carry an unused one: 5120 in Qwen3-Next-80B, which would size every buffer tenfold).
    int64_t dense_ffn = 0;
    for (int64_t l = 0; l < c.n_layers; ++l)
        if (!c.is_moe_layer(l)) dense_ffn = c.dense_ffn;
    const int64_t I = std::max<int64_t>(c.expert_ffn, 1);
    const int64_t Is = std::max({c.shared_expert_ffn, dense_ffn, int64_t{1}});
    const int64_t q_rows = c.n_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
    const int64_t kd = c.linear_key_dim(), vd = c.linear_value_dim(), cd = c.conv_dim();
    const int64_t nv = std::max<int64_t>(c.linear_v_heads, 1);
    const int64_t qkvz = 2 * kd + 2 * vd;
    // 2H: the MTP head's [embedding; hidden] rows before its fc.
    // Latent attention: the absorbed queries [heads, kv_lora + rope] per token.
    const int64_t latent = c.latent_attention() ? c.n_heads * c.kv_cache_dim() : 0;
    const int64_t wide = std::max({q_rows, qkvz, c.n_heads * c.head_dim, 2 * H, kd, vd, cd, latent});
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
    add(d_.io, 2 * n + 1);  // up to one first position per row, then the ids
    add(d_.summary_partial, cuda::logits_summary_scratch_floats());
    add(d_.summary, 4);
    add(d_.counters, kCounters);
    // The int8 products' quantised inputs: every product's rows × inputs (the routed down
    // projections' n·K rows of I the largest besides the n rows of the widest input).
    const int64_t xq = std::max(n * std::max({wide, Is, H}), n * K * I);
    add(d_.xq, (xq + 3) / 4);
    add(d_.xq_d, cuda::int8_scale_elements(xq));
    add(d_.xq_dsum, cuda::int8_scale_elements(xq));
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
    SLUICE_CUDA_TRY(cudaMallocHost(&host_io_, static_cast<size_t>(2 * n + 1) * sizeof(int32_t)),
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
    xq_capacity_ = 0;
    for (const auto& [p, bytes] : plan)
        if (p == reinterpret_cast<void**>(&d_.xq)) xq_capacity_ = static_cast<int64_t>(bytes);
    ++ws_generation_;  // captured graphs point at the old buffers
    return Status::ok();
}

Expected<std::unique_ptr<SequenceState>> CudaBackend::new_sequence(int64_t max_positions, int max_snapshots,
                                                                   const model::StateLayout* seq_layout) {
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    const model::ModelConfig& c = model_->config();
    const model::StateLayout& layout = seq_layout != nullptr ? *seq_layout : model_->state_layout();
    if (c.latent_attention() && layout.kv != kernels::KvType::kF32 && layout.kv != kernels::KvType::kF16)
        return error(
            ErrorCode::kUnsupported,
            fmt::format("[cuda] a {} KV cache for latent attention (deepseek_v3) has no CUDA kernels "
                        "yet: --kv-bits 32 or 16",
                        kernels::kv_type_name(layout.kv)));
    auto ds = std::make_unique<DeviceState>(layout, max_positions, max_snapshots, stream_);
    ds->id = ++sequence_ids_;
    const int slots = ds->max_snapshots();
    const uint64_t bytes = state_bytes(max_positions, slots, layout);
    SLUICE_CUDA_TRY(cudaMalloc(&ds->block, std::max<uint64_t>(bytes, 256)),
                    fmt::format("allocating {} of session state", human_bytes(bytes)).c_str());
    SLUICE_CUDA_TRY(cudaMemsetAsync(ds->block, 0, bytes, stream_), "zeroing session state");
    uint64_t at = 0;
    auto take = [&](uint64_t n) {
        float* p = reinterpret_cast<float*>(ds->block + at);
        at += (n + 255) / 256 * 256;
        return p;
    };
    ds->attn_split_floats = split_scratch_floats(max_positions);
    ds->attn_split = take(static_cast<uint64_t>(ds->attn_split_floats) * 4);
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
        if (b.empty()) {  // a layer this state does not hold (Model::mtp_layout)
            for (auto* v : {&ds->k, &ds->v, &ds->ring, &ds->conv[0], &ds->conv[1], &ds->recurrent[0],
                            &ds->recurrent[1]})
                v->push_back(nullptr);
            for (int s = 0; s < slots; ++s) {
                ds->snap_conv[static_cast<size_t>(s)].push_back(nullptr);
                ds->snap_recurrent[static_cast<size_t>(s)].push_back(nullptr);
            }
            continue;
        }
        const bool kv = b[0].per_position;
        ds->k.push_back(kv ? take(b[model::kKeysBuffer].bytes(max_positions)) : nullptr);
        ds->v.push_back(kv ? take(b[model::kValuesBuffer].bytes(max_positions)) : nullptr);
        const bool ring = kv && b.size() > model::kRecentBuffer;
        ds->ring.push_back(ring ? take(b[model::kRecentBuffer].bytes(0)) : nullptr);
        if (ring) {  // no row held yet: every tag -1 (the K and V rows before the tags stay zero)
            const uint64_t tags = static_cast<uint64_t>(layout.kv_ring_slots) * sizeof(int64_t);
            SLUICE_CUDA_TRY(cudaMemsetAsync(reinterpret_cast<char*>(ds->ring.back()) +
                                                b[model::kRecentBuffer].bytes(0) - tags,
                                            0xff, tags, stream_),
                            "clearing the KV window's tags");
        }
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

Expected<std::unique_ptr<SequenceState>> CudaBackend::new_mtp_sequence(int64_t max_positions,
                                                                       const model::StateLayout* layout) {
    if (!mtp_uploaded_)
        return error(ErrorCode::kUnsupported,
                     model_->has_mtp()
                         ? "[cuda] the multi-token-prediction head runs with resident experts only "
                           "for now (these are tiered)"
                         : "[cuda] " + model_->dir() + " has no multi-token-prediction head");
    const model::StateLayout mtp = model_->mtp_layout(layout != nullptr ? *layout : model_->state_layout());
    return new_sequence(max_positions, 0, &mtp);
}

}  // namespace sluice::runtime::cuda_impl
