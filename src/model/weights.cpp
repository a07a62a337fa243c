#include "model/weights.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/log.h"
#include "kernels/weight_format.h"
#include "model/gpt_oss_experts.h"
#include "model/tensor_map.h"

namespace sluice::model {

using format::DType;
using format::TensorInfo;
using kernels::ScaleType;
using kernels::WeightType;

const char* layout_name(CheckpointLayout layout) {
    switch (layout) {
        case CheckpointLayout::kMlx: return "mlx";
        case CheckpointLayout::kGguf: return "gguf";
        case CheckpointLayout::kHuggingFace: break;
    }
    return "huggingface";
}

namespace {

Status mismatch(const std::string& name, const std::string& expected, const TensorInfo& t) {
    return error(ErrorCode::kInvalidArgument, "[weights] tensor '" + name + "': expected " + expected +
                                                  ", got " + format::describe(t.dtype, t.shape));
}

// Binds tensor names to kernel views for one checkpoint.
class Binder {
 public:
    Binder(const ModelConfig& cfg, const format::Checkpoint& ckpt, bool check_only)
        : cfg_(cfg), ckpt_(ckpt), check_only_(check_only) {}

    const TensorInfo* find(const std::string& name) const { return ckpt_.find(name); }

    Expected<const TensorInfo*> require(const std::string& name) const {
        const TensorInfo* t = ckpt_.find(name);
        if (t == nullptr)
            return error(ErrorCode::kNotFound, "[weights] missing tensor '" + name + "' in " + ckpt_.dir());
        return t;
    }

    // A (possibly stacked) linear at module path `path`: `count` matrices of [rows, cols]
    // (count 0 = a plain 2-D tensor), found and checked by the tensor map. One view per matrix.
    Expected<std::vector<WeightView>> linear_stack(const std::string& path, int64_t count, int64_t rows,
                                                   int64_t cols,
                                                   const std::string& weight_suffix = ".weight") {
        SLUICE_ASSIGN_OR_RETURN(auto sources,
                                source_linear(cfg_, ckpt_, path, count, rows, cols, weight_suffix));
        std::vector<WeightView> views;
        views.reserve(sources.size());
        for (const SourceMatrix& m : sources) {
            if (m.block_scales != nullptr && check_only_) {
                views.emplace_back();
                continue;
            }
            if (m.block_scales != nullptr)
                return error(ErrorCode::kUnsupported,
                             "[weights] tensor '" + path + weight_suffix +
                                 "' is FP8 (e4m3 with block scales), which sluice does not run as stored: "
                                 "convert the checkpoint with `sluice pack " +
                                 ckpt_.dir() + " OUT --bits 8` (or 4)");
            views.push_back(view_of(m));
        }
        return views;
    }

