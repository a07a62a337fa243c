// The tensor map (tensor_map.h): module paths, expert layouts, validated matrix slices.
#include "model/tensor_map.h"

#include "kernels/weight_format.h"

namespace sluice::model {

using format::DType;
using format::TensorInfo;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

Status mismatch(const std::string& name, const std::string& expected, const TensorInfo& t) {
    return error(ErrorCode::kInvalidArgument, "[tensors] tensor '" + name + "': expected " + expected +
                                                  ", got " + format::describe(t.dtype, t.shape));
}

Expected<const TensorInfo*> require(const format::Checkpoint& ck, const std::string& name) {
    const TensorInfo* t = ck.find(name);
    if (t == nullptr)
        return error(ErrorCode::kNotFound, "[tensors] missing tensor '" + name + "' in " + ck.dir());
    return t;
}

}  // namespace

bool TensorNames::is_routed_expert(const std::string& name) {
    // gpt-oss's expert biases stay with the dense core (model/gpt_oss_experts.h).
    if (name.ends_with(".mlp.experts.gate_up_proj_bias") || name.ends_with(".mlp.experts.down_proj_bias"))
        return false;
    for (const char* part :
         {".mlp.experts.", ".mlp.switch_mlp.", ".block_sparse_moe.experts.", ".block_sparse_moe.switch_mlp."})
        if (name.find(part) != std::string::npos) return true;
    return false;
}

namespace {

// The family's MoE module names on `names`.
TensorNames with_family(TensorNames names, const ModelConfig& config) {
    names.nextn = config.family == Family::kGlm4Moe || config.family == Family::kDeepseekV3;
    if (config.family == Family::kMixtral) {
        names.moe = "block_sparse_moe.";
        names.expert_projections = {"w1", "w3", "w2"};
    }
    if (config.family == Family::kGptOss) names.router_name = "router";
    return names;
}

}  // namespace

bool TensorNames::is_auxiliary(const std::string& name) {
    return name.rfind("model.visual.", 0) == 0 || name.rfind("vision_tower.", 0) == 0 ||
           name.rfind("model.mtp.", 0) == 0;
}

int64_t mtp_layers_in(const ModelConfig& config, const format::Checkpoint& checkpoint) {
    if (config.family == Family::kGlm4Moe || config.family == Family::kDeepseekV3) {
        if (config.nextn_layers == 0) return 0;
        const TensorNames names = with_family(TensorNames{"model.", "lm_head", config.n_layers}, config);
        return checkpoint.find(names.mtp_fc() + ".weight") != nullptr ? 1 : 0;
    }
    if (config.family != Family::kQwen3Next && config.family != Family::kQwen35Moe) return 0;
    return checkpoint.find(std::string(TensorNames::kMtpFc) + ".weight") != nullptr ? 1 : 0;
}

int TensorNames::module_bits(const ModelConfig& config, const std::string& module, int bits) {
    if (module.ends_with(".mlp.gate") || module.ends_with(".block_sparse_moe.gate") ||
        module.ends_with(".mlp.router"))
        return config.router_sigmoid ? 16 : 8;
    return module.ends_with(kSharedExpertGate) ? 8 : bits;
}

Expected<TensorNames> find_tensor_names(const format::Checkpoint& ck, const ModelConfig& config) {
    for (const auto& [p, head] : {std::pair<std::string, std::string>{"model.", "lm_head"},
                                  {"model.language_model.", "lm_head"},
                                  {"language_model.model.", "language_model.lm_head"}}) {
        if (ck.find(p + "embed_tokens.weight") != nullptr)
            return with_family(TensorNames{p, head, config.n_layers}, config);
    }
    return error(ErrorCode::kNotFound,
                 "[tensors] no embedding table in " + ck.dir() +
                     " (looked for model.embed_tokens.weight, model.language_model.embed_tokens.weight, "
                     "language_model.model.embed_tokens.weight)");
}

TensorNames tensor_names_for(const ModelConfig& config) {
    return with_family(TensorNames{config.family == Family::kQwen35Moe ? "model.language_model." : "model.",
                                   "lm_head", config.n_layers},
                       config);
}

