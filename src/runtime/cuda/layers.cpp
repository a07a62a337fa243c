// The CUDA backend's layer program: attention, Gated DeltaNet and MoE layers as kernel launches, the
// fused residual norms, and enqueue_segment (the forward between expert-tier stops).
#include "kernels/cuda/latent_attention.h"
#include "runtime/cuda/backend_impl.h"

namespace sluice::runtime::cuda_impl {

bool CudaBackend::int8_linear(const DevWeight& w, int64_t n) const {
    return n > kMatvecRows && int8_prefill_ && cuda::int8_products(w) && n * w.cols <= xq_capacity_;
}

void CudaBackend::linear(const DevWeight& w, const float* x, int64_t n, float* y, bool int8) {
    if (n <= kMatvecRows) {
        cuda::matvec_rows(launch_, w, x, n, y, stream_);
    } else if (int8 && int8_linear(w, n)) {
        cuda::quantize_rows_int8(x, n, w.cols, i8(), stream_);
        cuda::matmul_int8(w, i8(), n, y, stream_);
    } else {
        cuda::matmul(launch_, w, x, n, y, stream_);
    }
}

void CudaBackend::linears(const float* x, int64_t n, std::initializer_list<Product> products) {
    if (n <= kMatvecRows) {  // the decode products over n rows, one launch for every product of x
        cuda::MatvecMulti m;
        for (const Product& p : products)
            if (p.w->data != nullptr) m.add(*p.w, p.y);
        cuda::matvec_multi_rows(launch_, m, x, n, stream_);
        return;
    }
    bool quantized = false;
    for (const Product& p : products) {
        if (p.w->data == nullptr) continue;
        if (!int8_linear(*p.w, n)) {
            linear(*p.w, x, n, p.y);
            continue;
        }
        if (!quantized) cuda::quantize_rows_int8(x, n, p.w->cols, i8(), stream_);
        quantized = true;
        cuda::matmul_int8(*p.w, i8(), n, p.y, stream_);
    }
}

void CudaBackend::swiglu_mlp(const DevWeight& gate, const DevWeight& up, const DevWeight& down,
                             const float* x, int64_t n, float* out) {
    const int64_t I = gate.rows;
    linears(x, n, {{&gate, d_.sh_gate}, {&up, d_.sh_up}});
    cuda::swiglu(d_.sh_gate, d_.sh_up, n * I, d_.sh_act, stream_);
    linear(down, d_.sh_act, n, out);
}

void CudaBackend::attention_layer(const DevLayer& L, int64_t l, int64_t n, const cuda::NormIn* in_norm) {
    const model::AttentionPlan& P = L.plan->attention;
    const int64_t nh = P.heads, nkv = P.kv_heads, hd = P.head_dim;
    const bool gated = P.output_gate;
    const int64_t q_rows = nh * hd * (gated ? 2 : 1);
    if (n == 1) {
        cuda::MatvecMulti m;
        m.add(L.q_proj, d_.tmp);
        m.add(L.k_proj, d_.k);
        m.add(L.v_proj, d_.v);
        if (in_norm != nullptr) m.norm = *in_norm;
        cuda::matvec_multi(launch_, m, d_.norm, stream_);
    } else {
        // q: [n, nh, (q | gate)]; k, v: [n, nkv, hd]
        linears(d_.norm, n, {{&L.q_proj, d_.tmp}, {&L.k_proj, d_.k}, {&L.v_proj, d_.v}});
    }
    const bool gate_in_epilogue = gated && !unfused_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const cuda::RopeParams rope{P.rope_theta, L.rope_inv_freq, P.rope_mscale};
    for (size_t i = 0; i < parts_.size(); ++i) {
        const Part& part = parts_[i];
        DeviceState& ds = *part.ds;
        const int32_t* pos = d_.io + i;
        const int64_t np = part.n;
        float* tmp = d_.tmp + part.row0 * q_rows;
        float* k = d_.k + part.row0 * nkv * hd;
        float* v = d_.v + part.row0 * nkv * hd;
        float* q = d_.q + part.row0 * nh * hd;
        float* gate = d_.gate + part.row0 * nh * hd;
        const model::StateLayout& layout = ds.layout();  // the sequence's own (a per-session KV type)
        cuda::KvCache cache;
        cache.type = layout.kv;
        cache.k = ds.k[static_cast<size_t>(l)];
        cache.v = ds.v[static_cast<size_t>(l)];
        cache.ring = ds.ring[static_cast<size_t>(l)];
        cache.window = cache.ring != nullptr ? layout.kv_window : 0;
        cache.slots = layout.kv_ring_slots;
        cache.sliding = P.window;  // gpt-oss: the layer's sliding window and its heads' sinks
        cache.sinks = L.sinks;
        // An f32 cache is written by the prep itself; a compressed one from rows staged in k and v.
        const bool f32 = cache.type == kernels::KvType::kF32;
        float* k_rows = f32 ? static_cast<float*>(cache.k) : k;
        float* v_rows = f32 ? static_cast<float*>(cache.v) : v;
        if (!unfused_) {
            const cuda::PrepWeights w{L.q_norm, L.k_norm, L.q_bias, L.k_bias, L.v_bias};
            cuda::attention_prep(tmp, k, v, w, np, nh, nkv, hd, P.rotary_dim, gated, P.qk_norm_eps, pos, rope,
                                 q, gate, k_rows, v_rows, stream_, f32);
        } else {
            if (L.q_bias != nullptr) {  // Qwen2 (no gate: q rows are nh · hd)
                cuda::add_bias_rows(tmp, L.q_bias, np, nh * hd, stream_);
                cuda::add_bias_rows(k, L.k_bias, np, nkv * hd, stream_);
                cuda::add_bias_rows(v, L.v_bias, np, nkv * hd, stream_);
            }
            HeadLayout qh{np, nh, hd, q_rows, hd * (gated ? 2 : 1), nh * hd, hd};
            if (L.q_norm != nullptr)
                cuda::row_norm(tmp, L.q_norm, qh, P.qk_norm_eps, false, 1.0f, q, stream_);
            else
                cuda::copy_heads(tmp, qh, q, stream_);
            if (gated) cuda::copy_heads(tmp + hd, qh, gate, stream_);
            HeadLayout kh{np, nkv, hd, nkv * hd, hd, nkv * hd, hd};
            if (L.k_norm != nullptr) cuda::row_norm(k, L.k_norm, kh, P.qk_norm_eps, false, 1.0f, k, stream_);
            cuda::rope_neox(q, np, nh, hd, P.rotary_dim, pos, rope, stream_);
            cuda::rope_neox(k, np, nkv, hd, P.rotary_dim, pos, rope, stream_);
            if (f32) {
                cuda::write_rows_at(k, np, nkv * hd, pos, k_rows, stream_);
                cuda::write_rows_at(v, np, nkv * hd, pos, v_rows, stream_);
            }
        }
        float* out = d_.attn + part.row0 * nh * hd;
        const float* epilogue_gate = gate_in_epilogue ? gate : nullptr;
        if (f32) {
            if (flash_attention_ && np > kMatvecRows && cuda::flash_attention_fits(cache, hd))
                cuda::flash_attention_kv(q, cache, np, 0, pos, nh, nkv, hd, scale, epilogue_gate, out,
                                         ds.attn_split, ds.attn_split_floats, host_io_[i] + np, stream_);
            else
                cuda::attention_kv(q, cache, np, 0, pos, nh, nkv, hd, scale, epilogue_gate, out,
                                   ds.attn_split, ds.capacity(), stream_);
            continue;
        }
        // The rows into the cache in its type, then attention on the cache as stored (model/attention.cpp:
        // a token's own key is read back compressed too). With a window, in sub-steps of at most the
        // ring's slack, so no write overwrites a ring row a query of its sub-step reads. Prefill steps
        // on tensor cores where flash_attention_kv covers the head width.
        const bool flash = flash_attention_ && np > kMatvecRows && cuda::flash_attention_fits(cache, hd);
        const int64_t step = cache.window > 0 ? model::kKvRingSlack : np;
        for (int64_t c0 = 0; c0 < np; c0 += step) {
            const int64_t c = std::min(step, np - c0);
            const float* g = epilogue_gate != nullptr ? epilogue_gate + c0 * nh * hd : nullptr;
            cuda::kv_store(k + c0 * nkv * hd, v + c0 * nkv * hd, c, c0, pos, nkv, hd, cache, stream_);
            if (flash)
                cuda::flash_attention_kv(q + c0 * nh * hd, cache, c, c0, pos, nh, nkv, hd, scale, g,
                                         out + c0 * nh * hd, ds.attn_split, ds.attn_split_floats,
                                         host_io_[i] + c0 + c, stream_);
            else
                cuda::attention_kv(q + c0 * nh * hd, cache, c, c0, pos, nh, nkv, hd, scale, g,
                                   out + c0 * nh * hd, ds.attn_split, ds.capacity(), stream_);
        }
    }
    if (gated && !gate_in_epilogue) cuda::mul_sigmoid(d_.attn, d_.gate, n * nh * hd, stream_);
    linear(L.o_proj, d_.attn, n, d_.mix);
    if (L.o_bias != nullptr) cuda::add_bias_rows(d_.mix, L.o_bias, n, L.o_proj.rows, stream_);  // gpt-oss
}

// model/latent_attention.cpp on the GPU, op for op: the q and kv projections, the latents' norms, the
// absorbed queries with their roped part, the cache rows, attention over the latent cache per part, the
// value products and o_proj. Scratch: tmp the q latent, q the queries, k the cache rows of the step,
// gate the absorbed queries, attn the latent outputs, y the heads' values.
void CudaBackend::latent_attention_layer(const DevLayer& L, int64_t l, int64_t n,
                                         const cuda::NormIn* in_norm) {
    const model::LatentAttentionPlan& P = L.plan->latent;
    const cuda::MlaShape s{P.heads,        P.nope_dim, P.rope_dim,   P.v_dim,
                           P.kv_lora_rank, P.q_dim(),  P.cache_dim()};
    const int64_t nh = s.heads, cd = s.cache_dim, R = s.rope, lat = s.latent, ql = P.q_lora_rank;
    const bool bottleneck = ql > 0;
    float* qa = d_.tmp;
    float* q = d_.q;
    float* rows = d_.k;
    float* qabs = d_.gate;
    float* olat = d_.attn;
    float* values = d_.y;
    const DevWeight& q_in = bottleneck ? L.q_a_proj : L.q_proj;
    if (n == 1) {
        cuda::MatvecMulti m;
        m.add(q_in, bottleneck ? qa : q);
        m.add(L.kv_a_proj, rows);
        if (in_norm != nullptr) m.norm = *in_norm;
        cuda::matvec_multi(launch_, m, d_.norm, stream_);
    } else {
        linears(d_.norm, n, {{&q_in, bottleneck ? qa : q}, {&L.kv_a_proj, rows}});
    }
    if (bottleneck) {
        cuda::row_norm(qa, L.q_a_norm, HeadLayout{n, 1, ql, ql, 0, ql, 0}, P.norm_eps, false, 1.0f, qa,
                       stream_);
        linear(L.q_b_proj, qa, n, q);
    }
    cuda::row_norm(rows, L.kv_a_norm, HeadLayout{n, 1, lat, cd, 0, cd, 0}, P.norm_eps, false, 1.0f, rows,
                   stream_);
    cuda::copy_heads(q + s.nope, HeadLayout{n, nh, R, nh * s.q_dim, s.q_dim, nh * cd, cd}, qabs + lat,
                     stream_);
    if (P.rope_interleaved) {
        cuda::deinterleave_pairs(rows + lat, n, cd, R, stream_);
        cuda::deinterleave_pairs(qabs + lat, n * nh, cd, R, stream_);
    }
    const bool split = L.embed_q.data != nullptr;  // mlx-lm's embed_q / unembed_out instead of kv_b
    cuda::latent_absorb(q, s, split ? L.embed_q : L.kv_b_proj, split, n, qabs, stream_);
    const cuda::RopeParams rope{P.rope_theta, L.rope_inv_freq, P.rope_mscale};
    for (size_t i = 0; i < parts_.size(); ++i) {
        const Part& part = parts_[i];
        DeviceState& ds = *part.ds;
        const int32_t* pos = d_.io + i;
        const int64_t np = part.n;
        float* part_rows = rows + part.row0 * cd;
        float* part_q = qabs + part.row0 * nh * cd;
        cuda::rope_neox(part_q + lat, np, nh, cd, R, pos, rope, stream_);
        cuda::rope_neox(part_rows + lat, np, 1, cd, R, pos, rope, stream_);
        const kernels::KvType type = ds.layout().kv;
        void* cache = ds.k[static_cast<size_t>(l)];
        if (type == kernels::KvType::kF32) {
            cuda::write_rows_at(part_rows, np, cd, pos, static_cast<float*>(cache), stream_);
        } else {  // f16 (new_sequence admits no other): the one row as keys and as values
            cuda::KvCache kv;
            kv.type = type;
            kv.k = kv.v = cache;
            cuda::kv_store(part_rows, part_rows, np, 0, pos, 1, cd, kv, stream_);
        }
        cuda::latent_attention(part_q, cache, type, s, np, 0, pos, P.softmax_scale,
                               olat + part.row0 * nh * lat, stream_, ds.attn_split, ds.capacity());
    }
    cuda::latent_unabsorb(olat, s, split ? L.unembed_out : L.kv_b_proj, split, n, values, stream_);
    linear(L.o_proj, values, n, d_.mix);
}

void CudaBackend::deltanet_layer(const DevLayer& L, int64_t l, int64_t n, const cuda::NormIn* in_norm) {
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
            linears(d_.norm, n,
                    {{&L.in_qkv, d_.conv_in}, {&L.in_z, d_.z}, {&L.in_b, d_.beta}, {&L.in_a, d_.g}});
        }
    } else {
        if (n == 1) {
            cuda::MatvecMulti m;
            m.add(L.in_qkvz, d_.tmp);
            m.add(L.in_ba, d_.gate);
            if (in_norm != nullptr) m.norm = *in_norm;
            cuda::matvec_multi(launch_, m, d_.norm, stream_);
        } else {
            linears(d_.norm, n, {{&L.in_qkvz, d_.tmp}, {&L.in_ba, d_.gate}});
        }
        cuda::split_qkvz(d_.tmp, d_.gate, n, nk, dk, r, dv, d_.conv_in, d_.z, d_.beta, d_.g, stream_);
    }
    // Each sequence's committed state (its parity) is read and the new one written to the other copy;
    // the backend flips parity once the whole forward has succeeded. A rows graph of several sequences
    // has their states in a device table (delta_parts_): one launch over all of them.
    const auto li = static_cast<size_t>(l);
    const auto n_parts = static_cast<int64_t>(parts_.size());
    const cuda::DeltaPart* table =
        delta_parts_ != nullptr && n_parts > 1 ? delta_parts_ + l * n_parts : nullptr;
    if (table != nullptr) {
        int64_t max_rows = 0;
        for (const Part& part : parts_) max_rows = std::max(max_rows, part.n);
        cuda::conv1d_silu_parts(d_.conv_in, table, n_parts, max_rows, cd, P.conv_kernel, L.conv, d_.conv_out,
                                stream_);
    } else {
        for (const Part& part : parts_) {
            DeviceState& ds = *part.ds;
            const int in = ds.parity, out = ds.parity ^ 1;
            cuda::conv1d_silu(d_.conv_in + part.row0 * cd, part.n, cd, P.conv_kernel, L.conv, ds.conv[in][li],
                              ds.conv[out][li], d_.conv_out + part.row0 * cd, stream_);
        }
    }
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const float eps = P.l2_eps;
    const bool fused = !unfused_ && nv <= kMaxDeltaHeads && cuda::deltanet_fused_fits(dk, dv);
    if (fused && n_parts == 1 && n <= kMatvecRows) {
        // Decode, or a speculative verification's few rows (prefill keeps the unfused sequence).
        DeviceState& ds = *parts_[0].ds;
        cuda::deltanet_fused(d_.conv_out, d_.beta, d_.g, d_.z, L.neg_a, L.dt_bias, L.dnorm, n, nk, nv, dk, dv,
                             eps, q_scale, P.norm_eps, ds.recurrent[ds.parity][li],
                             ds.recurrent[ds.parity ^ 1][li], d_.attn, d_.counters + kDeltaCounters, d_.y,
                             stream_, P.v_heads_tiled);
    } else if (fused && table != nullptr) {
        cuda::deltanet_fused_parts(d_.conv_out, d_.beta, d_.g, d_.z, L.neg_a, L.dt_bias, L.dnorm, table,
                                   n_parts, nk, nv, dk, dv, eps, q_scale, P.norm_eps, d_.attn,
                                   d_.counters + kDeltaCounters, d_.y, stream_, P.v_heads_tiled);
    } else {
        HeadLayout qk{n, nk, dk, cd, dk, kd, dk};
        cuda::row_norm(d_.conv_out, nullptr, qk, eps, true, q_scale, d_.q, stream_);
        cuda::row_norm(d_.conv_out + kd, nullptr, qk, eps, true, 1.0f, d_.k, stream_);
        cuda::copy_heads(d_.conv_out + 2 * kd, HeadLayout{n, 1, vd, cd, 0, vd, 0}, d_.v, stream_);
        cuda::deltanet_gates(d_.beta, d_.g, L.neg_a, L.dt_bias, n, nv, stream_);
        for (const Part& part : parts_) {
            DeviceState& ds = *part.ds;
            const int64_t r0 = part.row0;
            cuda::gated_delta(d_.q + r0 * kd, d_.k + r0 * kd, d_.v + r0 * vd, d_.beta + r0 * nv,
                              d_.g + r0 * nv, part.n, nk, nv, dk, dv, ds.recurrent[ds.parity][li],
                              ds.recurrent[ds.parity ^ 1][li], d_.attn + r0 * vd, stream_, P.v_heads_tiled);
        }
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
    reduce_experts(n);
}

