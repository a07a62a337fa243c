// The GGUF tensor map (tensor_map_gguf.h). Converter lines cited are llama.cpp's conversion/qwen.py
// unless said otherwise (Mixtral: conversion/llama.py); the names are gguf-py's constants.py TENSOR_NAMES for
// MODEL_TENSORS[arch].
#include "model/tensor_map_gguf.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "model/tensor_map.h"

namespace sluice::model {

using Kind = GgufValueStep::Kind;

const char* gguf_value_step_name(Kind kind) {
    switch (kind) {
        case Kind::kAddOne: return "add_one";
        case Kind::kNegExp: return "neg_exp";
        case Kind::kSqueeze: return "squeeze";
        case Kind::kQkvzToQkv: return "qkvz_to_qkv";
        case Kind::kQkvzToGate: return "qkvz_to_gate";
        case Kind::kVHeadsTiled: return "v_heads_tiled";
        case Kind::kStackExperts: return "stack_experts";
        case Kind::kTranspose: return "transpose";
        case Kind::kStride: return "stride";
        case Kind::kRopePairs: return "rope_pairs";
    }
    return "?";
}

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// Builds the list for one config; `out_shape` is the GGUF tensor's row-major shape (dims reversed).
class MapBuilder {
 public:
    explicit MapBuilder(const ModelConfig& c) : c_(c), names_(tensor_names_for(c)) {}

    void add(std::string gguf, std::vector<int64_t> out_shape, std::vector<std::string> hf,
             std::vector<int64_t> hf_shape, std::vector<GgufValueStep> steps = {}) {
        GgufTensorSource s;
        s.gguf = std::move(gguf);
        s.dims.assign(out_shape.rbegin(), out_shape.rend());
        s.hf = std::move(hf);
        s.hf_shape = std::move(hf_shape);
        s.steps = std::move(steps);
        out_.push_back(std::move(s));
    }
    // A tensor copied as it is (dims reversed).
    void copy(std::string gguf, const std::string& hf, std::vector<int64_t> shape,
              std::vector<GgufValueStep> steps = {}) {
        add(std::move(gguf), shape, {hf}, shape, std::move(steps));
    }
    // An RMSNorm weight: +1 folded on the zero-centred families (Qwen3NextModel.modify_tensors:
    // `elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"): data_torch + 1`).
    void norm(std::string gguf, const std::string& hf, int64_t n) {
        std::vector<GgufValueStep> steps;
        if (c_.zero_centered_norms()) steps.push_back({Kind::kAddOne});
        copy(std::move(gguf), hf, {n}, std::move(steps));
    }

    std::vector<GgufTensorSource> build();

 private:
    void attention(int64_t l);
    void deltanet(int64_t l);
    void mlp(int64_t l);
    void gpt_oss_experts(int64_t l);

