#include "model/weights.h"

#include <cmath>
#include <cstring>

#include "core/log.h"

namespace sluice::model {

using format::DType;
using format::TensorInfo;
using kernels::ScaleType;
using kernels::WeightType;

const char* layout_name(CheckpointLayout layout) {
    return layout == CheckpointLayout::kMlx ? "mlx" : "huggingface";
}

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

Status mismatch(const std::string& name, const std::string& expected, const TensorInfo& t) {
    return error(ErrorCode::kInvalidArgument, "[weights] tensor '" + name + "': expected " + expected +
                                                  ", got " + format::describe(t.dtype, t.shape));
}

// Binds tensor names to kernel views for one checkpoint.
class Binder {
 public:
    Binder(const ModelConfig& cfg, const format::Checkpoint& ckpt) : cfg_(cfg), ckpt_(ckpt) {}

    const TensorInfo* find(const std::string& name) const { return ckpt_.find(name); }

    Expected<const TensorInfo*> require(const std::string& name) const {
        const TensorInfo* t = ckpt_.find(name);
        if (t == nullptr)
            return error(ErrorCode::kNotFound, "[weights] missing tensor '" + name + "' in " + ckpt_.dir());
        return t;
    }

    // A (possibly stacked) linear at module path `path`: `count` matrices of [rows, cols]
    // (count 0 = a plain 2-D tensor). Returns one view per matrix.
    Expected<std::vector<WeightView>> linear_stack(const std::string& path, int64_t count, int64_t rows,
                                                   int64_t cols,
                                                   const std::string& weight_suffix = ".weight") {
        const std::string wname = path + weight_suffix;
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* w, require(wname));
        std::vector<int64_t> lead;
        if (count > 0) lead.push_back(count);
        const int64_t n = count > 0 ? count : 1;
        std::vector<WeightView> views(static_cast<size_t>(n));

        const TensorInfo* scales = find(path + ".scales");
        if (scales == nullptr) {
            WeightType type;
            switch (w->dtype) {
                case DType::kF32: type = WeightType::kF32; break;
                case DType::kF16: type = WeightType::kF16; break;
                case DType::kBF16: type = WeightType::kBF16; break;
                default:
                    return mismatch(wname, "F32, F16 or BF16 " + shape_str(with(lead, {rows, cols})), *w);
            }
            if (w->shape != with(lead, {rows, cols}))
                return mismatch(
                    wname,
                    std::string(format::dtype_name(w->dtype)) + " " + shape_str(with(lead, {rows, cols})),
                    *w);
            const size_t stride = static_cast<size_t>(rows * cols) * format::dtype_size(w->dtype);
            for (int64_t e = 0; e < n; ++e) {
                WeightView& v = views[static_cast<size_t>(e)];
                v.type = type;
                v.rows = rows;
                v.cols = cols;
                v.data = w->data + e * stride;
            }
            return views;
        }

