// The CUDA backend: init (budget, tiering, launch context), the forward's entry with the resident
// decode graphs, statistics; make_cuda_backend. The design is described in backend_impl.h.
#include "kernels/cuda/latent_attention.h"
#include "runtime/cuda/backend_impl.h"

namespace sluice::runtime::cuda_impl {

int64_t CudaBackend::split_scratch_floats(int64_t max_positions) const {
    const model::ModelConfig& c = model_->config();
    if (c.latent_attention())
        return cuda::latent_split_scratch_floats(
            cuda::MlaShape{c.n_heads, c.qk_nope_dim, c.qk_rope_dim, c.v_head_dim, c.kv_lora_rank, c.head_dim,
                           c.kv_cache_dim()},
            max_positions);
    return cuda::attention_split_scratch_floats(c.n_heads, c.head_dim, max_positions);
}

uint64_t CudaBackend::state_bytes(int64_t max_positions, int max_snapshots,
                                  const model::StateLayout& layout) const {
    const int on_device = host_snapshots_ ? 0 : max_snapshots;
    const uint64_t buffers = static_cast<uint64_t>(layout.layers.size()) * 2 * (3 + on_device);
    const uint64_t split_floats = static_cast<uint64_t>(split_scratch_floats(max_positions));
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
    if (c.latent_attention()) {
        const cuda::MlaShape s{c.n_heads,      c.qk_nope_dim, c.qk_rope_dim,   c.v_head_dim,
                               c.kv_lora_rank, c.head_dim,    c.kv_cache_dim()};
        if (const char* bad = cuda::latent_attention_shape_error(s))
            return error(ErrorCode::kUnsupported, fmt::format("[cuda] latent attention: {}", bad));
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
        if (c.is_full_attention(l) && !c.latent_attention() && c.head_dim > 256)
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
        if (p.ffn == model::FfnKind::kMoe && p.moe.groups > cuda::kMaxRouterGroups)
            return error(ErrorCode::kUnsupported,
                         fmt::format("[cuda] a router of {} expert groups (at most {})", p.moe.groups,
                                     cuda::kMaxRouterGroups));

    Arena counter;
    SLUICE_RETURN_IF_ERROR(upload_weights(counter));
    weight_bytes_ = counter.used();  // with the routed experts' raw bytes (ExpertKernels)
    uint64_t budget = options.gpu_memory_bytes > 0 ? options.gpu_memory_bytes : free_bytes / 10 * 9;
    if (!shard_.whole()) {
        // A rank of an expert-parallel group: the zero block its null experts point into, outside the
        // arena and out of the budget.
        SLUICE_CUDA_TRY(cudaMalloc(&null_block_, null_bytes_), "allocating the null expert");
        SLUICE_CUDA_TRY(cudaMemset(null_block_, 0, null_bytes_), "zeroing the null expert");
        budget = budget > null_bytes_ ? budget - null_bytes_ : 0;
        name_ += fmt::format(" rank {} of {}", shard_.rank, shard_.ranks);
    }
    const uint64_t state =
        state_bytes(options.context_tokens, static_cast<int>(kSessionCheckpoints), model_->state_layout());
    // Scratch for a 512-token prefill chunk, one row of logits; it grows on demand beyond that.
    const uint64_t scratch_estimate = scratch_bytes(512, 1);
    {
        // GGUF Q4_0 / Q4_1 / Q8_0 experts go up as MLX affine rows when the model stays resident so
        // (the expert tier copies the host's bytes as they are, and its kernels take those).
        const uint64_t with_mlx = weight_bytes_ - experts_raw_.routed_bytes + experts_mlx_.routed_bytes;
        const bool capped =
            options.expert_cache_bytes > 0 && options.expert_cache_bytes < experts_mlx_.routed_bytes;
        experts_as_mlx_ = experts_raw_.routed_bytes > 0 && experts_mlx_.convertible && !capped &&
                          with_mlx + state + scratch_estimate <= budget;
        const ExpertKernels& k = experts_as_mlx_ ? experts_mlx_ : experts_raw_;
        if (experts_as_mlx_) {
            weight_bytes_ = with_mlx;
            routed_bytes_ = experts_mlx_.routed_bytes;
        }
        experts_vector_ = k.vector;
        experts_int8_bits_ = k.int8_bits;
        experts_int8_group_ = k.int8_group;
    }
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
    const uint64_t dense = weight_bytes_ - routed_bytes_;
    const bool capped = options.expert_cache_bytes > 0 && options.expert_cache_bytes < routed_bytes_;
    tiered_ = routed_bytes_ > 0 && (capped || weight_bytes_ + state + scratch_estimate > budget);
    prefetch_ = options.prefetch;
    int64_t n_slots = 0;
    if (tiered_) {
        host_snapshots_ = true;
        const uint64_t device_state = state_bytes(
            options.context_tokens, static_cast<int>(kSessionCheckpoints), model_->state_layout());
        const uint64_t tiered_fixed = dense + device_state + scratch_estimate;
        const uint64_t room =
            capped ? options.expert_cache_bytes : (budget > tiered_fixed ? budget - tiered_fixed : 0);
        n_slots = static_cast<int64_t>(room / expert_slot_bytes_);
        // One layer's routed experts plus the next layer's prefetch must fit at once (of a rank's shard, at
        // most the experts it holds).
        const int64_t need =
            2 * std::max<int64_t>(std::min<int64_t>(c.top_k, shard_.owned_experts(c.n_experts)), 1);
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
        // Page-lock the host expert cache's slots in use, so copies from them are DMA, slot by slot
        // as they fill and until memory pressure retires them (PinnedHostSlots); a mapped
        // checkpoint is copied from pageable memory.
        // The ranks of an expert-parallel group share the host expert cache: rank 0 page-locks its slots
        // (portably: for every device) and the others copy from them.
        host_slots_ = std::make_unique<cuda::PinnedHostSlots>(device_);
        if (shard_.rank != 0 || !model_->expert_source()->set_slot_observer(host_slots_.get()))
            host_slots_.reset();
        log::info(
            "[cuda] routed experts ({}) exceed the GPU budget: {} VRAM slots of {} ({}), fed from the host "
            "expert cache{}",
            human_bytes(routed_bytes_), n_slots, human_bytes(expert_slot_bytes_),
            human_bytes(static_cast<uint64_t>(n_slots) * expert_slot_bytes_),
            host_slots_ ? " (its slots page-locked as they fill)" : "");
    }
    SLUICE_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    SLUICE_CUDA_TRY(cudaMallocHost(&host_logits_, static_cast<size_t>(kMatvecRows * c.vocab) * sizeof(float)),
                    "allocating pinned logits");
    SLUICE_CUDA_TRY(cudaMallocHost(&host_summary_, sizeof(cuda::DevLogitsSummary)),
                    "allocating pinned summary");
    SLUICE_RETURN_IF_ERROR(reserve_scratch(256, 1));
    const CudaDiagnostics& diag = options.diagnostics;
    unfused_ = diag.unfused;
    int8_prefill_ = options.int8_prefill && !diag.simt_matmul;
    flash_attention_ = options.int8_prefill;
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
    if (int8_prefill_ && !tiered_ && !experts_as_mlx_ && routed_bytes_ > 0 && experts_raw_.mxfp4) {
        // MXFP4 experts on the int8 prefill kernels: a scratch of up to 512 MB, within what the budget
        // leaves, for a group of converted experts (gpt-oss-120b: 24 of 128 a pass); without it the
        // prefill stays on the f32 products.
        const int64_t slab = cuda::mxfp4_q8_slab_bytes(c.hidden, c.expert_ffn);
        const int64_t per_expert = slab + static_cast<int64_t>(3 * sizeof(DevWeight));
        const uint64_t used = weight_bytes_ + state + scratch_estimate;
        const uint64_t room = std::min<uint64_t>(uint64_t{512} << 20, budget > used ? budget - used : 0);
        const int64_t group = std::min<int64_t>(static_cast<int64_t>(room) / per_expert, c.n_experts);
        const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(group, 0) * per_expert);
        if (group > 0 && cudaMalloc(&mxfp4_q8_block_, bytes) == cudaSuccess) {
            auto* slabs = static_cast<uint8_t*>(mxfp4_q8_block_);
            const std::vector<DevWeight> table =
                cuda::mxfp4_q8_table(slabs, group, slab, c.hidden, c.expert_ffn);
            auto* dev_table = reinterpret_cast<DevWeight*>(slabs + group * slab);
            SLUICE_CUDA_TRY(
                cudaMemcpy(dev_table, table.data(), table.size() * sizeof(DevWeight), cudaMemcpyHostToDevice),
                "copying the MXFP4 scratch table");
            mxfp4_q8_ = {group, slab, slabs, dev_table};
            log::info("[cuda] MXFP4 experts prefill on int8 tensor cores, {} at a time ({} of scratch)",
                      group, human_bytes(bytes));
        } else {
            cudaGetLastError();  // clear a failed allocation's error: the f32 products remain
            mxfp4_q8_block_ = nullptr;
            log::info(
                "[cuda] no room for an MXFP4 expert's conversion scratch ({}): MXFP4 experts prefill in f32",
                human_bytes(static_cast<uint64_t>(per_expert)));
        }
    }
    log::info("[cuda] {}: weights {} in GPU memory", name_, human_bytes(arena_bytes));
    return Status::ok();
}

Status check_tokens(const SequenceState& seq, std::span<const int32_t> tokens, int64_t vocab) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (seq.position() + n > seq.capacity()) {
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[model] context full: {} + {} tokens exceed the {}-token context",
                                 seq.position(), n, seq.capacity()));
    }
    for (int32_t id : tokens)
        if (id < 0 || id >= vocab)
            return error(ErrorCode::kInvalidArgument,
                         fmt::format("[model] token id {} is outside the vocabulary [0, {})", id, vocab));
    return Status::ok();
}