    const ModelConfig& c_;
    const TensorNames names_;
    std::vector<GgufTensorSource> out_;
};

std::string blk(int64_t l) {
    return "blk." + std::to_string(l) + ".";
}

void MapBuilder::attention(int64_t l) {
    const std::string g = blk(l), a = names_.layer(l) + TensorNames::kAttention;
    const int64_t H = c_.hidden, hd = c_.head_dim, q_rows = c_.n_heads * hd * (c_.attn_output_gate ? 2 : 1);
    const int64_t kv = c_.n_kv_heads * hd;
    // q_proj keeps its rows for the Qwen / GLM / gpt-oss classes (the gated [q | gate] per head kept);
    // LlamaModel (Mixtral) permutes q and k for pairwise RoPE.
    std::vector<GgufValueStep> q_steps, k_steps;
    if (c_.family == Family::kMixtral) {
        GgufValueStep pairs{Kind::kRopePairs};
        pairs.head_dim = hd;
        pairs.nk = c_.n_heads;
        q_steps.push_back(pairs);
        pairs.nk = c_.n_kv_heads;
        k_steps.push_back(pairs);
    }
    copy(g + "attn_q.weight", a + "q_proj.weight", {q_rows, H}, q_steps);
    copy(g + "attn_k.weight", a + "k_proj.weight", {kv, H}, k_steps);
    copy(g + "attn_v.weight", a + "v_proj.weight", {kv, H});
    copy(g + "attn_output.weight", a + "o_proj.weight", {H, c_.n_heads * hd});
    if (c_.attn_qk_norm) {
        norm(g + "attn_q_norm.weight", a + "q_norm.weight", hd);
        norm(g + "attn_k_norm.weight", a + "k_norm.weight", hd);
    }
    if (c_.attn_qkv_bias) {
        copy(g + "attn_q.bias", a + "q_proj.bias", {c_.n_heads * hd});
        copy(g + "attn_k.bias", a + "k_proj.bias", {kv});
        copy(g + "attn_v.bias", a + "v_proj.bias", {kv});
    }
    if (c_.attn_o_bias) copy(g + "attn_output.bias", a + "o_proj.bias", {H});
    // gpt_oss.py GptOssModel.filter_tensors: "sinks" gets ".weight" (tensor_mapping.py ATTN_SINKS).
    if (c_.attn_sinks) copy(g + "attn_sinks.weight", a + "sinks", {c_.n_heads});
}

void MapBuilder::deltanet(int64_t l) {
    const std::string g = blk(l), d = names_.layer(l) + TensorNames::kDeltaNet;
    const int64_t H = c_.hidden, nk = c_.linear_k_heads, nv = c_.linear_v_heads, dk = c_.linear_k_dim,
                  dv = c_.linear_v_dim, kd = c_.linear_key_dim(), vd = c_.linear_value_dim(),
                  K = c_.conv_kernel;
    const int64_t r = nk > 0 ? nv / nk : 0, C = c_.conv_dim();
    // Qwen3.5 with nk != nv: _LinearAttentionVReorderBase.modify_tensors moves the value heads to tiled
    // order before Qwen3NextModel.modify_tensors runs (it is the subclass's override).
    const bool tiled = c_.split_linear_projections && nk != nv;
    auto v_tiled = [&](int64_t axis, int64_t offset, int64_t head_dim) {
        std::vector<GgufValueStep> s;
        if (tiled) {
            GgufValueStep t{Kind::kVHeadsTiled};
            t.axis = axis;
            t.offset = offset;
            t.nk = nk;
            t.r = r;
            t.head_dim = head_dim;
            s.push_back(t);
        }
        return s;
    };
    if (c_.split_linear_projections) {  // Qwen3.5: in_proj_qkv / z / b / a (tensor_mapping.py)
        copy(g + "attn_qkv.weight", d + "in_proj_qkv.weight", {2 * kd + vd, H}, v_tiled(0, 2 * kd, dv));
        copy(g + "attn_gate.weight", d + "in_proj_z.weight", {vd, H}, v_tiled(0, 0, dv));
        copy(g + "ssm_beta.weight", d + "in_proj_b.weight", {nv, H}, v_tiled(0, 0, 1));
        copy(g + "ssm_alpha.weight", d + "in_proj_a.weight", {nv, H}, v_tiled(0, 0, 1));
    } else {  // Qwen3-Next: the `"in_proj_qkvz.weight" in name` branch splits one tensor into two
        GgufValueStep qkv{Kind::kQkvzToQkv};
        qkv.nk = nk;
        qkv.dk = dk;
        qkv.dv_group = r * dv;
        GgufValueStep z = qkv;
        z.kind = Kind::kQkvzToGate;
        const std::vector<int64_t> qkvz_shape = {2 * kd + 2 * vd, H};
        add(g + "attn_qkv.weight", {2 * kd + vd, H}, {d + "in_proj_qkvz.weight"}, qkvz_shape, {qkv});
        add(g + "attn_gate.weight", {vd, H}, {d + "in_proj_qkvz.weight"}, qkvz_shape, {z});
        copy(g + "ssm_ba.weight", d + "in_proj_ba.weight", {2 * nv, H});  // per key head [b | a], as HF
    }
    // conv1d [C, 1, K] → [C, K] (`elif "conv1d" in name: data_torch = data_torch.squeeze()`; the 3.5
    // reorder squeezes first, then moves the value channels).
    std::vector<GgufValueStep> conv = {{Kind::kSqueeze}};
    for (const GgufValueStep& s : v_tiled(0, 2 * kd, dv)) conv.push_back(s);
    add(g + "ssm_conv1d.weight", {C, K}, {d + "conv1d.weight"}, {C, 1, K}, conv);
    // A_log → ssm_a = −exp(A_log) (`if name.endswith(".A_log"): data_torch = -torch.exp(data_torch)`).
    std::vector<GgufValueStep> a = v_tiled(0, 0, 1);
    a.push_back({Kind::kNegExp});
    copy(g + "ssm_a", d + "A_log", {nv}, a);
    // dt_bias is renamed dt_proj.bias, then mapped to ssm_dt.bias.
    copy(g + "ssm_dt.bias", d + "dt_bias", {nv}, v_tiled(0, 0, 1));
    copy(g + "ssm_norm.weight", d + "norm.weight",
         {dv});  // the gated norm: no +1 (`not ...linear_attn.norm`)
    copy(g + "ssm_out.weight", d + "out_proj.weight", {H, vd}, v_tiled(1, 0, dv));
}

// gpt-oss's routed experts (gpt_oss.py GptOssModel.modify_tensors, the bf16 checkpoint's layout): the fused,
// input-major gate_up_proj [E, H, 2I] transposed, then its rows 2j → ffn_gate_exps and 2j + 1 → ffn_up_exps;
// down_proj [E, I, H] transposed; the biases split by the same interleave (`[..., ::2]`, `[..., 1::2]`).
void MapBuilder::gpt_oss_experts(int64_t l) {
    const std::string x = names_.layer(l) + names_.experts(), g = blk(l);
    const int64_t H = c_.hidden, E = c_.n_experts, I = c_.expert_ffn;
    GgufValueStep transpose_h{Kind::kTranspose}, transpose_i{Kind::kTranspose};
    transpose_h.head_dim = H;
    transpose_i.head_dim = I;
    for (const int64_t half : {0, 1}) {
        const std::string proj = half == 0 ? "gate" : "up";
        GgufValueStep rows{Kind::kStride}, cols{Kind::kStride};
        rows.axis = 0;
        cols.axis = 1;
        rows.offset = cols.offset = half;
        rows.r = cols.r = 2;
        add(g + "ffn_" + proj + "_exps.weight", {E, I, H}, {x + "gate_up_proj"}, {E, H, 2 * I},
            {transpose_h, rows});
        add(g + "ffn_" + proj + "_exps.bias", {E, I}, {x + "gate_up_proj_bias"}, {E, 2 * I}, {cols});
    }
    add(g + "ffn_down_exps.weight", {E, H, I}, {x + "down_proj"}, {E, I, H}, {transpose_i});
    copy(g + "ffn_down_exps.bias", x + "down_proj_bias", {E, H});
}

void MapBuilder::mlp(int64_t l) {
    const std::string g = blk(l), p = names_.layer(l);
    const int64_t H = c_.hidden;
    if (!c_.is_moe_layer(l)) {
        const std::string m = p + TensorNames::kDenseMlp;
        const int64_t I = c_.dense_ffn;
        copy(g + "ffn_gate.weight", m + "gate_proj.weight", {I, H});
        copy(g + "ffn_up.weight", m + "up_proj.weight", {I, H});
        copy(g + "ffn_down.weight", m + "down_proj.weight", {H, I});
        return;
    }
    const int64_t E = c_.n_experts, I = c_.expert_ffn;
    copy(g + "ffn_gate_inp.weight", p + names_.router() + ".weight", {E, H});
    if (c_.router_logit_bias) copy(g + "ffn_gate_inp.bias", p + names_.router() + ".bias", {E});
    if (c_.family == Family::kGptOss) {
        gpt_oss_experts(l);
        return;
    }
    // glm4moe: e_score_correction_bias → exp_probs_b.bias (tensor_mapping.py FFN_EXP_PROBS_B).
    if (c_.router_sigmoid) copy(g + "exp_probs_b.bias", p + TensorNames::kRouterBias, {E});
    // Routed experts: the per-expert matrices stacked (Qwen2MoeModel.modify_tensors), [E, out, in].
    // (The HF names: gate_proj / up_proj / down_proj, Mixtral's w1 / w3 / w2.)
    for (const auto& [proj, hf_proj, out, in] :
         {std::tuple<const char*, const char*, int64_t, int64_t>{"gate", names_.expert_projections[0], I, H},
          {"up", names_.expert_projections[1], I, H},
          {"down", names_.expert_projections[2], H, I}}) {
        std::vector<std::string> hf;
        for (int64_t e = 0; e < E; ++e)
            hf.push_back(p + names_.experts() + std::to_string(e) + "." + hf_proj + ".weight");
        add(g + "ffn_" + proj + "_exps.weight", {E, out, in}, std::move(hf), {out, in},
            {{Kind::kStackExperts}});
    }
    if (c_.shared_expert_ffn > 0) {
        const std::string s = p + TensorNames::shared_expert(c_);
        const int64_t Is = c_.shared_expert_ffn;
        copy(g + "ffn_gate_shexp.weight", s + "gate_proj.weight", {Is, H});
        copy(g + "ffn_up_shexp.weight", s + "up_proj.weight", {Is, H});
        copy(g + "ffn_down_shexp.weight", s + "down_proj.weight", {H, Is});
        if (c_.shared_expert_gated)
            copy(g + "ffn_gate_inp_shexp.weight", p + TensorNames::kSharedExpertGate + std::string(".weight"),
                 {1, H});
    }
}

}  // namespace

