// gpt-oss's routed experts as its checkpoints store them, turned into sluice's [out, in] matrices.
//
// transformers' GptOssExperts holds, per layer, gate_up_proj [E, H, 2I] and down_proj [E, I, H] input-major
// (y = x @ W), the gate and up outputs interleaved (column 2j is gate row j, 2j + 1 up row j), with biases
// gate_up_proj_bias [E, 2I] and down_proj_bias [E, H]. The Hub's checkpoints store the two weights in MXFP4
// instead (quantization_config quant_method "mxfp4"): gate_up_proj_blocks U8 [E, 2I, H/32, 16] with
// gate_up_proj_scales U8 [E, 2I, H/32], down_proj_blocks [E, H, I/32, 16] with down_proj_scales
// [E, H, I/32] — output-major rows of 32-element blocks, each an e8m0 scale (2^(s − 127)) and 16 bytes of
// e2m1 codes, byte j holding element 2j in its low nibble and 2j + 1 in its high one (transformers'
// integrations/mxfp4.py, convert_moe_packed_tensors). ggml's MXFP4 (block_mxfp4: the scale byte, then 16
// bytes with element j low and j + 16 high) is the same numbers in another nibble order, so a row converts
// exactly; sluice's MXFP4 kernels then run it.
//
// Both the load of a checkpoint directory (weights.cpp: converted into the weights' own buffers) and
// `sluice pack` (convert/pack_plan.cpp: row by row as the source streams) go through these functions.
// The biases are small ([E, 2I + H] per layer) and stay with the dense core (f32 at load), not in the
// expert records.
#pragma once

#include <cstdint>
#include <string>

#include "format/safetensors.h"
#include "model/config.h"
#include "model/tensor_map.h"
#include "sluice/status.h"

namespace sluice::model {

// One layer's expert tensors of a gpt-oss checkpoint, found and checked (dtype and shape, errors naming
// the tensor): either the float pair or the MXFP4 blocks with their scales.
struct GptOssExpertTensors {
    bool mxfp4 = false;
    const format::TensorInfo* gate_up = nullptr;  // float [E, H, 2I], or MXFP4 blocks [E, 2I, H/32, 16]
    const format::TensorInfo* down = nullptr;     // float [E, I, H], or MXFP4 blocks [E, H, I/32, 16]
    const format::TensorInfo* gate_up_scales = nullptr;  // MXFP4 only: U8 [E, 2I, H/32]
    const format::TensorInfo* down_scales = nullptr;     // U8 [E, H, I/32]
    const format::TensorInfo* gate_up_bias = nullptr;    // [E, 2I]
    const format::TensorInfo* down_bias = nullptr;       // [E, H]
};

// The module path of layer l's experts (names.layer(l) + "mlp.experts.") and the tensors under it.
Expected<GptOssExpertTensors> gpt_oss_expert_tensors(const ModelConfig& config,
                                                     const format::Checkpoint& checkpoint,
                                                     const TensorNames& names, int64_t l);
// Whether `tensor_name` is one of gpt-oss's expert biases (kept with the dense core).
bool is_gpt_oss_expert_bias(const std::string& tensor_name);

constexpr int64_t kMxfp4Block = 32;       // elements per block
constexpr int64_t kMxfp4BlockBytes = 17;  // ggml's block_mxfp4: the e8m0 scale, 16 code bytes

// One row of `cols` elements from the Hub's MXFP4 (`blocks`: cols / 32 × 16 code bytes; `scales`:
// cols / 32 e8m0 bytes) into ggml's block_mxfp4 layout at `out` (cols / 32 × 17 bytes). Exact.
void mxfp4_row_hub_to_ggml(const uint8_t* blocks, const uint8_t* scales, int64_t cols, uint8_t* out);

// Row `r` of an expert's float matrix stored input-major as [in, stride] (the expert's slice of
// gate_up_proj, stride 2I, or of down_proj, stride H): out[c] = src[c · stride + r] for c < in, in the
// source's element type (`element_bytes` 2 or 4). For gate row j take r = 2j, for up row j r = 2j + 1.
void gpt_oss_column(const uint8_t* src, int64_t in, int64_t stride, int64_t r, size_t element_bytes,
                    uint8_t* out);

}  // namespace sluice::model
