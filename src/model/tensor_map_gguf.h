// The GGUF tensor map: for a model of a given config, every tensor a GGUF of it holds that sluice reads,
// named as llama.cpp's converter names it (gguf-py tensor_mapping.py / constants.py TENSOR_NAMES, through
// conversion/qwen.py's modify_tensors), with the Hugging Face tensors sluice's own map (tensor_map.h,
// weights.cpp) reads for the same weights, and what the converter did to the values on the way — as data,
// so the step that binds GGUF weights can undo or absorb each change, and a test can replay them.
//
// Names. Global: token_embd.weight (embed_tokens), output_norm.weight (norm), output.weight (lm_head;
// absent when tied). Per block N (blk.N.): attn_norm (input_layernorm), ffn_norm (post_attention_layernorm;
// post_attention_norm on qwen3next / qwen35moe), attn_q / attn_k / attn_v / attn_output, attn_q_norm /
// attn_k_norm, attn_{q,k,v}.bias (Qwen2); Gated DeltaNet: attn_qkv, attn_gate, ssm_ba (Qwen3-Next) or
// ssm_beta + ssm_alpha (Qwen3.5), ssm_conv1d, ssm_a, ssm_dt.bias, ssm_norm, ssm_out; dense MLP ffn_gate /
// ffn_up / ffn_down; MoE ffn_gate_inp (router), ffn_{gate,up,down}_exps (all experts, 3-D),
// ffn_{gate,up,down}_shexp, ffn_gate_inp_shexp. The MTP block is block n_layers (the converter appends it
// after the decoder's blocks): the decoder-layer names plus nextn.eh_proj (mtp.fc), nextn.enorm
// (mtp.pre_fc_norm_embedding), nextn.hnorm (mtp.pre_fc_norm_hidden), nextn.shared_head_norm (mtp.norm).
//
// Values: the converter's changes, HF → GGUF, each a GgufValueStep (docs/FORMATS.md lists them with the
// converter lines; every one is checked against the converter's output in tests/unit/gguf_model_test.cpp):
//   every tensor  dims reversed (ggml's ne[0] is the row length): HF [out, in] is dims {in, out}, the same
//                 row-major bytes; HF bf16 is widened to f32 before any step (base.py prepare_tensors)
//   kAddOne       Qwen3-Next / 3.5 RMSNorm weights but the DeltaNet's gated norm: w + 1, the zero-centred
//                 norm folded (qwen.py Qwen3NextModel.modify_tensors `data_torch + 1`) — the binding must
//                 not add 1 again
//   kNegExp       A_log → ssm_a = −exp(A_log) (`-torch.exp(data_torch)`), what sluice computes at load
//   kSqueeze      conv1d [C, 1, K] → [C, K] (`data_torch.squeeze()`), values unchanged
//   kQkvzToQkv,   Qwen3-Next in_proj_qkvz, per key head g [q_g (dk) | k_g (dk) | v_g (r·dv) | z_g (r·dv)]
//   kQkvzToGate   rows, regrouped into attn_qkv [q_0..q_{nk-1} | k_0.. | v_0..] and attn_gate [z_0..]
//                 (the `in_proj_qkvz.weight` branch): Qwen3.5's split layout; in_proj_ba stays as it is
//   kVHeadsTiled  Qwen3.5 with nk ≠ nv: the value heads, grouped by key head in HF (head g·r + i), moved to
//                 tiled order (position i·nk + g) along rows (in_proj_qkv's v rows, in_proj_z, in_proj_a/b,
//                 A_log, dt_bias, conv1d's v channels) or columns (out_proj)
//                 (_LinearAttentionVReorderBase.modify_tensors / _reorder_v_heads)
//   kStackExperts the E per-expert matrices [out, in] stacked into [E, out, in] = dims {in, out, E}
//                 (Qwen2MoeModel.modify_tensors `torch.stack(datas, dim=0)`); a fused HF gate_up_proj
//                 [E, 2I, H] gives the same gate (rows [0, I)) and up (rows [I, 2I)) tensors
//   kTranspose,   gpt-oss's experts (gpt_oss.py GptOssModel.modify_tensors, the bf16 layout): gate_up_proj
//   kStride       [E, H, 2I] transposed to [E, 2I, H], then its even rows are ffn_gate_exps and its odd
//                 rows ffn_up_exps (`data_torch[:, ::2, :]`, `[:, 1::2, :]`); down_proj [E, I, H]
//                 transposed; gate_up_proj_bias [E, 2I] split the same way by columns. The Hub's MXFP4
//                 blocks are repacked into ggml's MXFP4 instead (repack_mxfp4: no f32 values), the
//                 same split — not a value step; their dims are these
//   kRopePairs    Mixtral's q_proj / k_proj (conversion/llama.py LlamaModel.permute, n_head for q, n_head_kv
//                 for k): per head, HF row s·hd/2 + i (the halves transformers' rotate_half pairs) becomes
//                 row 2i + s, the pairs llama.cpp's LLAMA_ROPE_TYPE_NORM rotates (`reshape(n_head, 2,
//                 hd / 2, cols).swapaxes(1, 2)`); the binding moves the rows back (weights_gguf.cpp), so
//                 every backend's RoPE sees HF's layout
// Nothing else changes: the Qwen / GLM / gpt-oss q/k are not permuted (their classes are not LlamaModel),
// Qwen3-Next / 3.5's gated q_proj keeps its per-head [q | gate] rows, biases, routers and the shared-expert
// gate are copied. gpt-oss's sinks (self_attn.sinks → attn_sinks.weight), its o_proj bias (attn_output.bias)
// and its router bias (mlp.router.bias → ffn_gate_inp.bias) are copied too.
//
// Lifetime: plain values. Pure functions; thread-safe.
// Rejected alternative: a name table alone (as gguf-py's tensor_mapping.py is) — the value changes are
// where a binding goes wrong silently, so they travel with the names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "sluice/status.h"