        // MLX affine: bits and group size from the config, cross-checked against the shapes.
        if (!cfg_.quantization.present) {
            return error(
                ErrorCode::kInvalidArgument,
                "[weights] tensor '" + path + ".scales' exists but config.json has no 'quantization' block");
        }
        QuantSpec spec = cfg_.quantization.for_module(path);
        if (spec.bits == 0) {
            return error(ErrorCode::kInvalidArgument,
                         "[weights] module '" + path +
                             "' is quantized in the checkpoint but unquantized in config.json");
        }
        if (cols % spec.group_size != 0 || (cols * spec.bits) % 32 != 0) {
            return error(ErrorCode::kInvalidArgument,
                         "[weights] module '" + path + "': input size " + std::to_string(cols) +
                             " is not a multiple of group size " + std::to_string(spec.group_size));
        }
        const int64_t words = cols * spec.bits / 32;
        const int64_t groups = cols / spec.group_size;
        const std::string quant_desc =
            std::to_string(spec.bits) + "-bit group " + std::to_string(spec.group_size);
        if (w->dtype != DType::kU32 || w->shape != with(lead, {rows, words})) {
            return mismatch(wname,
                            "U32 " + shape_str(with(lead, {rows, words})) + " (" + quant_desc + " of " +
                                shape_str(with(lead, {rows, cols})) + ")",
                            *w);
        }
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* biases, require(path + ".biases"));
        for (const TensorInfo* sb : {scales, biases}) {
            const std::string sname = sb == scales ? path + ".scales" : path + ".biases";
            if (sb->shape != with(lead, {rows, groups}) ||
                (sb->dtype != DType::kF32 && sb->dtype != DType::kF16 && sb->dtype != DType::kBF16)) {
                return mismatch(
                    sname, "F32/F16/BF16 " + shape_str(with(lead, {rows, groups})) + " (" + quant_desc + ")",
                    *sb);
            }
        }
        if (scales->dtype != biases->dtype)
            return mismatch(path + ".biases", format::dtype_name(scales->dtype), *biases);
        const ScaleType stype = scales->dtype == DType::kF32   ? ScaleType::kF32
                                : scales->dtype == DType::kF16 ? ScaleType::kF16
                                                               : ScaleType::kBF16;
        const size_t wstride = static_cast<size_t>(rows * words) * 4;
        const size_t sstride = static_cast<size_t>(rows * groups) * format::dtype_size(scales->dtype);
        for (int64_t e = 0; e < n; ++e) {
            WeightView& v = views[static_cast<size_t>(e)];
            v.type = spec.bits == 4 ? WeightType::kQ4 : WeightType::kQ8;
            v.rows = rows;
            v.cols = cols;
            v.data = w->data + e * wstride;
            v.scales = scales->data + e * sstride;
            v.biases = biases->data + e * sstride;
            v.scale_type = stype;
            v.group_size = spec.group_size;
        }
        return views;
    }

    Expected<WeightView> linear(const std::string& path, int64_t rows, int64_t cols) {
        SLUICE_ASSIGN_OR_RETURN(auto views, linear_stack(path, 0, rows, cols));
        return views[0];
    }

    // A small float tensor of `numel` elements (any shape with that many), converted to f32.
    Expected<std::vector<float>> floats(const std::string& name, int64_t numel, float add = 0.0f) {
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* t, require(name));
        if (t->numel() != numel ||
            (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)) {
            return mismatch(name, "F32/F16/BF16 with " + std::to_string(numel) + " elements", *t);
        }
        std::vector<float> out(static_cast<size_t>(numel));
        for (int64_t i = 0; i < numel; ++i) {
            if (t->dtype == DType::kF32) {
                std::memcpy(&out[i], t->data + 4 * i, 4);
            } else {
                uint16_t h;
                std::memcpy(&h, t->data + 2 * i, 2);
                out[i] = t->dtype == DType::kBF16 ? kernels::bf16_to_f32(h) : kernels::f16_to_f32(h);
            }
            out[i] += add;
        }
        return out;
    }

 private:
    static std::vector<int64_t> with(std::vector<int64_t> lead, std::initializer_list<int64_t> tail) {
        lead.insert(lead.end(), tail);
        return lead;
    }

    const ModelConfig& cfg_;
    const format::Checkpoint& ckpt_;
};

uint64_t view_bytes(const WeightView& v) {
    uint64_t b = static_cast<uint64_t>(v.rows) * v.row_bytes();
    if (v.quantized()) {
        const uint64_t ss = v.scale_type == ScaleType::kF32 ? 4 : 2;
        b += 2 * static_cast<uint64_t>(v.rows) * static_cast<uint64_t>(v.cols / v.group_size) * ss;
    }
    return b;
}

uint64_t expert_bytes(const ExpertWeights& e) {
    return view_bytes(e.gate) + view_bytes(e.up) + view_bytes(e.down);
}

