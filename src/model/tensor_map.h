// The tensor map: where every tensor a model reads sits in a checkpoint — the module paths of one
// family, the three layouts routed experts come in, and the validated slices of (possibly stacked,
// possibly MLX-quantized) matrices. Weight binding (weights.cpp), packing and pulling
// (experts/pack_plan.cpp) and synthesis (experts/synth.cpp) all read it, so a checkpoint's names are
// spelled in one place and a new family adds its names here.
//
// Module paths are the checkpoint's own (e.g. "model.layers.3.self_attn.q_proj"); a linear's
// tensors are MODULE.weight and, when MLX-quantized, MODULE.scales and MODULE.biases (bits and group
// size from the config's quantization block, cross-checked against the shapes).
//
// Lifetime: TensorNames is a value; SourceMatrix points into the Checkpoint it was found in.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/pack.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "sluice/status.h"

namespace sluice::model {

// The module paths of one model's tensors (the Qwen and GLM MoE families share their module names;
// they differ in the text model's prefix, the DeltaNet projections and the expert layout; Mixtral
// names its MoE block block_sparse_moe with experts w1 / w3 / w2).
struct TensorNames {
    std::string prefix;               // "model.", "model.language_model." or "language_model.model."
    std::string lm_head = "lm_head";  // module path of the output projection
    // The main decoder's layer count: layer indices from here on are the multi-token-prediction
    // layers, "mtp.layers.N." at the checkpoint's top level (-1: not known, no MTP layers named).
    int64_t n_layers = -1;
    // DeepSeek-style MTP layers (GLM-4.5, DeepSeek-V3: "nextn"): the layers after the decoder's are
    // prefix.layers.N like the rest, and the head's own tensors live inside the first of them.
    bool nextn = false;

    std::string embed() const { return prefix + "embed_tokens"; }
    std::string final_norm() const { return prefix + "norm.weight"; }
    std::string layer(int64_t l) const {
        if (!nextn && n_layers >= 0 && l >= n_layers)
            return "mtp.layers." + std::to_string(l - n_layers) + ".";
        return prefix + "layers." + std::to_string(l) + ".";
    }
    // The MTP head's own tensors (models.md §3.7): fc [H, 2H] over [norm(embedding); norm(hidden)],
    // those two norms, and the norm before the shared lm_head. Qwen3-Next / Qwen3.5 spell them at the
    // top level (kMtp*); a nextn layer as eh_proj, enorm, hnorm and shared_head.norm.
    static constexpr const char* kMtpFc = "mtp.fc";
    static constexpr const char* kMtpNormEmbedding = "mtp.pre_fc_norm_embedding.weight";
    static constexpr const char* kMtpNormHidden = "mtp.pre_fc_norm_hidden.weight";
    static constexpr const char* kMtpNorm = "mtp.norm.weight";
    std::string mtp_fc() const { return nextn ? layer(n_layers) + "eh_proj" : kMtpFc; }
    std::string mtp_norm_embedding() const {
        return nextn ? layer(n_layers) + "enorm.weight" : kMtpNormEmbedding;
    }
    std::string mtp_norm_hidden() const { return nextn ? layer(n_layers) + "hnorm.weight" : kMtpNormHidden; }
    std::string mtp_norm() const { return nextn ? layer(n_layers) + "shared_head.norm.weight" : kMtpNorm; }
    // A nextn layer's copies of the embedding table and lm_head (shared_head.head): the main model's
    // own, which the head reads instead (DeepSeek-V3 report §2.2: "shared embedding and output head").
    bool is_nextn_copy_of_shared(const std::string& tensor_name) const {
        if (!nextn || n_layers < 0) return false;
        const std::string p = prefix + "layers.";
        if (!tensor_name.starts_with(p) ||
            std::strtoll(tensor_name.c_str() + p.size(), nullptr, 10) < n_layers)
            return false;
        return tensor_name.ends_with(".embed_tokens.weight") ||
               tensor_name.ends_with(".shared_head.head.weight");
    }
    // Per layer, relative to layer(l).
    static constexpr const char* kInputNorm = "input_layernorm.weight";
    static constexpr const char* kPostNorm = "post_attention_layernorm.weight";
    static constexpr const char* kAttention = "self_attn.";  // q_proj k_proj v_proj o_proj, q_norm k_norm
    static constexpr const char* kDeltaNet =
        "linear_attn.";                               // in_proj_*, conv1d, A_log, dt_bias, norm, out_proj
    static constexpr const char* kDenseMlp = "mlp.";  // gate_proj up_proj down_proj (non-MoE layers)
    // The MoE block's module, relative to layer(l): "mlp." (Qwen, GLM) or Mixtral's "block_sparse_moe.";
    // its router, routed experts (HF per expert E.<proj>, or fused) and MLX stacked experts under it.
    std::string moe = "mlp.";
    // The per-expert projections' names in HF checkpoints, gate, up, down: Mixtral's w1, w3, w2.
    std::array<const char*, 3> expert_projections = {"gate_proj", "up_proj", "down_proj"};
    std::string router_name = "gate";  // the router's module under moe: gpt-oss's "router"
    std::string router() const { return moe + router_name; }
    std::string experts() const { return moe + "experts."; }
    std::string stacked_experts() const { return moe + "switch_mlp."; }  // MLX: [E, out, in] per projection
    static constexpr const char* kSharedExpert = "mlp.shared_expert.";   // gate_proj up_proj down_proj
    static constexpr const char* kSharedExpertGate = "mlp.shared_expert_gate";
    static constexpr const char* kSharedExperts = "mlp.shared_experts.";  // GLM / DeepSeek-V3 spelling
    // The sigmoid router's selection bias (GLM / DeepSeek-V3), F32 [E].
    static constexpr const char* kRouterBias = "mlp.gate.e_score_correction_bias";
    // Routed experts: under experts() per expert (E.<expert_projections>) or fused (gate_up_proj [E, 2I, H]
    // / down_proj), or MLX's stacked_experts() (source_experts()).
    // The shared expert's module path of `config`'s family.
    static const char* shared_expert(const ModelConfig& config) {
        return config.family == Family::kGlm4Moe || config.family == Family::kDeepseekV3 ? kSharedExperts
                                                                                         : kSharedExpert;
    }