// qwen2 / qwen3 / qwen3moe / qwen2moe map post_attention_layernorm to FFN_NORM; qwen3next / qwen35moe /
// glm4moe / gpt-oss list ATTN_POST_NORM for it (constants.py MODEL_TENSORS; tensor_mapping.py).
const char* gguf_post_norm_name(const ModelConfig& c) {
    return c.zero_centered_norms() || c.family == Family::kGlm4Moe || c.family == Family::kGptOss
               ? "post_attention_norm.weight"
               : "ffn_norm.weight";
}

namespace {

std::vector<GgufTensorSource> MapBuilder::build() {
    const int64_t H = c_.hidden, V = c_.vocab;
    copy("token_embd.weight", names_.embed() + ".weight", {V, H});
    norm("output_norm.weight", names_.final_norm(), H);
    if (!c_.tie_word_embeddings) copy("output.weight", names_.lm_head + ".weight", {V, H});
    const char* post_norm = gguf_post_norm_name(c_);
    for (int64_t l = 0; l < c_.n_layers + c_.mtp_layers; ++l) {
        const std::string g = blk(l), p = names_.layer(l);
        norm(g + "attn_norm.weight", p + TensorNames::kInputNorm, H);
        norm(g + post_norm, p + TensorNames::kPostNorm, H);
        if (c_.is_full_attention(l)) {
            attention(l);
        } else {
            deltanet(l);
        }
        mlp(l);
        if (c_.is_mtp_layer(l)) {
            // _QwenMtpMixin.filter_tensors: mtp.fc → nextn.eh_proj, pre_fc_norm_embedding → nextn.enorm,
            // pre_fc_norm_hidden → nextn.hnorm, norm → nextn.shared_head_norm (all "norm.weight": +1).
            copy(g + "nextn.eh_proj.weight", std::string(TensorNames::kMtpFc) + ".weight", {H, 2 * H});
            norm(g + "nextn.enorm.weight", TensorNames::kMtpNormEmbedding, H);
            norm(g + "nextn.hnorm.weight", TensorNames::kMtpNormHidden, H);
            norm(g + "nextn.shared_head_norm.weight", TensorNames::kMtpNorm, H);
        }
    }
    return std::move(out_);
}

// Value heads grouped by key head → tiled, along rows (axis 0) or columns (axis 1) of a [rows, cols]
// matrix, within [offset, offset + nk·r·head_dim): head g·r + i moves to i·nk + g (_reorder_v_heads:
// reshape to [nk, r, head_dim], swap the first two, flatten).
Status v_heads_tiled(const GgufValueStep& s, int64_t rows, int64_t cols, std::vector<float>* v) {
    const int64_t span = s.nk * s.r * s.head_dim, extent = s.axis == 0 ? rows : cols;
    if (s.nk <= 0 || s.r <= 0 || s.head_dim <= 0 || s.offset < 0 || s.offset + span > extent)
        return error(ErrorCode::kInvalidArgument, "[gguf map] v_heads_tiled: heads outside the tensor");
    const std::vector<float> in = *v;
    for (int64_t g = 0; g < s.nk; ++g)
        for (int64_t i = 0; i < s.r; ++i)
            for (int64_t e = 0; e < s.head_dim; ++e) {
                const int64_t from = s.offset + (g * s.r + i) * s.head_dim + e;
                const int64_t to = s.offset + (i * s.nk + g) * s.head_dim + e;
                if (s.axis == 0) {
                    std::copy_n(in.begin() + from * cols, cols, v->begin() + to * cols);
                } else {
                    for (int64_t row = 0; row < rows; ++row) (*v)[row * cols + to] = in[row * cols + from];
                }
            }
    return Status::ok();
}

// Qwen3-Next's in_proj_qkvz rows, per key head g: [q (dk) | k (dk) | v (dv_group) | z (dv_group)];
// the q rows of every head, then k, then v (kQkvzToQkv), or the z rows (kQkvzToGate).
Status qkvz_rows(const GgufValueStep& s, int64_t rows, int64_t cols, std::vector<float>* v) {
    const int64_t group = 2 * s.dk + 2 * s.dv_group;
    if (s.nk <= 0 || group <= 0 || s.nk * group != rows)
        return error(ErrorCode::kInvalidArgument,
                     "[gguf map] qkvz: " + std::to_string(rows) + " rows are not nk groups of [q k v z]");
    std::vector<float> out;
    auto take = [&](int64_t first, int64_t count) {
        for (int64_t g = 0; g < s.nk; ++g) {
            const auto at = v->begin() + (g * group + first) * cols;
            out.insert(out.end(), at, at + count * cols);
        }
    };
    if (s.kind == Kind::kQkvzToQkv) {
        take(0, s.dk);
        take(s.dk, s.dk);
        take(2 * s.dk, s.dv_group);
    } else {
        take(2 * s.dk + s.dv_group, s.dv_group);
    }
    *v = std::move(out);
    return Status::ok();
}

// Each [head_dim, cols] matrix of a stack of rows / head_dim transposed; `cols` becomes head_dim.
Status transpose_stacked(const GgufValueStep& s, int64_t rows, int64_t cols, std::vector<float>* v,
                         int64_t* new_cols) {
    const int64_t a = s.head_dim;
    if (a <= 0 || rows % a != 0)
        return error(ErrorCode::kInvalidArgument, "[gguf map] transpose: " + std::to_string(rows) +
                                                      " rows are no stack of " + std::to_string(a) +
                                                      "-row matrices");
    const std::vector<float> in = *v;
    for (int64_t m = 0; m < rows / a; ++m)
        for (int64_t i = 0; i < a; ++i)
            for (int64_t j = 0; j < cols; ++j) (*v)[(m * cols + j) * a + i] = in[(m * a + i) * cols + j];
    *new_cols = a;
    return Status::ok();
}

// LlamaModel.permute: per head of `head_dim` rows, row s·hd/2 + i moves to 2i + s.
Status rope_pairs(const GgufValueStep& s, int64_t rows, int64_t cols, std::vector<float>* v) {
    const int64_t hd = s.head_dim;
    if (hd <= 0 || hd % 2 != 0 || s.nk <= 0 || s.nk * hd != rows)
        return error(ErrorCode::kInvalidArgument, "[gguf map] rope_pairs: " + std::to_string(rows) +
                                                      " rows are not " + std::to_string(s.nk) + " heads of " +
                                                      std::to_string(hd) + " (even) rows");
    const std::vector<float> in = *v;
    for (int64_t h = 0; h < s.nk; ++h)
        for (int64_t half = 0; half < 2; ++half)
            for (int64_t i = 0; i < hd / 2; ++i)
                std::copy_n(in.begin() + (h * hd + half * hd / 2 + i) * cols, cols,
                            v->begin() + (h * hd + 2 * i + half) * cols);
    return Status::ok();
}

// Every r-th row (axis 0) or column (axis 1) of [rows, cols], from `offset`.
Status stride(const GgufValueStep& s, int64_t rows, std::vector<float>* v, int64_t* cols) {
    const int64_t extent = s.axis == 0 ? rows : *cols;
    if (s.r <= 0 || s.offset < 0 || s.offset >= s.r || extent % s.r != 0)
        return error(ErrorCode::kInvalidArgument, "[gguf map] stride: " + std::to_string(extent) +
                                                      " rows or columns are not a multiple of the stride");
    std::vector<float> out;
    out.reserve(v->size() / static_cast<size_t>(s.r));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < *cols; ++j)
            if ((s.axis == 0 ? i : j) % s.r == s.offset) out.push_back((*v)[i * *cols + j]);
    if (s.axis == 1) *cols /= s.r;
    *v = std::move(out);
    return Status::ok();
}

}  // namespace