void CudaBackend::reduce_experts(int64_t n) {
    if (collective_ != nullptr) collective_->all_reduce_sum(d_.mix, n * model_->config().hidden, stream_);
}

// (swiglu_down_matvec adds only a gated output; an ungated shared expert takes the general path.)
bool CudaBackend::fused_shared(const DevLayer& L, int64_t n) const {
    return n == 1 && L.has_shared() && L.plan->moe.shared_gate && cuda::swiglu_fits(L.shared_gate_proj.rows);
}

// Decode runs the router with the shared expert's input projections in one launch whose last block
// runs the top-k (unless SLUICE_CUDA_UNFUSED).
void CudaBackend::moe_route(const DevLayer& L, int64_t n, const cuda::NormIn* in_norm) {
    // gpt-oss's logit bias goes in between the product and the top-k, so its router takes the unfused pair.
    const bool fused_topk = !unfused_ && L.router_logit_bias == nullptr;
    if (n == 1) {
        cuda::MatvecMulti m;
        m.add(L.router, d_.router);
        if (shared_folded(L, n)) {
            if (L.plan->moe.shared_gate)
                m.add(L.shared_gate, d_.sg);  // its gate and up run with the routed experts'
        } else if (fused_shared(L, n)) {
            m.add(L.shared_gate_proj, d_.sh_gate);
            m.add(L.shared_up, d_.sh_up);
            m.add(L.shared_gate, d_.sg);
        }
        if (fused_topk) m.topk = route_topk(L, 0, d_.topk_ids, d_.topk_w, kRouteCounter);
        if (in_norm != nullptr) m.norm = *in_norm;
        cuda::matvec_multi(launch_, m, d_.norm, stream_);
        if (fused_topk) return;
    } else {
        linear(L.router, d_.norm, n, d_.router, /*int8=*/false);
    }
    if (L.router_logit_bias != nullptr)
        cuda::add_bias_rows(d_.router, L.router_logit_bias, n, L.router.rows, stream_);
    cuda::router_topk(d_.router, n, L.plan->moe.router_spec(L.router_bias), d_.topk_ids, d_.topk_w, stream_);
}