Expected<DeviceState*> CudaBackend::check_step(SequenceState* seq, std::span<const int32_t> tokens) const {
    auto* ds = dynamic_cast<DeviceState*>(seq);
    if (ds == nullptr)
        return error(ErrorCode::kInvalidArgument, "[cuda] the sequence was made by another backend");
    SLUICE_RETURN_IF_ERROR(check_tokens(*seq, tokens, model_->config().vocab));
    return ds;
}

Status CudaBackend::forward_rows(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                                 bool all_logits, float* hidden) {
    const model::ModelConfig& c = model_->config();
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return Status::ok();
    SLUICE_ASSIGN_OR_RETURN(DeviceState * ds, check_step(&seq, tokens));
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    summary_valid_ = false;
    const int64_t logit_rows = all_logits ? n : 1;
    SLUICE_RETURN_IF_ERROR(reserve_scratch(n, logit_rows));
    parts_.assign(1, Part{ds, 0, n, logit_rows});
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
            enqueue_segment(1, -1);  // resident: the whole forward
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
        // The graph's one row: d_.norm holds its final-normed hidden state (lm_head's input).
        if (hidden != nullptr)
            SLUICE_CUDA_TRY(cudaMemcpy(hidden, d_.norm, static_cast<size_t>(c.hidden) * sizeof(float),
                                       cudaMemcpyDeviceToHost),
                            "copying hidden rows");
    } else if (!tiered_ && n <= kMatvecRows) {
        // A few rows (a speculative verification): the decode kernels over every row, as a graph.
        SLUICE_RETURN_IF_ERROR(run_rows_graph(n, logit_rows));
        if (logits != nullptr)
            std::memcpy(logits, host_logits_, static_cast<size_t>(logit_rows * V) * sizeof(float));
        if (hidden != nullptr) SLUICE_RETURN_IF_ERROR(copy_hidden(0, n, hidden));
    } else {
        SLUICE_RETURN_IF_ERROR(run_enqueued(*ds, n));
        if (logits != nullptr && tiered_ && n == 1) {
            std::memcpy(logits, host_logits_,
                        static_cast<size_t>(V) * sizeof(float));  // the last segment's copy
        } else if (logits != nullptr) {
            SLUICE_CUDA_TRY(cudaMemcpy(logits, d_.logits, static_cast<size_t>(logit_rows * V) * sizeof(float),
                                       cudaMemcpyDeviceToHost),
                            "copying logits");
        }
        if (hidden != nullptr) SLUICE_RETURN_IF_ERROR(copy_hidden(0, n, hidden));
    }
    ds->commit(n);
    summary_valid_ = n == 1;  // the decode forms (graphs) computed the summary
    return Status::ok();
}