// Routed experts in any of the three checkpoint layouts: MLX stacked switch_mlp, the fused
// Qwen3.5/3.6 gate_up_proj, or one tensor per expert and projection.
Status bind_routed_experts(Binder& b, const ModelConfig& cfg, const std::string& p, MoeWeights* moe) {
    MoeWeights& m = *moe;
    const int64_t E = cfg.n_experts, I = cfg.expert_ffn, H = cfg.hidden;
    m.experts.resize(static_cast<size_t>(E));
    if (b.find(p + "mlp.switch_mlp.gate_proj.weight") != nullptr) {
        // MLX stacked experts: one [E, out, in] tensor per projection.
        SLUICE_ASSIGN_OR_RETURN(auto g, b.linear_stack(p + "mlp.switch_mlp.gate_proj", E, I, H));
        SLUICE_ASSIGN_OR_RETURN(auto u, b.linear_stack(p + "mlp.switch_mlp.up_proj", E, I, H));
        SLUICE_ASSIGN_OR_RETURN(auto dn, b.linear_stack(p + "mlp.switch_mlp.down_proj", E, H, I));
        for (int64_t e = 0; e < E; ++e) m.experts[e] = {g[e], u[e], dn[e]};
    } else if (b.find(p + "mlp.experts.gate_up_proj") != nullptr) {
        // Qwen3.5/3.6 fused: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
        SLUICE_ASSIGN_OR_RETURN(auto gu, b.linear_stack(p + "mlp.experts.gate_up_proj", E, 2 * I, H, ""));
        SLUICE_ASSIGN_OR_RETURN(auto dn, b.linear_stack(p + "mlp.experts.down_proj", E, H, I, ""));
        if (gu[0].quantized()) {
            return error(ErrorCode::kUnsupported,
                         "[weights] quantized fused gate_up_proj in '" + p +
                             "mlp.experts' is not supported (MLX checkpoints use switch_mlp)");
        }
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& ex = m.experts[e];
            ex.gate = gu[e];
            ex.gate.rows = I;
            ex.up = gu[e];
            ex.up.rows = I;
            ex.up.data = static_cast<const uint8_t*>(gu[e].data) + static_cast<size_t>(I) * gu[e].row_bytes();
            ex.down = dn[e];
        }
    } else {
        for (int64_t e = 0; e < E; ++e) {
            const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
            ExpertWeights& ex = m.experts[e];
            SLUICE_ASSIGN_OR_RETURN(ex.gate, b.linear(ep + "gate_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(ex.up, b.linear(ep + "up_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(ex.down, b.linear(ep + "down_proj", H, I));
        }
    }
    return Status::ok();
}

}  // namespace

std::string text_model_prefix(const format::Checkpoint& ck, std::string* lm_head_path) {
    for (const auto& [p, head] : {std::pair<std::string, std::string>{"model.", "lm_head"},
                                  {"model.language_model.", "lm_head"},
                                  {"language_model.model.", "language_model.lm_head"}}) {
        if (ck.find(p + "embed_tokens.weight") != nullptr) {
            if (lm_head_path) *lm_head_path = head;
            return p;
        }
    }
    return "";
}

CheckpointLayout detect_checkpoint_layout(const ModelConfig& cfg, const format::Checkpoint& ck,
                                          const std::string& prefix) {
    // MLX-converted checkpoints store conv1d as [C, K, 1] and have the zero-centred +1 folded into
    // the norm weights; raw Hugging Face ones store [C, 1, K] (models.md §1.2). Decide once.
    bool mlx_layout = false;
    for (const auto& name : ck.names()) {
        if (name.find(".switch_mlp.") != std::string::npos) {
            mlx_layout = true;
            break;
        }
    }
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
        if (cfg.is_full_attention(l)) continue;
        const TensorInfo* conv =
            ck.find(prefix + "layers." + std::to_string(l) + ".linear_attn.conv1d.weight");
        if (conv != nullptr && conv->shape.size() == 3)
            mlx_layout = conv->shape[2] == 1 && conv->shape[1] != 1;
        break;
    }
    return mlx_layout ? CheckpointLayout::kMlx : CheckpointLayout::kHuggingFace;
}

