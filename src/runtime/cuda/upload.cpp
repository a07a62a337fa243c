// The CUDA backend's weights: the dense core and the routed experts into one device arena (backend_impl.h).
#include "kernels/quantize.h"
#include "kernels/weight_format.h"
#include "runtime/cuda/backend_impl.h"

namespace sluice::runtime::cuda_impl {

DevWeight CudaBackend::put(Arena& arena, const kernels::WeightView& w, Status& st, bool as_mlx) {
    if (w.data == nullptr) return cuda::dev_weight(w, nullptr, nullptr, nullptr);
    // GGUF's Q4_0, Q4_1 and Q8_0 go up as the MLX affine 4/8-bit they exactly are (kernels/quantize.h),
    // so they take the 16-byte chunk decode kernels and the int8 tensor-core prefill; the routed experts
    // keep their own bytes (the expert tier copies them as the host holds them, and the MoE kernels are
    // chosen once for every expert).
    if (as_mlx && w.ggml_blocks()) {
        kernels::MlxAffineRows rows;
        if (kernels::ggml_as_mlx_affine(w, &rows)) return put(arena, rows.view, st, false);
    }
    return lay_out(arena, w, st, true);
}

DevWeight CudaBackend::lay_out(Arena& arena, const kernels::WeightView& w, Status& st, bool copy) {
    const kernels::WeightFormat& format = kernels::weight_format(w.type);
    if (!format.cuda_kernels && st.is_ok())
        st = error(ErrorCode::kUnsupported,
                   fmt::format("[cuda] weights of format {} ({}) have no CUDA kernels", format.name,
                               format.description));
    const uint64_t data_bytes = static_cast<uint64_t>(w.rows) * format.data_row_bytes(w.cols);
    void* data = arena.take(data_bytes);
    if (copy && !arena.counting() && st.is_ok()) st = put_bytes(data, w.data, data_bytes);
    void *scales = nullptr, *biases = nullptr;
    if (format.quantized()) {
        const uint64_t sb =
            static_cast<uint64_t>(w.rows) * format.aux_row_bytes(w.cols, w.group_size, w.scale_type) / 2;
        scales = arena.take(sb);
        biases = arena.take(sb);
        if (copy && !arena.counting() && st.is_ok()) st = put_bytes(scales, w.scales, sb);
        if (copy && !arena.counting() && st.is_ok()) st = put_bytes(biases, w.biases, sb);
    }
    return cuda::dev_weight(w, data, scales, biases);
}

DevWeight CudaBackend::put_expert(Arena& arena, const kernels::WeightView& w, Status& st) {
    if (!experts_as_mlx_ || !w.ggml_blocks()) return put(arena, w, st, false);
    kernels::MlxAffineRows rows;
    if (!kernels::ggml_as_mlx_affine(w, &rows)) {
        if (st.is_ok())
            st = error(ErrorCode::kUnsupported,
                       "[cuda] a routed expert's GGUF block has a scale whose MLX bias (-8·d or -128·d) "
                       "overflows f16, where expert 0's did not; run with --gpu-memory below the model's "
                       "size so the experts stream through the expert tier in their own format");
        return DevWeight{};
    }
    return put(arena, rows.view, st, false);
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

namespace {

// w as the upload puts it with as_mlx: the MLX affine rows of a GGUF Q4_0 / Q4_1 / Q8_0 weight (into
// *store), else w itself. *converted: whether it was converted.
kernels::WeightView as_mlx_view(const kernels::WeightView& w, kernels::MlxAffineRows* store,
                                bool* converted) {
    *converted = w.ggml_blocks() && kernels::ggml_as_mlx_affine(w, store);
    return *converted ? store->view : w;
}

// The code width (4 or 8) an expert's three projections share with cuda::int8_products, given the
// width found so far (-1: none yet); 0 when they do not (or differ from it). group: lowered to the
// smallest group size among them.
int int8_bits(const model::ExpertWeights& e, int so_far, int64_t& group) {
    int bits = so_far;
    for (const kernels::WeightView* v : {&e.gate, &e.up, &e.down}) {
        if (!cuda::int8_products(cuda::dev_weight(*v, nullptr, nullptr, nullptr))) return 0;
        const int b = v->type == kernels::WeightType::kQ4 ? 4 : 8;
        if (bits >= 0 && bits != b) return 0;
        bits = b;
        group = group > 0 ? std::min<int64_t>(group, v->group_size) : v->group_size;
    }
    return bits;
}

}  // namespace

void CudaBackend::null_expert(const model::ExpertWeights& e, DevWeight* out, Status& st) {
    Arena zero(static_cast<char*>(null_block_), null_bytes_);
    const kernels::WeightView* parts[3] = {&e.gate, &e.up, &e.down};
    for (int i = 0; i < 3; ++i) {
        kernels::MlxAffineRows rows;
        bool converted = false;
        const kernels::WeightView v = experts_as_mlx_ ? as_mlx_view(*parts[i], &rows, &converted) : *parts[i];
        out[i] = lay_out(zero, v, st, false);
    }
    if (zero.used() > null_bytes_ && st.is_ok())
        st = error(ErrorCode::kInternal, "[cuda] a routed expert outgrew the null expert's zero block");
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
        null_bytes_ = 0;
        expert_slot_bytes_ = 0;
        experts_raw_ = ExpertKernels{};
        experts_mlx_ = ExpertKernels{};
        experts_as_mlx_ = false;
    }
    lm_head_ = W.lm_head.data == W.embed.data ? embed_ : put(arena, W.lm_head, st);
    final_norm_ = put(arena, W.final_norm, st);
    // The main decoder's layers, then the multi-token-prediction layer when the experts are resident
    // (the expert tier serves the main layers only).
    const bool mtp = model_->has_mtp() && !tiered_;
    const size_t n_layers = static_cast<size_t>(c.n_layers + (mtp ? c.mtp_layers : 0));
    layers_ = std::make_unique<DevLayer[]>(n_layers);
    if (mtp) {
        mtp_fc_ = put(arena, W.mtp.fc, st);
        mtp_norm_embedding_ = put(arena, W.mtp.norm_embedding, st);
        mtp_norm_hidden_ = put(arena, W.mtp.norm_hidden, st);
        mtp_norm_ = put(arena, W.mtp.norm, st);
    }
    mtp_uploaded_ = mtp;
    model::ExpertSource* source = model_->expert_source();
    std::vector<model::ExpertWeights> views;
    const size_t table_size = static_cast<size_t>(c.n_experts * 3);
    std::unique_ptr<DevWeight[]> table = std::make_unique<DevWeight[]>(table_size);
    for (size_t l = 0; l < n_layers; ++l) {
        const model::LayerWeights& lw = W.layers[l];
        DevLayer& L = layers_[l];
        L.plan = &model_->plan().layers[l];
        L.input_norm = put(arena, lw.input_norm, st);
        L.post_norm = put(arena, lw.post_norm, st);
        if (L.latent()) {
            const model::AttentionWeights& a = lw.attn;
            L.q_proj = put(arena, a.q_proj, st);
            L.q_a_proj = put(arena, a.q_a_proj, st);
            L.q_b_proj = put(arena, a.q_b_proj, st);
            L.kv_a_proj = put(arena, a.kv_a_proj, st);
            L.kv_b_proj = put(arena, a.kv_b_proj, st, false);  // read element by element (weight_at)
            L.embed_q = put(arena, a.embed_q, st, false);
            L.unembed_out = put(arena, a.unembed_out, st, false);
            L.o_proj = put(arena, a.o_proj, st);
            L.q_a_norm = put(arena, a.q_a_norm, st);
            L.kv_a_norm = put(arena, a.kv_a_norm, st);
            if (!L.plan->latent.rope_inv_freq.empty())
                L.rope_inv_freq = put(arena, L.plan->latent.rope_inv_freq, st);
        } else if (L.attention()) {
            L.q_proj = put(arena, lw.attn.q_proj, st);
            L.k_proj = put(arena, lw.attn.k_proj, st);
            L.v_proj = put(arena, lw.attn.v_proj, st);
            L.o_proj = put(arena, lw.attn.o_proj, st);
            if (!lw.attn.q_norm.empty()) L.q_norm = put(arena, lw.attn.q_norm, st);
            if (!lw.attn.k_norm.empty()) L.k_norm = put(arena, lw.attn.k_norm, st);
            if (!lw.attn.q_bias.empty()) L.q_bias = put(arena, lw.attn.q_bias, st);
            if (!lw.attn.k_bias.empty()) L.k_bias = put(arena, lw.attn.k_bias, st);
            if (!lw.attn.v_bias.empty()) L.v_bias = put(arena, lw.attn.v_bias, st);
            if (L.plan->attention.o_bias) L.o_bias = put(arena, lw.attn.o_bias, st);
            if (L.plan->attention.sinks) L.sinks = put(arena, lw.attn.sinks, st);
            if (!L.plan->attention.rope_inv_freq.empty())
                L.rope_inv_freq = put(arena, L.plan->attention.rope_inv_freq, st);
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
        L.router_bias = put(arena, m.router_bias, st);
        if (L.plan->moe.router_logit_bias) L.router_logit_bias = put(arena, m.router_logit_bias, st);
        if (L.plan->moe.expert_bias) {  // gpt-oss's, resident with the dense core (weights.h)
            // A rank of an expert-parallel group: the rows of experts it does not hold are zero, so their
            // null experts add exactly 0 (gate and up 0, the SwiGLU of 0 is 0, no down bias).
            auto owned_rows = [&](const std::vector<float>& bias) {
                if (shard_.whole() || bias.empty()) return bias;
                std::vector<float> out = bias;
                const size_t row = bias.size() / static_cast<size_t>(c.n_experts);
                for (int64_t e = 0; e < c.n_experts; ++e)
                    if (!shard_.owns_expert(e))
                        std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(e) * row),
                                    row, 0.0f);
                return out;
            };
            L.expert_gate_bias = put(arena, owned_rows(m.expert_gate_bias), st);
            L.expert_up_bias = put(arena, owned_rows(m.expert_up_bias), st);
            L.expert_down_bias = put(arena, owned_rows(m.expert_down_bias), st);
        }
        if (arena.counting() && m.has_shared) {  // the shared expert goes up as put() makes it, either way
            kernels::MlxAffineRows rows[3];
            bool converted = false;
            const bool vec = vector_mlp(as_mlx_view(m.shared.gate, &rows[0], &converted),
                                        as_mlx_view(m.shared.up, &rows[1], &converted),
                                        as_mlx_view(m.shared.down, &rows[2], &converted));
            experts_raw_.vector = experts_raw_.vector && vec;
            experts_mlx_.vector = experts_mlx_.vector && vec;
        }
        L.shared_here = shard_.owns_shared(static_cast<int64_t>(l));
        if (m.has_shared && L.shared_here) {
            L.shared_gate_proj = put(arena, m.shared.gate, st);
            L.shared_up = put(arena, m.shared.up, st);
            L.shared_down = put(arena, m.shared.down, st);
            L.shared_gate = put(arena, m.shared_gate, st);
        }
        // Routed experts: through the expert source (resident views, or reads of a packed model); a rank
        // of an expert-parallel group takes its shard's (`owned`) and points the others at the null expert.
        const int64_t E = c.n_experts;
        const auto owned = static_cast<uint64_t>(shard_.owned_experts(E));
        std::vector<int32_t> owned_ids;
        for (int64_t e = 0; e < E; ++e)
            if (shard_.owns_expert(e)) owned_ids.push_back(static_cast<int32_t>(e));
        if (arena.counting()) {
            // Every expert of a layer has expert 0's shape: size them without reading the others.
            const int32_t first = 0;
            model::ExpertWeights e;
            SLUICE_RETURN_IF_ERROR(
                source->acquire(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1), &e));
            // Counted both ways (ExpertKernels): the arena takes the raw bytes, init() swaps in the
            // converted total when it chooses them.
            Arena one, one_mlx;
            put(one, e.gate, st, false);
            put(one, e.up, st, false);
            put(one, e.down, st, false);
            expert_slot_bytes_ = std::max(expert_slot_bytes_, cuda::ExpertTier::slot_bytes_for(e));
            experts_raw_.vector = experts_raw_.vector && vector_mlp(e.gate, e.up, e.down);
            experts_raw_.int8_bits = int8_bits(e, experts_raw_.int8_bits, experts_raw_.int8_group);
            for (const kernels::WeightView* v : {&e.gate, &e.up, &e.down})
                experts_raw_.mxfp4 = experts_raw_.mxfp4 && cuda::mxfp4_int8_products(cuda::dev_weight(
                                                               *v, nullptr, nullptr, nullptr));
            experts_raw_.routed_bytes += one.used() * owned;
            kernels::MlxAffineRows rows[3];
            bool cg = false, cu = false, cd = false;
            model::ExpertWeights em = e;
            em.gate = as_mlx_view(e.gate, &rows[0], &cg);
            em.up = as_mlx_view(e.up, &rows[1], &cu);
            em.down = as_mlx_view(e.down, &rows[2], &cd);
            put(one_mlx, em.gate, st, false);
            put(one_mlx, em.up, st, false);
            put(one_mlx, em.down, st, false);
            experts_mlx_.convertible = experts_mlx_.convertible && cg && cu && cd;
            experts_mlx_.vector = experts_mlx_.vector && vector_mlp(em.gate, em.up, em.down);
            experts_mlx_.int8_bits = int8_bits(em, experts_mlx_.int8_bits, experts_mlx_.int8_group);
            experts_mlx_.routed_bytes += one_mlx.used() * owned;
            if (!shard_.whole()) null_bytes_ = std::max({null_bytes_, one.used(), one_mlx.used()});
            source->release(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1));
            arena.take(one.used() * owned);
            routed_bytes_ += one.used() * owned;
        } else {
            for (size_t i = 0; i < table_size; ++i) table[i] = DevWeight{};
            if (!shard_.whole()) {
                // The null expert, laid out as this layer's experts go up, for every id of other ranks
                // (tiered: the expert tier fills only the owned ids' entries).
                const int32_t first = owned_ids.front();
                model::ExpertWeights e;
                SLUICE_RETURN_IF_ERROR(
                    source->acquire(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1), &e));
                DevWeight null[3];
                null_expert(e, null, st);
                source->release(static_cast<int64_t>(l), std::span<const int32_t>(&first, 1));
                for (int64_t id = 0; id < E; ++id)
                    if (!shard_.owns_expert(id))
                        for (int p = 0; p < 3; ++p) table[static_cast<size_t>(id * 3 + p)] = null[p];
            }
            const auto n_owned = static_cast<int64_t>(owned_ids.size());
            const int64_t round = std::max<int64_t>(1, std::min<int64_t>(n_owned, source->max_pinned()));
            std::vector<int32_t> ids;
            for (int64_t first = 0; !tiered_ && first < n_owned; first += round) {
                const int64_t count = std::min(round, n_owned - first);
                ids.assign(owned_ids.begin() + first, owned_ids.begin() + first + count);
                views.resize(static_cast<size_t>(count));
                SLUICE_RETURN_IF_ERROR(source->acquire(static_cast<int64_t>(l), ids, views.data()));
                for (int64_t i = 0; i < count; ++i) {
                    const model::ExpertWeights& e = views[static_cast<size_t>(i)];
                    const auto id = static_cast<size_t>(ids[static_cast<size_t>(i)]);
                    table[id * 3 + 0] = put_expert(arena, e.gate, st);
                    table[id * 3 + 1] = put_expert(arena, e.up, st);
                    table[id * 3 + 2] = put_expert(arena, e.down, st);
                }
                source->release(static_cast<int64_t>(l), ids);
                SLUICE_RETURN_IF_ERROR(st);
            }
        }
        // The device table [E][3]: filled here when resident; when tiered, the expert tier fills the
        // entries of the experts it holds (a rank's null entries are written here).
        void* t = arena.take(table_size * sizeof(DevWeight));
        if (!arena.counting() && (!tiered_ || !shard_.whole()) && st.is_ok())
            st = put_bytes(t, table.get(), table_size * sizeof(DevWeight));
        L.experts = static_cast<DevWeight*>(t);
    }
    return st;
}

}  // namespace sluice::runtime::cuda_impl