Expected<kernels::WeightType> weight_type_of(DType dtype, int bits) {
    if (bits == 0) {
        switch (dtype) {
            case DType::kF32: return kernels::WeightType::kF32;
            case DType::kF16: return kernels::WeightType::kF16;
            case DType::kBF16: return kernels::WeightType::kBF16;
            default:
                return error(ErrorCode::kUnsupported, std::string("[tensors] no weight format stores ") +
                                                          format::dtype_name(dtype) + " elements");
        }
    }
    const kernels::WeightFormat* f = kernels::quantized_format(bits);
    if (f == nullptr || dtype != DType::kU32)
        return error(ErrorCode::kUnsupported, "[tensors] no weight format stores " + std::to_string(bits) +
                                                  "-bit codes in " + format::dtype_name(dtype) +
                                                  " (registered: 4- and 8-bit MLX affine in U32)");
    return f->type;
}

Expected<kernels::WeightType> weight_type_of(const format::PackProjection& p) {
    if (!p.ggml_type) return weight_type_of(p.weight.dtype, p.bits);
    const kernels::WeightFormat* f = kernels::ggml_weight_format(static_cast<uint32_t>(*p.ggml_type));
    if (f == nullptr || !f->cpu_kernels)
        return error(ErrorCode::kUnsupported, std::string("[tensors] no weight format runs ggml type ") +
                                                  format::ggml_type_name(*p.ggml_type));
    return f->type;
}

kernels::ScaleType scale_type_of(DType dtype) {
    return dtype == DType::kF32   ? kernels::ScaleType::kF32
           : dtype == DType::kF16 ? kernels::ScaleType::kF16
                                  : kernels::ScaleType::kBF16;
}

Expected<std::vector<SourceMatrix>> source_linear(const ModelConfig& cfg, const format::Checkpoint& ck,
                                                  const std::string& path, int64_t count, int64_t rows,
                                                  int64_t cols, const std::string& weight_suffix) {
    const std::string wname = path + weight_suffix;
    SLUICE_ASSIGN_OR_RETURN(const TensorInfo* w, require(ck, wname));
    std::vector<int64_t> lead;
    if (count > 0) lead.push_back(count);
    auto with = [&](int64_t a, int64_t b) {
        auto s = lead;
        s.push_back(a);
        s.push_back(b);
        return s;
    };
    const int64_t n = count > 0 ? count : 1;
    std::vector<SourceMatrix> out(static_cast<size_t>(n));
    const TensorInfo* scales = ck.find(path + ".scales");
    if (w->dtype == DType::kF8E4M3 && cfg.fp8_block_rows > 0) {
        if (count > 0 || w->shape != with(rows, cols))
            return mismatch(wname, "F8_E4M3 " + shape_str(with(rows, cols)) + " (one matrix per tensor)", *w);
        const std::string sname = wname + "_scale_inv";
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* s, require(ck, sname));
        const std::vector<int64_t> grid = {(rows + cfg.fp8_block_rows - 1) / cfg.fp8_block_rows,
                                           (cols + cfg.fp8_block_cols - 1) / cfg.fp8_block_cols};
        if (s->dtype != DType::kF32 || s->shape != grid)
            return mismatch(sname,
                            "F32 " + shape_str(grid) + " (one scale per " +
                                std::to_string(cfg.fp8_block_rows) + "x" +
                                std::to_string(cfg.fp8_block_cols) + " block)",
                            *s);
        out[0] = {w, 0, rows, cols};
        out[0].block_scales = s;
        return out;
    }
    if (scales == nullptr) {
        if (!format::is_float_dtype(w->dtype) || w->shape != with(rows, cols))
            return mismatch(wname, "F32, F16 or BF16 " + shape_str(with(rows, cols)), *w);
        SLUICE_ASSIGN_OR_RETURN(const kernels::WeightType type, weight_type_of(w->dtype, 0));
        const uint64_t stride = static_cast<uint64_t>(rows * cols) * format::dtype_size(w->dtype);
        for (int64_t e = 0; e < n; ++e) {
            out[static_cast<size_t>(e)] = {w, e * stride, rows, cols};
            out[static_cast<size_t>(e)].type = type;
        }
        return out;
    }
    // MLX affine: bits and group size from the config, cross-checked against the shapes.
    if (!cfg.quantization.present)
        return error(
            ErrorCode::kInvalidArgument,
            "[tensors] tensor '" + path + ".scales' exists but config.json has no 'quantization' block");
    const QuantSpec spec = cfg.quantization.for_module(path);
    if (spec.bits == 0)
        return error(
            ErrorCode::kInvalidArgument,
            "[tensors] module '" + path + "' is quantized in the checkpoint but unquantized in config.json");
    if (cols % spec.group_size != 0 || (cols * spec.bits) % 32 != 0)
        return error(ErrorCode::kInvalidArgument,
                     "[tensors] module '" + path + "': input size " + std::to_string(cols) +
                         " is not a multiple of group size " + std::to_string(spec.group_size));
    const int64_t words = cols * spec.bits / 32, groups = cols / spec.group_size;
    const std::string quant_desc =
        std::to_string(spec.bits) + "-bit group " + std::to_string(spec.group_size);
    if (w->dtype != DType::kU32 || w->shape != with(rows, words))
        return mismatch(wname,
                        "U32 " + shape_str(with(rows, words)) + " (" + quant_desc + " of " +
                            shape_str(with(rows, cols)) + ")",
                        *w);
    SLUICE_ASSIGN_OR_RETURN(const TensorInfo* biases, require(ck, path + ".biases"));
    for (const TensorInfo* sb : {scales, biases})
        if (!format::is_float_dtype(sb->dtype) || sb->shape != with(rows, groups))
            return mismatch(sb->name,
                            "F32/F16/BF16 " + shape_str(with(rows, groups)) + " (" + quant_desc + ")", *sb);
    if (scales->dtype != biases->dtype)
        return mismatch(biases->name, format::dtype_name(scales->dtype), *biases);
    SLUICE_ASSIGN_OR_RETURN(const kernels::WeightType type, weight_type_of(w->dtype, spec.bits));
    const uint64_t wstride = static_cast<uint64_t>(rows * words) * 4;
    const uint64_t sstride = static_cast<uint64_t>(rows * groups) * format::dtype_size(scales->dtype);
    for (int64_t e = 0; e < n; ++e)
        out[static_cast<size_t>(e)] = {w,      e * wstride, rows,        cols, spec.bits, spec.group_size,
                                       scales, biases,      e * sstride, type};
    return out;
}