Expected<ModelWeights> load_weights(const ModelConfig& cfg, std::shared_ptr<format::Checkpoint> checkpoint,
                                    bool bind_experts) {
    const format::Checkpoint& ck = *checkpoint;
    Binder b(cfg, ck);
    ModelWeights mw;

    // Name prefix of the text model, and of lm_head, by which embedding table exists.
    std::string lm_head_path;
    const std::string prefix = text_model_prefix(ck, &lm_head_path);
    if (prefix.empty()) {
        return error(ErrorCode::kNotFound,
                     "[weights] no embedding table in " + ck.dir() +
                         " (looked for model.embed_tokens.weight, model.language_model.embed_tokens.weight, "
                         "language_model.model.embed_tokens.weight)");
    }

    const bool mlx_layout = detect_checkpoint_layout(cfg, ck, prefix) == CheckpointLayout::kMlx;
    mw.layout = mlx_layout ? CheckpointLayout::kMlx : CheckpointLayout::kHuggingFace;
    const float norm_add = cfg.zero_centered_norms() && !mlx_layout ? 1.0f : 0.0f;

    const int64_t H = cfg.hidden;
    SLUICE_ASSIGN_OR_RETURN(mw.embed, b.linear(prefix + "embed_tokens", cfg.vocab, H));
    SLUICE_ASSIGN_OR_RETURN(mw.final_norm, b.floats(prefix + "norm.weight", H, norm_add));
    if (b.find(lm_head_path + ".weight") != nullptr) {
        SLUICE_ASSIGN_OR_RETURN(mw.lm_head, b.linear(lm_head_path, cfg.vocab, H));
    } else if (cfg.tie_word_embeddings) {
        mw.lm_head = mw.embed;
    } else {
        return error(ErrorCode::kNotFound, "[weights] missing tensor '" + lm_head_path +
                                               ".weight' (and tie_word_embeddings is false)");
    }
    mw.dense_bytes += view_bytes(mw.embed) + (mw.lm_head.data != mw.embed.data ? view_bytes(mw.lm_head) : 0);

    mw.layers.resize(static_cast<size_t>(cfg.n_layers));
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
        LayerWeights& lw = mw.layers[static_cast<size_t>(l)];
        const std::string p = prefix + "layers." + std::to_string(l) + ".";
        SLUICE_ASSIGN_OR_RETURN(lw.input_norm, b.floats(p + "input_layernorm.weight", H, norm_add));
        SLUICE_ASSIGN_OR_RETURN(lw.post_norm, b.floats(p + "post_attention_layernorm.weight", H, norm_add));

        if (cfg.is_full_attention(l)) {
            AttentionWeights& a = lw.attn;
            const int64_t q_rows = cfg.n_heads * cfg.head_dim * (cfg.attn_output_gate ? 2 : 1);
            SLUICE_ASSIGN_OR_RETURN(a.q_proj, b.linear(p + "self_attn.q_proj", q_rows, H));
            SLUICE_ASSIGN_OR_RETURN(a.k_proj,
                                    b.linear(p + "self_attn.k_proj", cfg.n_kv_heads * cfg.head_dim, H));
            SLUICE_ASSIGN_OR_RETURN(a.v_proj,
                                    b.linear(p + "self_attn.v_proj", cfg.n_kv_heads * cfg.head_dim, H));
            SLUICE_ASSIGN_OR_RETURN(a.o_proj,
                                    b.linear(p + "self_attn.o_proj", H, cfg.n_heads * cfg.head_dim));
            SLUICE_ASSIGN_OR_RETURN(a.q_norm,
                                    b.floats(p + "self_attn.q_norm.weight", cfg.head_dim, norm_add));
            SLUICE_ASSIGN_OR_RETURN(a.k_norm,
                                    b.floats(p + "self_attn.k_norm.weight", cfg.head_dim, norm_add));
            for (const WeightView* v : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj})
                mw.dense_bytes += view_bytes(*v);
        } else {
            DeltaNetWeights& d = lw.linear;
            const int64_t kd = cfg.linear_key_dim(), vd = cfg.linear_value_dim(), nv = cfg.linear_v_heads;
            const std::string q = p + "linear_attn.";
            if (cfg.split_linear_projections) {
                SLUICE_ASSIGN_OR_RETURN(d.in_qkv, b.linear(q + "in_proj_qkv", 2 * kd + vd, H));
                SLUICE_ASSIGN_OR_RETURN(d.in_z, b.linear(q + "in_proj_z", vd, H));
                SLUICE_ASSIGN_OR_RETURN(d.in_b, b.linear(q + "in_proj_b", nv, H));
                SLUICE_ASSIGN_OR_RETURN(d.in_a, b.linear(q + "in_proj_a", nv, H));
                for (const WeightView* v : {&d.in_qkv, &d.in_z, &d.in_b, &d.in_a})
                    mw.dense_bytes += view_bytes(*v);
            } else {
                SLUICE_ASSIGN_OR_RETURN(d.in_qkvz, b.linear(q + "in_proj_qkvz", 2 * kd + 2 * vd, H));
                SLUICE_ASSIGN_OR_RETURN(d.in_ba, b.linear(q + "in_proj_ba", 2 * nv, H));
                mw.dense_bytes += view_bytes(d.in_qkvz) + view_bytes(d.in_ba);
            }
            SLUICE_ASSIGN_OR_RETURN(d.conv, b.floats(q + "conv1d.weight", cfg.conv_dim() * cfg.conv_kernel));
            SLUICE_ASSIGN_OR_RETURN(auto a_log, b.floats(q + "A_log", nv));
            d.neg_a.resize(static_cast<size_t>(nv));
            for (int64_t j = 0; j < nv; ++j) d.neg_a[j] = -std::exp(a_log[j]);
            SLUICE_ASSIGN_OR_RETURN(d.dt_bias, b.floats(q + "dt_bias", nv));
            SLUICE_ASSIGN_OR_RETURN(d.norm, b.floats(q + "norm.weight", cfg.linear_v_dim));
            SLUICE_ASSIGN_OR_RETURN(d.out_proj, b.linear(q + "out_proj", H, vd));
            mw.dense_bytes += view_bytes(d.out_proj);
        }

        if (!cfg.is_moe_layer(l)) {
            const int64_t I = cfg.dense_ffn;
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.gate, b.linear(p + "mlp.gate_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.up, b.linear(p + "mlp.up_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.down, b.linear(p + "mlp.down_proj", H, I));
            mw.dense_bytes += expert_bytes(lw.dense_mlp);
            continue;
        }
        MoeWeights& m = lw.moe_w;
        const int64_t E = cfg.n_experts;
        SLUICE_ASSIGN_OR_RETURN(m.router, b.linear(p + "mlp.gate", E, H));
        mw.dense_bytes += view_bytes(m.router);
        if (bind_experts) SLUICE_RETURN_IF_ERROR(bind_routed_experts(b, cfg, p, &m));
        for (const auto& ex : m.experts) mw.expert_bytes += expert_bytes(ex);

        if (cfg.shared_expert_ffn > 0) {
            m.has_shared = true;
            const int64_t Is = cfg.shared_expert_ffn;
            SLUICE_ASSIGN_OR_RETURN(m.shared.gate, b.linear(p + "mlp.shared_expert.gate_proj", Is, H));
            SLUICE_ASSIGN_OR_RETURN(m.shared.up, b.linear(p + "mlp.shared_expert.up_proj", Is, H));
            SLUICE_ASSIGN_OR_RETURN(m.shared.down, b.linear(p + "mlp.shared_expert.down_proj", H, Is));
            SLUICE_ASSIGN_OR_RETURN(m.shared_gate, b.linear(p + "mlp.shared_expert_gate", 1, H));
            mw.dense_bytes += expert_bytes(m.shared) + view_bytes(m.shared_gate);
        }
    }
    log::debug("[weights] {} layout, prefix '{}', dense {:.1f} MB, experts {:.1f} MB", layout_name(mw.layout),
               prefix, mw.dense_bytes / 1e6, mw.expert_bytes / 1e6);
    mw.checkpoint = std::move(checkpoint);
    return mw;
}

}  // namespace sluice::model
