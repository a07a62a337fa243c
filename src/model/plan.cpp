// make_plan (plan.h): the config and the checkpoint layout, turned into per-layer decisions.
#include "model/plan.h"

#include <cmath>

#include "model/weights.h"

namespace sluice::model {

ModelPlan make_plan(const ModelConfig& c, CheckpointLayout layout) {
    ModelPlan plan;
    plan.hidden = c.hidden;
    plan.vocab = c.vocab;
    plan.final_norm_eps = c.rms_eps;
    const bool nextn_head = c.family == Family::kGlm4Moe || c.family == Family::kDeepseekV3;
    plan.mtp_zero_first_embedding = nextn_head;
    plan.mtp_chain_normed = !nextn_head;
    // The main layers, then the multi-token-prediction layer (a full-attention MoE layer).
    plan.layers.resize(static_cast<size_t>(c.n_layers + c.mtp_layers));
    for (int64_t l = 0; l < c.n_layers + c.mtp_layers; ++l) {
        LayerPlan& p = plan.layers[static_cast<size_t>(l)];
        p.norm_eps = c.rms_eps;
        if (c.is_full_attention(l) && c.latent_attention()) {
            p.mixer = MixerKind::kLatentAttention;
            LatentAttentionPlan& a = p.latent;
            a.heads = c.n_heads;
            a.q_lora_rank = c.q_lora_rank;
            a.kv_lora_rank = c.kv_lora_rank;
            a.nope_dim = c.qk_nope_dim;
            a.rope_dim = c.qk_rope_dim;
            a.v_dim = c.v_head_dim;
            a.rope_interleaved = c.rope_interleave;
            a.rope_theta = c.rope_theta;
            a.rope_inv_freq = c.rope_inv_freq();
            if (c.yarn.enabled) a.rope_mscale = static_cast<float>(c.yarn.attention_factor);
            a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.q_dim())) *
                                                 (c.yarn.enabled ? c.yarn.softmax_mscale : 1.0));
            a.norm_eps = c.rms_eps;
        } else if (c.is_full_attention(l)) {
            p.mixer = MixerKind::kAttention;
            AttentionPlan& a = p.attention;
            a.heads = c.n_heads;
            a.kv_heads = c.n_kv_heads;
            a.head_dim = c.head_dim;
            a.rotary_dim = c.rotary_dim;
            a.rope_theta = c.rope_theta;
            a.rope_inv_freq = c.rope_inv_freq();
            if (c.yarn.enabled) a.rope_mscale = static_cast<float>(c.yarn.attention_factor);
            a.qk_norm = c.attn_qk_norm;
            a.qk_norm_eps = c.rms_eps;
            a.qkv_bias = c.attn_qkv_bias;
            a.output_gate = c.attn_output_gate;
            a.o_bias = c.attn_o_bias;
            a.sinks = c.attn_sinks;
            a.window = c.window_of(l);
        } else {
            p.mixer = MixerKind::kGatedDeltaNet;
            DeltaNetPlan& d = p.deltanet;
            d.k_heads = c.linear_k_heads;
            d.v_heads = c.linear_v_heads;
            d.k_dim = c.linear_k_dim;
            d.v_dim = c.linear_v_dim;
            d.conv_kernel = c.conv_kernel;
            // A GGUF holds Qwen3-Next's in_proj_qkvz split as Qwen3.5's are (model/weights_gguf.h).
            d.projection = c.split_linear_projections || layout == CheckpointLayout::kGguf
                               ? DeltaProjection::kSplit
                               : DeltaProjection::kInterleavedQkvzBa;
            d.v_heads_tiled = layout == CheckpointLayout::kGguf && c.split_linear_projections &&
                              c.linear_k_heads != c.linear_v_heads;
            d.l2_eps = layout == CheckpointLayout::kMlx ? 1e-6f * static_cast<float>(c.linear_k_dim) : 1e-6f;
            d.norm_eps = c.rms_eps;
        }
        if (c.is_moe_layer(l)) {
            p.ffn = FfnKind::kMoe;
            MoePlan& m = p.moe;
            m.router = c.router_sigmoid ? RouterKind::kSigmoidBiasTopK : RouterKind::kSoftmaxTopK;
            m.experts = c.n_experts;
            m.top_k = c.top_k;
            m.expert_ffn = c.expert_ffn;
            m.renormalize = c.norm_topk_prob;
            m.scale = c.routed_scaling;
            m.groups = c.router_groups;
            m.topk_groups = c.router_topk_groups;
            m.shared_expert = c.shared_expert_ffn > 0;
            m.shared_gate = m.shared_expert && c.shared_expert_gated;
            m.router_logit_bias = c.router_logit_bias;
            m.expert_bias = c.expert_bias;
            m.swiglu_limit = c.swiglu_limit;
            m.swiglu_alpha = c.swiglu_alpha;
        } else {
            p.ffn = FfnKind::kDense;
        }
    }
    return plan;
}

}  // namespace sluice::model