Expected<std::vector<std::array<SourceMatrix, 3>>> source_experts(const ModelConfig& cfg,
                                                                  const format::Checkpoint& ck,
                                                                  const TensorNames& names, int64_t l) {
    const int64_t E = cfg.n_experts, I = cfg.expert_ffn, H = cfg.hidden;
    if (cfg.family == Family::kGptOss)
        return error(ErrorCode::kInternal,
                     "[tensors] gpt-oss's experts are converted, not sliced "
                     "(model/gpt_oss_experts.h)");
    const std::string p = names.layer(l);
    std::vector<std::array<SourceMatrix, 3>> out(static_cast<size_t>(E));
    const std::string stacked = p + names.stacked_experts(), experts = p + names.experts();
    if (ck.find(stacked + "gate_proj.weight") != nullptr) {
        SLUICE_ASSIGN_OR_RETURN(auto g, source_linear(cfg, ck, stacked + "gate_proj", E, I, H));
        SLUICE_ASSIGN_OR_RETURN(auto u, source_linear(cfg, ck, stacked + "up_proj", E, I, H));
        SLUICE_ASSIGN_OR_RETURN(auto d, source_linear(cfg, ck, stacked + "down_proj", E, H, I));
        for (size_t e = 0; e < out.size(); ++e) out[e] = {g[e], u[e], d[e]};
    } else if (ck.find(experts + "gate_up_proj") != nullptr) {
        SLUICE_ASSIGN_OR_RETURN(auto gu, source_linear(cfg, ck, experts + "gate_up_proj", E, 2 * I, H, ""));
        SLUICE_ASSIGN_OR_RETURN(auto d, source_linear(cfg, ck, experts + "down_proj", E, H, I, ""));
        if (gu[0].bits != 0)
            return error(ErrorCode::kUnsupported, "[tensors] quantized fused gate_up_proj in '" + experts +
                                                      "' is not supported (MLX checkpoints use switch_mlp)");
        for (size_t e = 0; e < out.size(); ++e) {
            SourceMatrix gate = gu[e], up = gu[e];
            gate.rows = up.rows = I;
            up.offset += static_cast<uint64_t>(I * H) * format::dtype_size(gu[e].w->dtype);
            out[e] = {gate, up, d[e]};
        }
    } else {
        for (int64_t e = 0; e < E; ++e) {
            const std::string ep = experts + std::to_string(e) + ".";
            const auto& [gate, up, down] = names.expert_projections;
            SLUICE_ASSIGN_OR_RETURN(auto g, source_linear(cfg, ck, ep + gate, 0, I, H));
            SLUICE_ASSIGN_OR_RETURN(auto u, source_linear(cfg, ck, ep + up, 0, I, H));
            SLUICE_ASSIGN_OR_RETURN(auto d, source_linear(cfg, ck, ep + down, 0, H, I));
            out[static_cast<size_t>(e)] = {g[0], u[0], d[0]};
        }
    }
    return out;
}

}  // namespace sluice::model
