// gpt-oss's expert tensors (gpt_oss_experts.h).
#include "model/gpt_oss_experts.h"

#include <cstring>

namespace sluice::model {

using format::DType;
using format::TensorInfo;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// The tensor `name`, of `shape` and a dtype `ok` accepts (`want` names them in the error).
Expected<const TensorInfo*> find_checked(const format::Checkpoint& ck, const std::string& name,
                                         const std::vector<int64_t>& shape, bool (*ok)(DType),
                                         const char* want) {
    const TensorInfo* t = ck.find(name);
    if (t == nullptr)
        return error(ErrorCode::kNotFound, "[tensors] missing tensor '" + name + "' in " + ck.dir());
    if (!ok(t->dtype) || t->shape != shape)
        return error(ErrorCode::kInvalidArgument, "[tensors] tensor '" + name + "': expected " + want + " " +
                                                      shape_str(shape) + ", got " +
                                                      format::describe(t->dtype, t->shape));
    return t;
}

bool is_u8(DType d) {
    return d == DType::kU8;
}
bool is_float(DType d) {
    return format::is_float_dtype(d);
}

}  // namespace

bool is_gpt_oss_expert_bias(const std::string& name) {
    return name.ends_with(".mlp.experts.gate_up_proj_bias") || name.ends_with(".mlp.experts.down_proj_bias");
}

Expected<GptOssExpertTensors> gpt_oss_expert_tensors(const ModelConfig& cfg, const format::Checkpoint& ck,
                                                     const TensorNames& names, int64_t l) {
    const int64_t E = cfg.n_experts, I = cfg.expert_ffn, H = cfg.hidden;
    const std::string p = names.layer(l) + names.experts();
    GptOssExpertTensors t;
    t.mxfp4 = ck.find(p + "gate_up_proj_blocks") != nullptr;
    if (t.mxfp4) {
        if (H % kMxfp4Block != 0 || I % kMxfp4Block != 0)
            return error(ErrorCode::kInvalidArgument,
                         "[tensors] '" + p + "gate_up_proj_blocks': MXFP4 experts need hidden_size (" +
                             std::to_string(H) + ") and intermediate_size (" + std::to_string(I) +
                             ") to be multiples of 32");
        const int64_t hb = H / kMxfp4Block, ib = I / kMxfp4Block;
        SLUICE_ASSIGN_OR_RETURN(t.gate_up, find_checked(ck, p + "gate_up_proj_blocks", {E, 2 * I, hb, 16},
                                                        is_u8, "U8 (MXFP4 codes)"));
        SLUICE_ASSIGN_OR_RETURN(t.gate_up_scales, find_checked(ck, p + "gate_up_proj_scales", {E, 2 * I, hb},
                                                               is_u8, "U8 (e8m0 scales)"));
        SLUICE_ASSIGN_OR_RETURN(
            t.down, find_checked(ck, p + "down_proj_blocks", {E, H, ib, 16}, is_u8, "U8 (MXFP4 codes)"));
        SLUICE_ASSIGN_OR_RETURN(
            t.down_scales, find_checked(ck, p + "down_proj_scales", {E, H, ib}, is_u8, "U8 (e8m0 scales)"));
    } else {
        SLUICE_ASSIGN_OR_RETURN(
            t.gate_up, find_checked(ck, p + "gate_up_proj", {E, H, 2 * I}, is_float, "F32/F16/BF16"));
        SLUICE_ASSIGN_OR_RETURN(t.down,
                                find_checked(ck, p + "down_proj", {E, I, H}, is_float, "F32/F16/BF16"));
    }
    SLUICE_ASSIGN_OR_RETURN(t.gate_up_bias,
                            find_checked(ck, p + "gate_up_proj_bias", {E, 2 * I}, is_float, "F32/F16/BF16"));
    SLUICE_ASSIGN_OR_RETURN(t.down_bias,
                            find_checked(ck, p + "down_proj_bias", {E, H}, is_float, "F32/F16/BF16"));
    return t;
}

void mxfp4_row_hub_to_ggml(const uint8_t* blocks, const uint8_t* scales, int64_t cols, uint8_t* out) {
    for (int64_t b = 0; b < cols / kMxfp4Block; ++b) {
        const uint8_t* in = blocks + b * 16;
        uint8_t* o = out + b * kMxfp4BlockBytes;
        o[0] = scales[b];
        auto code = [&](int i) { return (in[i / 2] >> (4 * (i % 2))) & 0xF; };
        for (int j = 0; j < 16; ++j) o[1 + j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
    }
}

void gpt_oss_column(const uint8_t* src, int64_t in, int64_t stride, int64_t r, size_t element_bytes,
                    uint8_t* out) {
    for (int64_t c = 0; c < in; ++c)
        std::memcpy(out + static_cast<size_t>(c) * element_bytes,
                    src + static_cast<size_t>(c * stride + r) * element_bytes, element_bytes);
}

}  // namespace sluice::model