// The forward of parts_ without a decode graph: enqueued whole (resident) or segment by segment
// around the expert tier, then waited for.
Status CudaBackend::run_enqueued(DeviceState& first, int64_t n) {
    Status st;
    if (tiered_) {
        st = run_tiered(first, n);
    } else {
        enqueue_segment(n, -1);
    }
    if (st.is_ok()) st = cuda_status(cudaGetLastError(), "launching the forward");
    if (st.is_ok()) st = cuda_status(cudaStreamSynchronize(stream_), "forward");
    if (tier_) {
        const Status finished = tier_->finish();
        if (st.is_ok()) st = finished;
    }
    if (!st.is_ok()) {
        // A forward that fails part-way (an expert read error) wrote only the uncommitted copies of
        // the recurrent state and KV rows past the positions: every sequence is as it was.
        cudaStreamSynchronize(stream_);
    }
    return st;
}

// A batch: every step's rows in one scratch, in the caller's order; the attention and DeltaNet cores
// per sequence. Up to kMatvecRows rows in all (decode tokens of several sequences) through the decode
// kernels over every row, as a graph per batch shape (run_rows_graph); more through the prefill forms
// (matmuls, the grouped MoE). Either way each weight is read once per launch for all the rows.
Status CudaBackend::forward_batch(std::span<const BatchStep> steps) {
    const model::ModelConfig& c = model_->config();
    std::vector<const BatchStep*> live;
    for (const BatchStep& s : steps)
        if (!s.tokens.empty()) live.push_back(&s);
    if (live.empty()) return Status::ok();
    if (live.size() == 1) {
        if (live[0]->seq == nullptr)
            return error(ErrorCode::kInvalidArgument, "[cuda] a batch step has no sequence");
        return forward_rows(*live[0]->seq, live[0]->tokens, live[0]->logits, live[0]->all_logits,
                            live[0]->hidden);
    }
    std::vector<Part> parts;
    int64_t n = 0, logit_rows = 0;
    for (size_t i = 0; i < live.size(); ++i) {
        const BatchStep& s = *live[i];
        SLUICE_ASSIGN_OR_RETURN(DeviceState * ds, check_step(s.seq, s.tokens));
        for (const Part& p : parts)
            if (p.ds == ds)
                return error(ErrorCode::kInvalidArgument, "[cuda] a batch has two steps of one sequence");
        const auto count = static_cast<int64_t>(s.tokens.size());
        const int64_t wanted = s.logits == nullptr ? 0 : (s.all_logits ? count : 1);
        parts.push_back(Part{ds, n, count, wanted});
        n += count;
        logit_rows += wanted;
    }
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    summary_valid_ = false;
    SLUICE_RETURN_IF_ERROR(reserve_scratch(n, std::max<int64_t>(logit_rows, 1)));
    parts_ = std::move(parts);
    const auto P = static_cast<int64_t>(parts_.size());
    for (int64_t i = 0; i < P; ++i) {
        host_io_[i] = static_cast<int32_t>(parts_[static_cast<size_t>(i)].ds->position());
        std::memcpy(host_io_ + P + parts_[static_cast<size_t>(i)].row0,
                    live[static_cast<size_t>(i)]->tokens.data(),
                    live[static_cast<size_t>(i)]->tokens.size() * sizeof(int32_t));
    }
    const bool graphed = !tiered_ && n <= kMatvecRows;
    if (graphed) {
        SLUICE_RETURN_IF_ERROR(run_rows_graph(n, logit_rows));
    } else {
        SLUICE_RETURN_IF_ERROR(run_enqueued(*parts_[0].ds, n));
    }
    const int64_t V = c.vocab;
    int64_t row = 0;
    for (size_t i = 0; i < parts_.size(); ++i) {
        const Part& p = parts_[i];
        if (p.logit_rows == 0) continue;
        const auto bytes = static_cast<size_t>(p.logit_rows * V) * sizeof(float);
        if (graphed) {
            std::memcpy(live[i]->logits, host_logits_ + row * V, bytes);
        } else {
            SLUICE_CUDA_TRY(cudaMemcpy(live[i]->logits, d_.logits + row * V, bytes, cudaMemcpyDeviceToHost),
                            "copying logits");
        }
        row += p.logit_rows;
    }
    for (size_t i = 0; i < parts_.size(); ++i)
        if (live[i]->hidden != nullptr)
            SLUICE_RETURN_IF_ERROR(copy_hidden(parts_[i].row0, parts_[i].n, live[i]->hidden));
    for (const Part& p : parts_) p.ds->commit(p.n);
    return Status::ok();
}