    // Whether a tensor holds routed-expert weights (they go to the packed layout's expert files).
    static bool is_routed_expert(const std::string& tensor_name);
    // Tensors no text forward reads (vision towers): not packed. The multi-token-prediction head is
    // not auxiliary: speculative decoding drafts with it.
    static bool is_auxiliary(const std::string& tensor_name);
    static bool is_mtp(const std::string& tensor_name) { return tensor_name.rfind("mtp.", 0) == 0; }
    // The bits a module is quantized to where the rest get `bits`, as mlx-lm does it: Qwen's routers
    // and shared-expert gate at 8 bits; GLM's router (not a Linear in mlx-lm) kept float: 16.
    static int module_bits(const ModelConfig& config, const std::string& module, int bits);
};

// The names in a checkpoint of `config`: the prefix and lm_head path found by the embedding table (an
// error naming the candidates when there is none), the family's MoE module names; layer() names MTP
// layers after config.n_layers.
Expected<TensorNames> find_tensor_names(const format::Checkpoint& checkpoint, const ModelConfig& config);
// Multi-token-prediction layers `checkpoint` holds for a model of `config`'s family (0 or 1): the
// Qwen3-Next / Qwen3.5 head is there when mtp.fc.weight is, GLM-4.5's and DeepSeek-V3's when the layer
// after the decoder's has its eh_proj (mlx-lm drops it; the checkpoint may declare it all the same).
int64_t mtp_layers_in(const ModelConfig& config, const format::Checkpoint& checkpoint);
// The names a new checkpoint of `config` gets (synthesis).
TensorNames tensor_names_for(const ModelConfig& config);

// One matrix of the source: rows × cols at byte `offset` inside tensor `w` (a slice of a stacked
// tensor, or all of it), with its scales/biases slices when it is MLX-quantized.
// The registered weight format (kernels/weight_format.h) a stored matrix binds to — its float dtype,
// or block-quantized codes of `bits` bits (MLX affine: U32 words beside scales and biases) — and the
// type of its scales: the one place checkpoint and pack storage meet the format registry. Errors name
// what is not registered.
Expected<kernels::WeightType> weight_type_of(format::DType dtype, int bits);
kernels::ScaleType scale_type_of(format::DType dtype);
// The same for a packed projection: its ggml blocks' format (a pack of a GGUF), else weight_type_of(its
// weight's dtype, its bits). A ggml type sluice has no kernels for is kUnsupported naming it.
Expected<kernels::WeightType> weight_type_of(const format::PackProjection& projection);

struct SourceMatrix {
    const format::TensorInfo* w = nullptr;
    uint64_t offset = 0;
    int64_t rows = 0, cols = 0;
    int bits = 0, group_size = 0;  // 0: float, w->dtype
    const format::TensorInfo* scales = nullptr;
    const format::TensorInfo* biases = nullptr;
    uint64_t sb_offset = 0;
    kernels::WeightType type = kernels::WeightType::kF32;  // weight_type_of(w->dtype, bits)
    // An FP8 (e4m3) source matrix (ModelConfig::fp8_block_rows): its F32 `weight_scale_inv`, one per
    // block; `type` is then meaningless — no kernel reads FP8, the packer converts it (pack_plan.h).
    const format::TensorInfo* block_scales = nullptr;
};

// `count` stacked matrices [rows, cols] under module `path` (count 0: one plain matrix), float or
// MLX affine; every dtype and shape checked, errors naming the tensor with expected vs actual.
Expected<std::vector<SourceMatrix>> source_linear(const ModelConfig& config,
                                                  const format::Checkpoint& checkpoint,
                                                  const std::string& path, int64_t count, int64_t rows,
                                                  int64_t cols, const std::string& weight_suffix = ".weight");
// The routed experts of layer `l`, [E] × {gate, up, down}, in whichever layout the checkpoint has:
// MLX stacked switch_mlp, Qwen3.5/3.6 fused gate_up_proj [E, 2I, H] (gate rows first), or one tensor
// per expert and projection. Not gpt-oss's (input-major, interleaved, or MXFP4 blocks):
// model/gpt_oss_experts.h.
Expected<std::vector<std::array<SourceMatrix, 3>>> source_experts(const ModelConfig& config,
                                                                  const format::Checkpoint& checkpoint,
                                                                  const TensorNames& names, int64_t l);

}  // namespace sluice::model