std::vector<GgufTensorSource> gguf_tensor_map(const ModelConfig& config) {
    return MapBuilder(config).build();
}

Expected<std::vector<float>> gguf_values_from_hf(const GgufTensorSource& s,
                                                 const std::vector<std::vector<float>>& hf) {
    auto bad = [&](const std::string& what) {
        return error(ErrorCode::kInvalidArgument, "[gguf map] '" + s.gguf + "': " + what);
    };
    if (hf.size() != s.hf.size())
        return bad(std::to_string(hf.size()) + " HF tensors given, " + std::to_string(s.hf.size()) +
                   " expected");
    for (const auto& h : hf)
        if (static_cast<int64_t>(h.size()) != numel(s.hf_shape))
            return bad("an HF tensor of " + std::to_string(h.size()) + " values, expected " +
                       std::to_string(numel(s.hf_shape)));
    std::vector<float> v;
    if (!s.steps.empty() && s.steps.front().kind == Kind::kStackExperts) {
        for (const auto& h : hf) v.insert(v.end(), h.begin(), h.end());
    } else {
        if (hf.size() != 1) return bad("more than one HF tensor without kStackExperts");
        v = hf.front();
    }
    // The current [rows, cols] view: the HF shape's last dim is cols (1-D: one column).
    int64_t cols = s.hf_shape.size() >= 2 ? s.hf_shape.back() : 1;
    for (const GgufValueStep& step : s.steps) {
        const int64_t rows = static_cast<int64_t>(v.size()) / std::max<int64_t>(cols, 1);
        switch (step.kind) {
            case Kind::kAddOne:
                for (float& x : v) x += 1.0f;
                break;
            case Kind::kNegExp:
                for (float& x : v) x = -std::exp(x);
                break;
            case Kind::kSqueeze:  // [C, 1, K] → [C, K]: values unchanged, the rows are C
                cols = s.dims.empty() ? 1 : s.dims.front();
                break;
            case Kind::kQkvzToQkv:
            case Kind::kQkvzToGate: SLUICE_RETURN_IF_ERROR(qkvz_rows(step, rows, cols, &v)); break;
            case Kind::kVHeadsTiled: SLUICE_RETURN_IF_ERROR(v_heads_tiled(step, rows, cols, &v)); break;
            case Kind::kStackExperts: break;  // done above
            case Kind::kTranspose:
                SLUICE_RETURN_IF_ERROR(transpose_stacked(step, rows, cols, &v, &cols));
                break;
            case Kind::kStride: SLUICE_RETURN_IF_ERROR(stride(step, rows, &v, &cols)); break;
            case Kind::kRopePairs: SLUICE_RETURN_IF_ERROR(rope_pairs(step, rows, cols, &v)); break;
        }
    }
    std::vector<int64_t> out_shape(s.dims.rbegin(), s.dims.rend());
    if (static_cast<int64_t>(v.size()) != numel(out_shape))
        return bad(std::to_string(v.size()) + " values made, dims hold " + std::to_string(numel(out_shape)));
    return v;
}

}  // namespace sluice::model