Status CudaBackend::run_rows_graph(int64_t n, int64_t logit_rows) {
    std::vector<int64_t> key{static_cast<int64_t>(ws_generation_)};
    for (const Part& p : parts_)
        key.insert(key.end(), {static_cast<int64_t>(p.ds->id), p.ds->parity, p.n, p.logit_rows});
    auto found = std::find_if(rows_graphs_.begin(), rows_graphs_.end(),
                              [&](const RowsGraph& g) { return g.key == key; });
    if (found == rows_graphs_.end()) {
        if (rows_graphs_.size() >= kRowsGraphs) {
            auto lru =
                std::min_element(rows_graphs_.begin(), rows_graphs_.end(),
                                 [](const RowsGraph& a, const RowsGraph& b) { return a.used < b.used; });
            cudaGraphExecDestroy(lru->exec);
            if (lru->parts != nullptr) cudaFree(lru->parts);
            rows_graphs_.erase(lru);
        }
        // Several sequences: their DeltaNet layers' state pointers for this shape (the parities are in
        // the key), in a table the graph reads.
        void* table = nullptr;
        const auto P = static_cast<int64_t>(parts_.size());
        if (P > 1 && model_->state_layout().has_recurrent()) {
            const int64_t L = model_->config().n_layers;
            std::vector<cuda::DeltaPart> host(static_cast<size_t>(L * P));
            for (int64_t l = 0; l < L; ++l)
                for (int64_t i = 0; i < P; ++i) {
                    const Part& part = parts_[static_cast<size_t>(i)];
                    const DeviceState& ds = *part.ds;
                    const auto li = static_cast<size_t>(l);
                    if (ds.conv[0].size() <= li || ds.conv[0][li] == nullptr) continue;
                    cuda::DeltaPart& d = host[static_cast<size_t>(l * P + i)];
                    d.row0 = part.row0;
                    d.n = part.n;
                    d.conv_state = ds.conv[ds.parity][li];
                    d.conv_state_out = ds.conv[ds.parity ^ 1][li];
                    d.state = ds.recurrent[ds.parity][li];
                    d.state_out = ds.recurrent[ds.parity ^ 1][li];
                }
            const size_t bytes = host.size() * sizeof(cuda::DeltaPart);
            SLUICE_CUDA_TRY(cudaMalloc(&table, bytes), "allocating a batch's DeltaNet table");
            const cudaError_t e = cudaMemcpy(table, host.data(), bytes, cudaMemcpyHostToDevice);
            if (e != cudaSuccess) cudaFree(table);
            SLUICE_CUDA_TRY(e, "copying a batch's DeltaNet table");
        }
        delta_parts_ = static_cast<const cuda::DeltaPart*>(table);
        cudaGraph_t graph = nullptr;
        SLUICE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                        "capturing a multi-row decode");
        enqueue_segment(n, -1);  // resident: the whole forward
        delta_parts_ = nullptr;
        if (logit_rows > 0)
            cudaMemcpyAsync(host_logits_, d_.logits,
                            static_cast<size_t>(logit_rows * model_->config().vocab) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_);
        cudaGraphExec_t exec = nullptr;
        cudaError_t e = cudaStreamEndCapture(stream_, &graph);
        if (e == cudaSuccess) {
            e = cudaGraphInstantiate(&exec, graph, 0);
            cudaGraphDestroy(graph);
        }
        if (e != cudaSuccess && table != nullptr) cudaFree(table);
        SLUICE_CUDA_TRY(e, "capturing a multi-row decode graph");
        rows_graphs_.push_back(RowsGraph{std::move(key), exec, resid_, 0, table});
        found = rows_graphs_.end() - 1;
    }
    found->used = ++rows_graph_clock_;
    resid_ = found->resid;  // where the replayed forward leaves the residual stream (copy_hidden)
    SLUICE_CUDA_TRY(cudaGraphLaunch(found->exec, stream_), "launching a multi-row decode graph");
    return cuda_status(cudaStreamSynchronize(stream_), "multi-row decode");
}

