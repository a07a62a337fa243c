// ModelWeights: every tensor the forward reads, as kernel views into the mapped checkpoint, plus
// the few small vectors converted to f32 at load (norm weights with the zero-centred +1 folded in,
// conv kernels, DeltaNet gate parameters).
//
// This is where checkpoint layouts are reconciled, once:
//   - Hugging Face (`model.` / `model.language_model.` prefix, per-expert or fused experts, raw
//     zero-centred norm weights, conv1d [C,1,K]) and MLX (`model.` / `language_model.model.`,
//     stacked `switch_mlp` experts, +1 already folded, conv1d [C,K,1], affine-quantized linears);
//   - each linear is F32/F16/BF16 or MLX affine 4/8-bit; a quantized module's bits and group size
//     come from the config's `quantization` block (per-module overrides first) and are cross-checked
//     against the tensor shapes.
// A missing tensor or a shape/dtype mismatch is an error naming the tensor, expected vs actual.
//
// Lifetime: views point into the Checkpoint, which ModelWeights keeps alive. Immutable after load;
// safe to read from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "sluice/status.h"

namespace sluice::model {

using kernels::WeightView;

// kGguf: llama.cpp's converter's output (model/weights_gguf.h); its math follows the Hugging Face reference.
enum class CheckpointLayout { kHuggingFace, kMlx, kGguf };
const char* layout_name(CheckpointLayout layout);

// Which reference the checkpoint's math follows, from tensor names and shapes only (no data is
// read, so it works on a header-only checkpoint).
CheckpointLayout detect_checkpoint_layout(const ModelConfig& config, const format::Checkpoint& checkpoint,
                                          const std::string& prefix);

struct AttentionWeights {
    WeightView q_proj;          // [nh·hd·(gate ? 2 : 1), H]; with a gate, q and gate interleave per head
    WeightView k_proj;          // [nkv·hd, H]
    WeightView v_proj;          // [nkv·hd, H]
    WeightView o_proj;          // [H, nh·hd]
    std::vector<float> q_norm;  // [hd]; empty without q/k norms (Qwen2)
    std::vector<float> k_norm;  // [hd]
    std::vector<float> q_bias;  // [nh·hd], k_bias and v_bias [nkv·hd]: Qwen2's; empty without
    std::vector<float> k_bias;
    std::vector<float> v_bias;
    std::vector<float> o_bias;  // [H]: gpt-oss's; empty without
    std::vector<float> sinks;   // [nh]: gpt-oss's per-head sink logits; empty without
    // Multi-head latent attention (plan.h LatentAttentionPlan; q_proj [nh·(nope+rope), H] when there is no
    // q bottleneck, o_proj [H, nh·v]).
    WeightView q_a_proj;   // [q_lora_rank, H]
    WeightView q_b_proj;   // [nh·(nope+rope), q_lora_rank]
    WeightView kv_a_proj;  // [kv_lora_rank + rope, H] (kv_a_proj_with_mqa)
    WeightView kv_b_proj;  // [nh·(nope+v), kv_lora_rank]: per head its nope rows, then its v rows
    // mlx-lm's split of kv_b_proj (its deepseek_v3 sanitize), when the checkpoint has it instead:
    WeightView embed_q;            // [nh·kv_lora_rank, nope]: per head W_UKᵀ (the absorbed query's rows)
    WeightView unembed_out;        // [nh·v, kv_lora_rank]: per head W_UV
    std::vector<float> q_a_norm;   // [q_lora_rank]
    std::vector<float> kv_a_norm;  // [kv_lora_rank]
};

struct DeltaNetWeights {
    // Qwen3-Next: interleaved per key-head group (models.md §3.5.2).
    WeightView in_qkvz;  // [2·nk·dk + 2·nv·dv, H]
    WeightView in_ba;    // [2·nv, H]
    // Qwen3.5/3.6: split, head-major (models.md §4.2).
    WeightView in_qkv;           // [2·nk·dk + nv·dv, H]
    WeightView in_z;             // [nv·dv, H]
    WeightView in_b;             // [nv, H]
    WeightView in_a;             // [nv, H]
    std::vector<float> conv;     // [conv_dim, K]; conv[c·K + K-1] multiplies the current token
    std::vector<float> neg_a;    // [nv]: −exp(A_log)
    std::vector<float> dt_bias;  // [nv]
    std::vector<float> norm;     // [dv] plain weight (never +1)
    WeightView out_proj;         // [H, nv·dv]
};

struct ExpertWeights {
    WeightView gate;  // [I, H]
    WeightView up;    // [I, H]
    WeightView down;  // [H, I]
};

struct MoeWeights {
    WeightView router;                     // [E, H]
    std::vector<float> router_bias;        // [E]: a sigmoid router's selection bias, or empty
    std::vector<float> router_logit_bias;  // [E]: gpt-oss's router bias, added to the logits; or empty
    std::vector<ExpertWeights> experts;    // [E] views into the checkpoint
    // gpt-oss's expert biases, resident with the dense core (not in the expert records): gate and up
    // [E, I] (de-interleaved from gate_up_proj_bias), down [E, H]; empty without.
    std::vector<float> expert_gate_bias, expert_up_bias, expert_down_bias;
    bool has_shared = false;
    ExpertWeights shared;    // [I_s, H] ...
    WeightView shared_gate;  // [1, H]
};

struct LayerWeights {
    std::vector<float> input_norm;  // [H], +1 folded where the family needs it
    std::vector<float> post_norm;   // [H]
    AttentionWeights attn;          // which of attn / linear, moe_w / dense_mlp is bound: model/plan.h
    DeltaNetWeights linear;
    MoeWeights moe_w;
    ExpertWeights dense_mlp;  // non-MoE layers (Qwen3-MoE mlp_only_layers)
};

// The multi-token-prediction head's own weights (models.md §3.7); its decoder layer is
// ModelWeights::layers[n_layers], and it shares the embedding and lm_head.
struct MtpWeights {
    WeightView fc;                      // [H, 2H]: over [norm_embedding(embed(t+1)); norm_hidden(h_t)]
    std::vector<float> norm_embedding;  // [H], +1 folded where the family needs it
    std::vector<float> norm_hidden;     // [H]
    std::vector<float> norm;            // [H]: before lm_head
};

struct ModelWeights {
    CheckpointLayout layout = CheckpointLayout::kHuggingFace;
    WeightView embed;                                // [V, H]
    std::vector<float> final_norm;                   // [H]
    WeightView lm_head;                              // [V, H]
    std::vector<LayerWeights> layers;                // [n_layers + mtp_layers]: the MTP layer last
    MtpWeights mtp;                                  // bound when config.mtp_layers > 0
    std::shared_ptr<format::Checkpoint> checkpoint;  // safetensors (null for a GGUF)
    std::shared_ptr<format::GgufCheckpoint> gguf;    // a GGUF's mapped files (null otherwise)
    // Tensors rearranged at load (a GGUF's regrouped rows): views point into these buffers, whose heap
    // storage moves with the ModelWeights.
    std::vector<std::vector<uint8_t>> owned;

    // Bytes of all routed experts vs everything else (for plans and `info`).
    uint64_t expert_bytes = 0;
    uint64_t dense_bytes = 0;
};

// Binds every tensor of `checkpoint` (the MTP head too when config.mtp_layers says it is there).
// With bind_experts false (packed models, whose routed experts
// live in expert files and are streamed), MoeWeights::experts stays empty.
// check_only (sluice pack's check of a source before anything is written): FP8 matrices, which no kernel
// runs as stored, are checked (shape, block scales) and bound as empty views instead of refused.
Expected<ModelWeights> load_weights(const ModelConfig& config, std::shared_ptr<format::Checkpoint> checkpoint,
                                    bool bind_experts = true, bool check_only = false);

}  // namespace sluice::model
