// ModelWeights from a GGUF checkpoint (issue 26): every tensor the forward reads, bound in place — a
// kernel view into the mapped file, in the tensor's own ggml type (kernels/weight_format.h registers
// F32/F16/BF16 and ggml's block formats) — by the names and shapes of model/tensor_map_gguf.h.
//
// What llama.cpp's converter changed on the way (tensor_map_gguf.h, GgufValueStep) is absorbed, not
// re-done: RMSNorm weights of Qwen3-Next / 3.5 already hold their +1 (bound as MLX's are); ssm_a is
// −exp(A_log) already (DeltaNetWeights::neg_a as it is); conv1d is [C, K] already; Qwen3-Next's
// in_proj_qkvz arrives split into attn_qkv (head-major q | k | v) and attn_gate (z), which is Qwen3.5's
// split layout, so the plan runs GGUF DeltaNets through the split projections (plan.h) — only
// Qwen3-Next's ssm_ba, still [b | a] per key head, is regrouped at load into in_b and in_a (whole rows
// copied: any type); Qwen3.5's value heads moved to tiled order (nk ≠ nv) stay tiled, and the plan
// tells the forward (DeltaNetPlan::v_heads_tiled). Routed experts are views into the 3-D
// ffn_*_exps tensors, expert e at e · rows · row_bytes.
//
// Errors name the file and the tensor: a tensor missing, of other dims than the config implies, of a
// ggml type sluice has no kernels for (listing those it has), or with rows that are not whole blocks.
//
// Lifetime: views point into the mapped files, which ModelWeights::gguf keeps open (a GGUF pack's dense
// file: ModelWeights::checkpoint), or into ModelWeights::owned (the regrouped rows). Immutable after
// load; safe to read from any thread.
#pragma once

#include <memory>

#include "format/gguf.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "sluice/status.h"

namespace sluice::model {

// With bind_experts false (experts streamed from the file by an expert store), MoeWeights::experts
// stays empty.
Expected<ModelWeights> load_gguf_weights(const ModelConfig& config,
                                         std::shared_ptr<format::GgufCheckpoint> checkpoint,
                                         bool bind_experts = true);

// ModelWeights of a pack of a GGUF (`sluice pack FILE.gguf`; layout.json's source_layout "gguf"): the
// dense file's tensors under their GGUF names, each in its ggml type (layout.json's ggml_type over its U8
// blocks, or its own float dtype), bound exactly as load_gguf_weights binds a GGUF's — the same views of
// the same bytes. The routed experts are the pack's expert files' (MoeWeights::experts stays empty). The
// views point into `dense` (its dense.safetensors, mapped), which ModelWeights::checkpoint keeps; `layout`
// must have been checked against it (model::check_pack_dense).
Expected<ModelWeights> load_gguf_pack_weights(const ModelConfig& config, const format::PackLayout& layout,
                                              std::shared_ptr<format::Checkpoint> dense);
// The multi-token-prediction layers a GGUF pack holds (0 or 1): Qwen3-Next / 3.5's MTP block,
// blk.{n_layers}.nextn.*, is there when its eh_proj is (a GGUF's config counts it from the metadata).
int64_t gguf_pack_mtp_layers(const ModelConfig& config, const format::PackLayout& layout);

// The CPU's decode layout for the dense core (kernels/ggml_tiles.h): every bound product weight whose
// format has row tiles (Q4_0, Q6_K, Q8_0 or MXFP4 with rows a multiple of 16) is rewritten as them into a
// buffer of `weights->owned`, and the mapped file pages it was read from are handed back (madvise), so
// resident memory does not grow by the copy. The embedding table is left as it is (a lookup, not a product),
// unless the lm_head is tied to it: then the table is tiled and both views read the tiles (a lookup untiles
// its row); routed experts are the expert store's (ExpertStoreOptions::cpu_row_tiles). For a forward on the
// CPU with int8 activations only: a GPU backend uploads weights as the file holds them. Returns the bytes
// rewritten.
uint64_t use_dense_row_tiles(ModelWeights* weights);

// Matrix `index` of `tensor` (a 2-D tensor's only one, or expert `index` of a routed-expert tensor
// [E, rows, cols], GGUF dims {cols, rows, E}) as a [rows, cols] view of the tensor's type, its bytes
// at data + index · rows · row_bytes (`data`: the tensor's bytes, mapped or read into a cache slot).
// The tensor's type must be one ggml_weight_format knows.
kernels::WeightView gguf_matrix_view(const format::GgufTensor& tensor, const void* data, int64_t index);

}  // namespace sluice::model