    static WeightView view_of(const SourceMatrix& m) {
        WeightView v;
        v.rows = m.rows;
        v.cols = m.cols;
        v.data = m.w->data + m.offset;
        v.type = m.type;  // resolved by the tensor map
        if (m.bits == 0) return v;
        v.scales = m.scales->data + m.sb_offset;
        v.biases = m.biases->data + m.sb_offset;
        v.scale_type = scale_type_of(m.scales->dtype);
        v.group_size = m.group_size;
        return v;
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
    const ModelConfig& cfg_;
    const format::Checkpoint& ckpt_;
    bool check_only_;
};

uint64_t view_bytes(const WeightView& v) {
    const kernels::WeightFormat& f = kernels::weight_format(v.type);
    return static_cast<uint64_t>(v.rows) *
           (f.data_row_bytes(v.cols) + f.aux_row_bytes(v.cols, v.group_size, v.scale_type));
}

uint64_t expert_bytes(const ExpertWeights& e) {
    return view_bytes(e.gate) + view_bytes(e.up) + view_bytes(e.down);
}

// Routed experts in any of the three checkpoint layouts (the tensor map's source_experts).
Status bind_routed_experts(const ModelConfig& cfg, const format::Checkpoint& ck, const TensorNames& names,
                           int64_t l, MoeWeights* moe) {
    SLUICE_ASSIGN_OR_RETURN(auto experts, source_experts(cfg, ck, names, l));
    moe->experts.resize(experts.size());
    for (size_t e = 0; e < experts.size(); ++e)
        moe->experts[e] = {Binder::view_of(experts[e][0]), Binder::view_of(experts[e][1]),
                           Binder::view_of(experts[e][2])};
    return Status::ok();
}

// A plain (unscaled) view of `rows` × `cols` weights of `type` at `data`.
WeightView expert_view(uint8_t* data, int64_t rows, int64_t cols, WeightType type) {
    WeightView v;
    v.rows = rows;
    v.cols = cols;
    v.data = data;
    v.type = type;
    return v;
}

// gpt-oss's routed experts of layer l converted into buffers of `owned` (gpt_oss_experts.h): MXFP4 blocks
// repacked into ggml's MXFP4, float matrices transposed out of their input-major, interleaved layout.
Status bind_gpt_oss_experts(const ModelConfig& cfg, const GptOssExpertTensors& t, MoeWeights* moe,
                            std::vector<std::vector<uint8_t>>* owned) {
    const int64_t E = cfg.n_experts, I = cfg.expert_ffn, H = cfg.hidden;
    moe->experts.resize(static_cast<size_t>(E));
    if (t.mxfp4) {
        const int64_t gu_row = H / kMxfp4Block * kMxfp4BlockBytes, d_row = I / kMxfp4Block * kMxfp4BlockBytes;
        const int64_t per_expert = 2 * I * gu_row + H * d_row;
        std::vector<uint8_t>& buf = owned->emplace_back(static_cast<size_t>(E * per_expert));
        for (int64_t e = 0; e < E; ++e) {
            uint8_t* gate = buf.data() + e * per_expert;
            uint8_t* up = gate + I * gu_row;
            uint8_t* down = up + I * gu_row;
            for (int64_t r = 0; r < 2 * I; ++r)  // rows interleave: 2j gate j, 2j + 1 up j
                mxfp4_row_hub_to_ggml(t.gate_up->data + (e * 2 * I + r) * (H / kMxfp4Block) * 16,
                                      t.gate_up_scales->data + (e * 2 * I + r) * (H / kMxfp4Block), H,
                                      (r % 2 == 0 ? gate : up) + (r / 2) * gu_row);
            for (int64_t r = 0; r < H; ++r)
                mxfp4_row_hub_to_ggml(t.down->data + (e * H + r) * (I / kMxfp4Block) * 16,
                                      t.down_scales->data + (e * H + r) * (I / kMxfp4Block), I,
                                      down + r * d_row);
            moe->experts[static_cast<size_t>(e)] = {expert_view(gate, I, H, WeightType::kGgmlMXFP4),
                                                    expert_view(up, I, H, WeightType::kGgmlMXFP4),
                                                    expert_view(down, H, I, WeightType::kGgmlMXFP4)};
        }
        return Status::ok();
    }
    if (t.gate_up->dtype != t.down->dtype)
        return mismatch(t.down->name, format::dtype_name(t.gate_up->dtype), *t.down);
    SLUICE_ASSIGN_OR_RETURN(const WeightType type, weight_type_of(t.gate_up->dtype, 0));
    const size_t eb = format::dtype_size(t.gate_up->dtype);
    const int64_t per_expert = 3 * I * H;  // elements: gate, up [I, H], down [H, I]
    std::vector<uint8_t>& buf = owned->emplace_back(static_cast<size_t>(E * per_expert) * eb);
    for (int64_t e = 0; e < E; ++e) {
        uint8_t* gate = buf.data() + static_cast<size_t>(e * per_expert) * eb;
        uint8_t* up = gate + static_cast<size_t>(I * H) * eb;
        uint8_t* down = up + static_cast<size_t>(I * H) * eb;
        const uint8_t* gu = t.gate_up->data + static_cast<size_t>(e * H * 2 * I) * eb;
        const uint8_t* dn = t.down->data + static_cast<size_t>(e * I * H) * eb;
        for (int64_t j = 0; j < I; ++j) {
            gpt_oss_column(gu, H, 2 * I, 2 * j, eb, gate + static_cast<size_t>(j * H) * eb);
            gpt_oss_column(gu, H, 2 * I, 2 * j + 1, eb, up + static_cast<size_t>(j * H) * eb);
        }
        for (int64_t r = 0; r < H; ++r)
            gpt_oss_column(dn, I, H, r, eb, down + static_cast<size_t>(r * I) * eb);
        moe->experts[static_cast<size_t>(e)] = {expert_view(gate, I, H, type), expert_view(up, I, H, type),
                                                expert_view(down, H, I, type)};
    }
    return Status::ok();
}

}  // namespace

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
            ck.find(TensorNames{prefix}.layer(l) + TensorNames::kDeltaNet + "conv1d.weight");
        if (conv != nullptr && conv->shape.size() == 3)
            mlx_layout = conv->shape[2] == 1 && conv->shape[1] != 1;
        break;
    }
    return mlx_layout ? CheckpointLayout::kMlx : CheckpointLayout::kHuggingFace;
}