cuda::MatvecTopk CudaBackend::route_topk(const DevLayer& L, int which, int32_t* ids, float* weights,
                                         int counter) const {
    cuda::MatvecTopk t;
    t.which = which;
    t.router = L.plan->moe.router_spec(L.router_bias);
    t.ids = ids;
    t.weights = weights;
    t.counter = d_.counters + counter;
    return t;
}

bool CudaBackend::shared_folded(const DevLayer& L, int64_t n) const {
    return !unfused_ && n == 1 && L.has_shared() && !expert_extras(L);
}

void CudaBackend::moe_routed(const DevLayer& L, const float* x, const int32_t* ids, const float* weights,
                             int64_t n, float* mix, bool decode) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, E = c.n_experts, K = c.top_k, I = c.expert_ffn;
    // gpt-oss's experts (biases, the clamped SwiGLU) take the unfused forms: gate and up, then
    // expert_swiglu (rows' experts from ids, through `order` when the rows are moe_group's permuted
    // pairs), then down; the down biases are added to mix after the weighted sum.
    const bool extras = expert_extras(L);
    auto activate = [&](const int32_t* row_ids, const int32_t* order, int64_t rows) {
        if (extras)
            cuda::expert_swiglu(d_.pair_gate, d_.pair_up, row_ids, order, L.expert_gate_bias,
                                L.expert_up_bias, rows, I, L.plan->moe.swiglu_alpha, L.plan->moe.swiglu_limit,
                                d_.pair_act, stream_);
        else
            cuda::swiglu(d_.pair_gate, d_.pair_up, rows * I, d_.pair_act, stream_);
    };
    if (n <= kMatvecRows) {
        // One token, or a small batch (kMatvecRows) through the decode kernels, every token in the same
        // two launches. Fused: gate, up and SwiGLU of the routed experts (and, for a decode forward, the
        // shared expert) in one launch, then one down launch over all of them. Unfused
        // (SLUICE_CUDA_UNFUSED, or expert extras): gate and up, the activation, the routed down; the
        // shared expert in moe_shared().
        const bool fold = n == 1 && decode && shared_folded(L, 1);
        cuda::SharedExpert shared;
        if (fold) {
            shared.gate = L.shared_gate_proj;
            shared.up = L.shared_up;
            shared.down = L.shared_down;
            shared.gate_logit = L.shared_gate.data != nullptr ? d_.sg : nullptr;
        }
        if (!unfused_ && !extras) {
            cuda::moe_matvec_gate_up(launch_, L.experts, ids, K, I, H, x, nullptr, nullptr, d_.pair_act,
                                     fold ? &shared : nullptr, experts_vector_, stream_, n);
        } else {
            cuda::moe_matvec_gate_up(launch_, L.experts, ids, K, I, H, x, d_.pair_gate, d_.pair_up, nullptr,
                                     nullptr, experts_vector_, stream_, n);
            activate(ids, nullptr, n * K);
        }
        cuda::moe_down_matvec(launch_, L.experts, ids, weights, K, H, I, d_.pair_act,
                              fold ? &shared : nullptr, experts_vector_, mix, stream_, n);
        cuda::moe_add_expert_bias(ids, weights, L.expert_down_bias, n, K, H, mix, stream_);
        return;
    }
    const int64_t pairs = n * K;
    // A rank of an expert-parallel group groups only its own experts' pairs (the products skip the others'
    // and the combine leaves them out).
    cuda::moe_group(ids, pairs, E, d_.offsets, d_.order, stream_, shard_.ranks, shard_.rank);
    if (int8_prefill_ && experts_int8_bits_ > 0 && n * H <= xq_capacity_ && pairs * I <= xq_capacity_) {
        // x quantised once for both gate and up; the SwiGLU output once for the down projections.
        const int bits = experts_int8_bits_;
        cuda::quantize_rows_int8(x, n, H, i8(), stream_);
        cuda::moe_matmul_int8(bits, experts_int8_group_, L.experts, 0, E, d_.offsets, d_.order, pairs, true,
                              K, false, I, H, i8(), d_.pair_gate, stream_);
        cuda::moe_matmul_int8(bits, experts_int8_group_, L.experts, 1, E, d_.offsets, d_.order, pairs, true,
                              K, false, I, H, i8(), d_.pair_up, stream_);
        activate(ids, d_.order, pairs);
        cuda::quantize_rows_int8(d_.pair_act, pairs, I, i8(), stream_);
        cuda::moe_matmul_int8(bits, experts_int8_group_, L.experts, 2, E, d_.offsets, d_.order, pairs, false,
                              1, true, H, I, i8(), d_.pair_out, stream_);
        cuda::moe_combine(d_.pair_out, weights, n, K, H, mix, stream_, ids, shard_.ranks, shard_.rank);
        cuda::moe_add_expert_bias(ids, weights, L.expert_down_bias, n, K, H, mix, stream_);
        return;
    }
    if (mxfp4_q8_.group > 0 && n * H <= xq_capacity_ && pairs * I <= xq_capacity_) {
        // MXFP4 experts: the same int8 products, each group of experts converted to 8-bit rows first.
        const cuda::Mxfp4Q8Scratch& s = mxfp4_q8_;
        cuda::quantize_rows_int8(x, n, H, i8(), stream_);
        cuda::moe_mxfp4_int8(s, L.experts, 0, E, d_.offsets, d_.order, pairs, true, K, false, I, H, i8(),
                             d_.pair_gate, stream_);
        cuda::moe_mxfp4_int8(s, L.experts, 1, E, d_.offsets, d_.order, pairs, true, K, false, I, H, i8(),
                             d_.pair_up, stream_);
        activate(ids, d_.order, pairs);
        cuda::quantize_rows_int8(d_.pair_act, pairs, I, i8(), stream_);
        cuda::moe_mxfp4_int8(s, L.experts, 2, E, d_.offsets, d_.order, pairs, false, 1, true, H, I, i8(),
                             d_.pair_out, stream_);
        cuda::moe_combine(d_.pair_out, weights, n, K, H, mix, stream_, ids, shard_.ranks, shard_.rank);
        cuda::moe_add_expert_bias(ids, weights, L.expert_down_bias, n, K, H, mix, stream_);
        return;
    }
    cuda::moe_matmul(launch_, L.experts, 0, E, d_.offsets, d_.order, pairs, true, K, false, I, H, x,
                     d_.pair_gate, stream_);
    cuda::moe_matmul(launch_, L.experts, 1, E, d_.offsets, d_.order, pairs, true, K, false, I, H, x,
                     d_.pair_up, stream_);
    activate(ids, d_.order, pairs);
    cuda::moe_matmul(launch_, L.experts, 2, E, d_.offsets, d_.order, pairs, false, 1, true, H, I, d_.pair_act,
                     d_.pair_out, stream_);
    cuda::moe_combine(d_.pair_out, weights, n, K, H, mix, stream_, ids, shard_.ranks, shard_.rank);
    cuda::moe_add_expert_bias(ids, weights, L.expert_down_bias, n, K, H, mix, stream_);
}