Status CudaBackend::copy_hidden(int64_t row0, int64_t n, float* hidden) {
    const int64_t H = model_->config().hidden;
    cuda::row_norm(resid_ + row0 * H, final_norm_, cuda::HeadLayout{n, 1, H, H, 0, H, 0},
                   model_->plan().final_norm_eps, false, 1.0f, d_.tmp, stream_);
    SLUICE_CUDA_TRY(cudaMemcpyAsync(hidden, d_.tmp, static_cast<size_t>(n * H) * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_),
                    "copying hidden rows");
    return cuda_status(cudaStreamSynchronize(stream_), "copying hidden rows");
}

Status CudaBackend::forward_mtp(SequenceState& seq, std::span<const int32_t> tokens, const float* hidden,
                                float* logits, bool all_logits, float* hidden_out) {
    const model::ModelConfig& c = model_->config();
    if (!mtp_uploaded_) return new_mtp_sequence(0, nullptr).status();  // the reason, by name
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return Status::ok();
    if (hidden == nullptr) return error(ErrorCode::kInvalidArgument, "[cuda] forward_mtp needs hidden rows");
    SLUICE_ASSIGN_OR_RETURN(DeviceState * ds, check_step(&seq, tokens));
    if (ds->layout().layers.size() != static_cast<size_t>(c.n_layers + c.mtp_layers) ||
        ds->k[static_cast<size_t>(c.n_layers)] == nullptr)
        return error(ErrorCode::kInvalidArgument, "[cuda] forward_mtp needs a sequence of new_mtp_sequence");
    SLUICE_CUDA_TRY(cudaSetDevice(device_), "selecting the device");
    summary_valid_ = false;
    const int64_t logit_rows = all_logits ? n : 1;
    SLUICE_RETURN_IF_ERROR(reserve_scratch(n, logit_rows));
    parts_.assign(1, Part{ds, 0, n, logit_rows});
    host_io_[0] = static_cast<int32_t>(seq.position());
    std::memcpy(host_io_ + 1, tokens.data(), tokens.size() * sizeof(int32_t));
    enqueue_mtp(n, seq.position(), hidden);
    SLUICE_CUDA_TRY(cudaGetLastError(), "launching the MTP head");
    SLUICE_CUDA_TRY(cudaStreamSynchronize(stream_), "MTP head");
    if (logits != nullptr)
        SLUICE_CUDA_TRY(
            cudaMemcpy(logits, d_.logits, static_cast<size_t>(logit_rows * c.vocab) * sizeof(float),
                       cudaMemcpyDeviceToHost),
            "copying logits");
    if (hidden_out != nullptr)
        SLUICE_CUDA_TRY(cudaMemcpy(hidden_out, model_->plan().mtp_chain_normed ? d_.norm : resid_,
                                   static_cast<size_t>(n * c.hidden) * sizeof(float), cudaMemcpyDeviceToHost),
                        "copying the head's rows");
    ds->commit(n);
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

}  // namespace sluice::runtime::cuda_impl

namespace sluice::runtime {

Expected<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                     const CudaBackendOptions& options) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return error(ErrorCode::kUnsupported,
                     fmt::format("[cuda] no CUDA device found ({})",
                                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none"));
    for (int d : options.devices.empty() ? std::vector<int>{options.device_index} : options.devices)
        if (d >= count)
            return error(ErrorCode::kInvalidArgument,
                         fmt::format("[cuda] no device cuda:{} (this machine has {})", d, count));
    if (options.devices.size() > 1) return cuda_impl::make_expert_parallel_backend(std::move(model), options);
    auto backend = std::make_unique<cuda_impl::CudaBackend>(std::move(model), options.device_index);
    SLUICE_RETURN_IF_ERROR(backend->init(options));
    return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sluice::runtime