Expected<ModelWeights> load_weights(const ModelConfig& cfg, std::shared_ptr<format::Checkpoint> checkpoint,
                                    bool bind_experts, bool check_only) {
    const format::Checkpoint& ck = *checkpoint;
    Binder b(cfg, ck, check_only);
    ModelWeights mw;

    // Name prefix of the text model, and of lm_head, by which embedding table exists.
    SLUICE_ASSIGN_OR_RETURN(const TensorNames names, find_tensor_names(ck, cfg));
    const std::string& prefix = names.prefix;
    const std::string& lm_head_path = names.lm_head;

    // A config that names fewer layers than the checkpoint holds would run a truncated model
    // without a word: every decoder layer the checkpoint has must be one the config describes.
    const std::string layers_prefix = prefix + "layers.";
    for (const auto& file : ck.files()) {
        for (const format::TensorInfo& t : file->tensors()) {
            if (t.name.compare(0, layers_prefix.size(), layers_prefix) != 0) continue;
            const int64_t index = std::strtoll(t.name.c_str() + layers_prefix.size(), nullptr, 10);
            // DeepSeek-style MTP layers follow the decoder's (GLM's model.layers.46 of 46): the first
            // one is the drafting head when it is there (mtp_layers), any others are not run.
            if (index >= cfg.n_layers + cfg.nextn_layers)
                return error(ErrorCode::kInvalidArgument, "[weights] " + ck.dir() + " holds tensor '" +
                                                              t.name + "' of layer " + std::to_string(index) +
                                                              ", but config.json says num_hidden_layers = " +
                                                              std::to_string(cfg.n_layers));
        }
    }

    const bool mlx_layout = detect_checkpoint_layout(cfg, ck, prefix) == CheckpointLayout::kMlx;
    mw.layout = mlx_layout ? CheckpointLayout::kMlx : CheckpointLayout::kHuggingFace;
    const float norm_add = cfg.zero_centered_norms() && !mlx_layout ? 1.0f : 0.0f;

    const int64_t H = cfg.hidden;
    SLUICE_ASSIGN_OR_RETURN(mw.embed, b.linear(names.embed(), cfg.vocab, H));
    SLUICE_ASSIGN_OR_RETURN(mw.final_norm, b.floats(names.final_norm(), H, norm_add));
    if (b.find(lm_head_path + ".weight") != nullptr) {
        SLUICE_ASSIGN_OR_RETURN(mw.lm_head, b.linear(lm_head_path, cfg.vocab, H));
    } else if (cfg.tie_word_embeddings) {
        mw.lm_head = mw.embed;
    } else {
        return error(ErrorCode::kNotFound, "[weights] missing tensor '" + lm_head_path +
                                               ".weight' (and tie_word_embeddings is false)");
    }
    mw.dense_bytes += view_bytes(mw.embed) + (mw.lm_head.data != mw.embed.data ? view_bytes(mw.lm_head) : 0);

    if (cfg.mtp_layers > 0) {
        MtpWeights& m = mw.mtp;
        SLUICE_ASSIGN_OR_RETURN(m.fc, b.linear(names.mtp_fc(), H, 2 * H));
        SLUICE_ASSIGN_OR_RETURN(m.norm_embedding, b.floats(names.mtp_norm_embedding(), H, norm_add));
        SLUICE_ASSIGN_OR_RETURN(m.norm_hidden, b.floats(names.mtp_norm_hidden(), H, norm_add));
        SLUICE_ASSIGN_OR_RETURN(m.norm, b.floats(names.mtp_norm(), H, norm_add));
        mw.dense_bytes += view_bytes(m.fc) + sizeof(float) * 3 * static_cast<uint64_t>(H);
    }
    const int64_t n_layers = cfg.n_layers + cfg.mtp_layers;
    mw.layers.resize(static_cast<size_t>(n_layers));
    for (int64_t l = 0; l < n_layers; ++l) {
        LayerWeights& lw = mw.layers[static_cast<size_t>(l)];
        const std::string p = names.layer(l);
        const std::string att = p + TensorNames::kAttention;
        SLUICE_ASSIGN_OR_RETURN(lw.input_norm, b.floats(p + TensorNames::kInputNorm, H, norm_add));
        SLUICE_ASSIGN_OR_RETURN(lw.post_norm, b.floats(p + TensorNames::kPostNorm, H, norm_add));

        if (cfg.is_full_attention(l) && cfg.latent_attention()) {
            AttentionWeights& a = lw.attn;
            const int64_t nh = cfg.n_heads, q_rows = nh * (cfg.qk_nope_dim + cfg.qk_rope_dim);
            if (cfg.q_lora_rank > 0) {
                SLUICE_ASSIGN_OR_RETURN(a.q_a_proj, b.linear(att + "q_a_proj", cfg.q_lora_rank, H));
                SLUICE_ASSIGN_OR_RETURN(a.q_a_norm, b.floats(att + "q_a_layernorm.weight", cfg.q_lora_rank));
                SLUICE_ASSIGN_OR_RETURN(a.q_b_proj, b.linear(att + "q_b_proj", q_rows, cfg.q_lora_rank));
            } else {
                SLUICE_ASSIGN_OR_RETURN(a.q_proj, b.linear(att + "q_proj", q_rows, H));
            }
            SLUICE_ASSIGN_OR_RETURN(
                a.kv_a_proj, b.linear(att + "kv_a_proj_with_mqa", cfg.kv_lora_rank + cfg.qk_rope_dim, H));
            SLUICE_ASSIGN_OR_RETURN(a.kv_a_norm, b.floats(att + "kv_a_layernorm.weight", cfg.kv_lora_rank));
            if (b.find(att + "embed_q.weight") != nullptr) {
                // mlx-lm's per-head MultiLinear pair [nh, rows, cols]: one view over the stacked heads.
                auto stacked = [&](const std::string& path, int64_t rows,
                                   int64_t cols) -> Expected<WeightView> {
                    SLUICE_ASSIGN_OR_RETURN(auto heads, b.linear_stack(path, nh, rows, cols));
                    WeightView all = heads[0];
                    all.rows = nh * rows;
                    return all;
                };
                SLUICE_ASSIGN_OR_RETURN(a.embed_q,
                                        stacked(att + "embed_q", cfg.kv_lora_rank, cfg.qk_nope_dim));
                SLUICE_ASSIGN_OR_RETURN(a.unembed_out,
                                        stacked(att + "unembed_out", cfg.v_head_dim, cfg.kv_lora_rank));
            } else {
                SLUICE_ASSIGN_OR_RETURN(
                    a.kv_b_proj,
                    b.linear(att + "kv_b_proj", nh * (cfg.qk_nope_dim + cfg.v_head_dim), cfg.kv_lora_rank));
            }
            SLUICE_ASSIGN_OR_RETURN(a.o_proj, b.linear(att + "o_proj", H, nh * cfg.v_head_dim));
            for (const WeightView* v : {&a.q_a_proj, &a.q_b_proj, &a.q_proj, &a.kv_a_proj, &a.kv_b_proj,
                                        &a.embed_q, &a.unembed_out, &a.o_proj})
                if (v->data != nullptr) mw.dense_bytes += view_bytes(*v);
        } else if (cfg.is_full_attention(l)) {
            AttentionWeights& a = lw.attn;
            const int64_t q_rows = cfg.n_heads * cfg.head_dim * (cfg.attn_output_gate ? 2 : 1);
            SLUICE_ASSIGN_OR_RETURN(a.q_proj, b.linear(att + "q_proj", q_rows, H));
            SLUICE_ASSIGN_OR_RETURN(a.k_proj, b.linear(att + "k_proj", cfg.n_kv_heads * cfg.head_dim, H));
            SLUICE_ASSIGN_OR_RETURN(a.v_proj, b.linear(att + "v_proj", cfg.n_kv_heads * cfg.head_dim, H));
            SLUICE_ASSIGN_OR_RETURN(a.o_proj, b.linear(att + "o_proj", H, cfg.n_heads * cfg.head_dim));
            if (cfg.attn_o_bias) {
                SLUICE_ASSIGN_OR_RETURN(a.o_bias, b.floats(att + "o_proj.bias", H));
            }
            if (cfg.attn_sinks) {
                SLUICE_ASSIGN_OR_RETURN(a.sinks, b.floats(att + "sinks", cfg.n_heads));
            }
            if (cfg.attn_qk_norm) {
                SLUICE_ASSIGN_OR_RETURN(a.q_norm, b.floats(att + "q_norm.weight", cfg.head_dim, norm_add));
                SLUICE_ASSIGN_OR_RETURN(a.k_norm, b.floats(att + "k_norm.weight", cfg.head_dim, norm_add));
            }
            if (cfg.attn_qkv_bias) {
                const int64_t kv = cfg.n_kv_heads * cfg.head_dim;
                SLUICE_ASSIGN_OR_RETURN(a.q_bias,
                                        b.floats(att + "q_proj.bias", cfg.n_heads * cfg.head_dim, 0.0f));
                SLUICE_ASSIGN_OR_RETURN(a.k_bias, b.floats(att + "k_proj.bias", kv, 0.0f));
                SLUICE_ASSIGN_OR_RETURN(a.v_bias, b.floats(att + "v_proj.bias", kv, 0.0f));
            }
            for (const WeightView* v : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj})
                mw.dense_bytes += view_bytes(*v);
        } else {
            DeltaNetWeights& d = lw.linear;
            const int64_t kd = cfg.linear_key_dim(), vd = cfg.linear_value_dim(), nv = cfg.linear_v_heads;
            const std::string q = p + TensorNames::kDeltaNet;
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
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.gate,
                                    b.linear(p + TensorNames::kDenseMlp + "gate_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.up, b.linear(p + TensorNames::kDenseMlp + "up_proj", I, H));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.down,
                                    b.linear(p + TensorNames::kDenseMlp + "down_proj", H, I));
            mw.dense_bytes += expert_bytes(lw.dense_mlp);
            continue;
        }
        MoeWeights& m = lw.moe_w;
        const int64_t E = cfg.n_experts;
        SLUICE_ASSIGN_OR_RETURN(m.router, b.linear(p + names.router(), E, H));
        mw.dense_bytes += view_bytes(m.router);
        if (cfg.router_sigmoid) {
            SLUICE_ASSIGN_OR_RETURN(m.router_bias, b.floats(p + TensorNames::kRouterBias, E));
        }
        if (cfg.router_logit_bias) {
            SLUICE_ASSIGN_OR_RETURN(m.router_logit_bias, b.floats(p + names.router() + ".bias", E));
        }
        if (cfg.expert_bias) {
            const int64_t I = cfg.expert_ffn;
            const std::string ep = p + names.experts();
            SLUICE_ASSIGN_OR_RETURN(auto gate_up, b.floats(ep + "gate_up_proj_bias", E * 2 * I));
            SLUICE_ASSIGN_OR_RETURN(m.expert_down_bias, b.floats(ep + "down_proj_bias", E * H));
            m.expert_gate_bias.resize(static_cast<size_t>(E * I));
            m.expert_up_bias.resize(static_cast<size_t>(E * I));
            for (int64_t i = 0; i < E * I; ++i) {  // interleaved: 2j gate j, 2j + 1 up j
                m.expert_gate_bias[static_cast<size_t>(i)] = gate_up[static_cast<size_t>(2 * i)];
                m.expert_up_bias[static_cast<size_t>(i)] = gate_up[static_cast<size_t>(2 * i + 1)];
            }
        }
        if (bind_experts && cfg.family == Family::kGptOss) {
            // A pack's source check (check_only) checks them; the pack converts them as it streams.
            SLUICE_ASSIGN_OR_RETURN(const GptOssExpertTensors t, gpt_oss_expert_tensors(cfg, ck, names, l));
            if (!check_only) SLUICE_RETURN_IF_ERROR(bind_gpt_oss_experts(cfg, t, &m, &mw.owned));
        } else if (bind_experts) {
            SLUICE_RETURN_IF_ERROR(bind_routed_experts(cfg, ck, names, l, &m));
        }
        for (const auto& ex : m.experts) mw.expert_bytes += expert_bytes(ex);

        if (cfg.shared_expert_ffn > 0) {
            m.has_shared = true;
            const int64_t Is = cfg.shared_expert_ffn;
            const std::string sp = p + TensorNames::shared_expert(cfg);
            SLUICE_ASSIGN_OR_RETURN(m.shared.gate, b.linear(sp + "gate_proj", Is, H));
            SLUICE_ASSIGN_OR_RETURN(m.shared.up, b.linear(sp + "up_proj", Is, H));
            SLUICE_ASSIGN_OR_RETURN(m.shared.down, b.linear(sp + "down_proj", H, Is));
            mw.dense_bytes += expert_bytes(m.shared);
            if (cfg.shared_expert_gated) {
                SLUICE_ASSIGN_OR_RETURN(m.shared_gate, b.linear(p + TensorNames::kSharedExpertGate, 1, H));
                mw.dense_bytes += view_bytes(m.shared_gate);
            }
        }
    }
    // The small per-layer vectors (norms, conv, A, dt bias) are held as f32 copies: resident too.
    uint64_t floats = mw.final_norm.size();
    for (const LayerWeights& lw : mw.layers)
        floats += lw.input_norm.size() + lw.post_norm.size() + lw.attn.q_norm.size() + lw.attn.k_norm.size() +
                  lw.attn.q_bias.size() + lw.attn.k_bias.size() + lw.attn.v_bias.size() +
                  lw.attn.o_bias.size() + lw.attn.sinks.size() + lw.moe_w.router_logit_bias.size() +
                  lw.moe_w.expert_gate_bias.size() + lw.moe_w.expert_up_bias.size() +
                  lw.moe_w.expert_down_bias.size() + lw.linear.conv.size() + lw.linear.neg_a.size() +
                  lw.linear.dt_bias.size() + lw.linear.norm.size() + lw.moe_w.router_bias.size() +
                  lw.attn.q_a_norm.size() + lw.attn.kv_a_norm.size();
    mw.dense_bytes += sizeof(float) * floats;
    log::debug("[weights] {} layout, prefix '{}', dense {:.1f} MB, experts {:.1f} MB", layout_name(mw.layout),
               prefix, mw.dense_bytes / 1e6, mw.expert_bytes / 1e6);
    mw.checkpoint = std::move(checkpoint);
    return mw;
}

}  // namespace sluice::model