void CudaBackend::moe_shared(const DevLayer& L, int64_t n) {
    if (!L.has_shared() || shared_folded(L, n)) return;
    if (fused_shared(L, n)) {
        cuda::swiglu_down_matvec(L.shared_down, d_.sh_gate, d_.sh_up, d_.sg, d_.mix, stream_);
        return;
    }
    swiglu_mlp(L.shared_gate_proj, L.shared_up, L.shared_down, d_.norm, n, d_.sh_out);
    const int64_t H = model_->config().hidden;
    if (!L.plan->moe.shared_gate) {
        cuda::axpy(1.0f, d_.sh_out, n * H, d_.mix, stream_);
        return;
    }
    linear(L.shared_gate, d_.norm, n, d_.sg, /*int8=*/false);
    cuda::add_gated_rows(d_.sh_out, d_.sg, n, H, d_.mix, stream_);
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
int64_t CudaBackend::enqueue_segment(int64_t n, int64_t after) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, K = c.top_k;
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
        const auto parts = static_cast<int64_t>(parts_.size());
        cudaMemcpyAsync(d_.io, host_io_, static_cast<size_t>(n + parts) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream_);
        cuda::dequantize_rows(embed_, d_.io + parts, n, d_.x, stream_);
        const HeadLayout rows{n, 1, H, H, 0, H, 0};
        cuda::row_norm(d_.x, layers_[0].input_norm, rows, layers_[0].plan->norm_eps, false, 1.0f, d_.norm,
                       stream_);
    } else {
        const DevLayer& L = layers_[static_cast<size_t>(after)];
        if (n == 1)
            moe_routed(L, d_.norm, d_.topk_ids, d_.topk_w, 1, d_.mix, true);  // prefill: tiered_experts()
        moe_shared(L, n);
        reduce_experts(n);
        residual(after);
    }
    for (int64_t l = after + 1; l < c.n_layers; ++l) {
        const DevLayer& L = layers_[static_cast<size_t>(l)];
        const cuda::NormIn* mixer_in = in_norm ? &*in_norm : nullptr;
        if (L.attention()) {
            attention_layer(L, l, n, mixer_in);
        } else if (L.latent()) {
            latent_attention_layer(L, l, n, mixer_in);
        } else {
            deltanet_layer(L, l, n, mixer_in);
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
                const bool fused_topk = !unfused_ && next.router_logit_bias == nullptr;
                if (fused_topk) m.topk = route_topk(next, 0, d_.pred_ids, d_.pred_w, kPredictCounter);
                cuda::matvec_multi(launch_, m, d_.tmp, stream_);
                if (next.router_logit_bias != nullptr)
                    cuda::add_bias_rows(d_.pred_logits, next.router_logit_bias, 1, next.router.rows, stream_);
                if (!fused_topk)
                    cuda::router_topk(d_.pred_logits, 1, next.plan->moe.router_spec(next.router_bias),
                                      d_.pred_ids, d_.pred_w, stream_);
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
    // Final norm of the rows each part wants (its last logit_rows), packed part after part, and one
    // lm_head product over them.
    int64_t out_rows = 0;
    for (const Part& part : parts_) {
        if (part.logit_rows == 0) continue;
        cuda::row_norm(resid_ + (part.row0 + part.n - part.logit_rows) * H, final_norm_,
                       HeadLayout{part.logit_rows, 1, H, H, 0, H, 0}, model_->plan().final_norm_eps, false,
                       1.0f, d_.norm + out_rows * H, stream_);
        out_rows += part.logit_rows;
    }
    if (out_rows > 0) linear(lm_head_, d_.norm, out_rows, d_.logits);
    if (n == 1) {  // decode: the greedy token and the softmax normaliser for the sampler
        cuda::logits_summary(d_.logits, c.vocab, d_.summary_partial, d_.counters + kSummaryCounter,
                             d_.summary, stream_);
        cudaMemcpyAsync(host_summary_, d_.summary, sizeof(cuda::DevLogitsSummary), cudaMemcpyDeviceToHost,
                        stream_);
    }
    return c.n_layers;
}

// The multi-token-prediction head over parts_[0]'s n rows (model.cpp forward_mtp): row i is
// fc([norm_embedding(embed(token i)); norm_hidden(hidden row i)]) through the head's layer, then
// mtp.norm (every row, into d_.norm) and lm_head. The chained drafts' next hidden rows are d_.norm,
// or resid_ for a nextn head (ModelPlan::mtp_chain_normed).
void CudaBackend::enqueue_mtp(int64_t n, int64_t position, const float* hidden) {
    const model::ModelConfig& c = model_->config();
    const int64_t H = c.hidden, l = c.n_layers;
    const DevLayer& L = layers_[static_cast<size_t>(l)];
    const float eps = L.plan->norm_eps;
    resid_ = d_.x;
    cudaMemcpyAsync(d_.io, host_io_, static_cast<size_t>(n + 1) * sizeof(int32_t), cudaMemcpyHostToDevice,
                    stream_);
    cudaMemcpyAsync(d_.mix, hidden, static_cast<size_t>(n * H) * sizeof(float), cudaMemcpyHostToDevice,
                    stream_);
    cuda::dequantize_rows(embed_, d_.io + 1, n, d_.x, stream_);
    if (position == 0 && model_->plan().mtp_zero_first_embedding)
        cudaMemsetAsync(d_.x, 0, static_cast<size_t>(H) * sizeof(float), stream_);
    const cuda::HeadLayout half{n, 1, H, H, 0, 2 * H, 0};  // into one half of [n, 2H] rows
    cuda::row_norm(d_.x, mtp_norm_embedding_, half, eps, false, 1.0f, d_.tmp, stream_);
    cuda::row_norm(d_.mix, mtp_norm_hidden_, half, eps, false, 1.0f, d_.tmp + H, stream_);
    linear(mtp_fc_, d_.tmp, n, d_.x);
    const cuda::HeadLayout rows{n, 1, H, H, 0, H, 0};
    cuda::row_norm(d_.x, L.input_norm, rows, eps, false, 1.0f, d_.norm, stream_);
    if (L.latent()) {
        latent_attention_layer(L, l, n, nullptr);
    } else {
        attention_layer(L, l, n, nullptr);
    }
    cuda::add_rms_norm(resid_, d_.mix, L.post_norm, n, H, eps, d_.norm, stream_);
    moe_layer(L, n, nullptr);
    cuda::axpy(1.0f, d_.mix, n * H, resid_, stream_);
    cuda::row_norm(resid_, mtp_norm_, rows, eps, false, 1.0f, d_.norm, stream_);
    const int64_t logit_rows = parts_[0].logit_rows;
    linear(lm_head_, d_.norm + (n - logit_rows) * H, logit_rows, d_.logits);
}

}  // namespace sluice::runtime::cuda_impl