namespace sluice::model {

// One change the converter made to a tensor's values (f32), in the order it made them.
struct GgufValueStep {
    enum class Kind {
        kAddOne,        // w + 1
        kNegExp,        // −exp(w)
        kSqueeze,       // drop size-1 dims (values unchanged)
        kQkvzToQkv,     // the q, k, v rows of Qwen3-Next's per-key-head in_proj_qkvz, regrouped
        kQkvzToGate,    // its z rows, regrouped
        kVHeadsTiled,   // value heads grouped → tiled along `axis`, within [offset, offset + nv·head_dim)
        kStackExperts,  // the HF tensors (one per expert) stacked
        kTranspose,     // each [head_dim, cols] matrix of a stack transposed to [cols, head_dim]
        kStride,        // every r-th row (axis 0) or column (axis 1) from `offset`: gate / up de-interleaved
        kRopePairs,     // each head's rows [first half | second half] interleaved into pairs (llama q/k)
    };
    Kind kind = Kind::kAddOne;
    // kQkvzTo*: nk = key heads, dk = key head dim, dv_group = (nv / nk)·dv value rows per key head.
    // kVHeadsTiled: axis (0 rows, 1 columns), offset (first row/column of the value heads), nk key heads,
    // r = nv / nk value heads per key head, head_dim (dv, or 1 for per-head scalars).
    // kTranspose: head_dim = the rows of each stacked matrix. kStride: axis, offset, r = the stride.
    // kRopePairs: nk = heads, head_dim = rows per head.
    int64_t axis = 0, offset = 0;
    int64_t nk = 0, dk = 0, dv_group = 0, r = 0, head_dim = 0;
};
const char* gguf_value_step_name(GgufValueStep::Kind kind);

// One tensor of a GGUF and where its values come from.
struct GgufTensorSource {
    std::string gguf;                  // "blk.3.attn_qkv.weight"
    std::vector<int64_t> dims;         // as the converter writes them, ggml order (ne[0] first)
    std::vector<std::string> hf;       // the HF tensors (sluice's names; [E] per-expert ones when stacked)
    std::vector<int64_t> hf_shape;     // each HF tensor's shape, row-major
    std::vector<GgufValueStep> steps;  // HF → GGUF, in order
};

// Every tensor a GGUF of `config` holds that sluice reads, for its family (the MTP block when
// config.mtp_layers > 0; output.weight unless config.tie_word_embeddings). HF names as
// tensor_names_for(config) spells them (model. / model.language_model. prefix, mtp.* for the MTP head).
std::vector<GgufTensorSource> gguf_tensor_map(const ModelConfig& config);
// The name of a block's post-attention RMS norm in `config`'s GGUF ("post_attention_norm.weight" or
// "ffn_norm.weight": the converter's tensor_mapping for its architecture).
const char* gguf_post_norm_name(const ModelConfig& config);

// The values the converter writes for `source`, from its HF tensors' values (`hf[i]` row-major f32 of
// shape source.hf_shape, in the order of source.hf): each step's definition, the test's oracle against
// the converter's output, and what a binding inverts. kInvalidArgument when a size does not match.
Expected<std::vector<float>> gguf_values_from_hf(const GgufTensorSource& source,
                                                 const std::vector<std::vector<float>>& hf);

}  // namespace sluice::model
