#include "model/weights_gguf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "core/log.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_tiles.h"
#include "kernels/weight_format.h"
#include "model/tensor_map_gguf.h"

namespace sluice::model {

using format::GgufTensor;
using kernels::WeightFormat;
using kernels::WeightView;

namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// The ggml types sluice binds, for errors: "F32, F16, BF16, Q4_0, ...".
std::string bindable_types() {
    std::string s;
    for (const WeightFormat& f : kernels::weight_formats()) {
        if (f.quantized() || !f.cpu_kernels || f.row_tiles()) continue;  // MLX affine, tiles: not ggml types
        s += (s.empty() ? "" : ", ") + std::string(f.name);
    }
    return s;
}

// The tensors a binding reads, by their GGUF names: a GGUF's own, or a GGUF pack's dense file. `file`
// names them in messages.
struct GgufTensorSet {
    std::string file;
    std::map<std::string, const GgufTensor*, std::less<>> by_name;

    const GgufTensor* find(std::string_view name) const {
        auto it = by_name.find(name);
        return it == by_name.end() ? nullptr : it->second;
    }
};

// Rows `rows` of `w`, in that order, copied into a buffer of `owned`: a view of them.
WeightView gather_rows(const WeightView& w, const std::vector<int64_t>& rows,
                       std::vector<std::vector<uint8_t>>* owned) {
    const size_t rb = w.row_bytes();
    std::vector<uint8_t>& buf = owned->emplace_back(rows.size() * rb);
    for (size_t i = 0; i < rows.size(); ++i)
        std::memcpy(buf.data() + i * rb,
                    static_cast<const uint8_t*>(w.data) + static_cast<size_t>(rows[i]) * rb, rb);
    WeightView out = w;
    out.rows = static_cast<int64_t>(rows.size());
    out.data = buf.data();
    return out;
}

// What becomes of the routed experts (blk.N.ffn_*_exps): views into the file, only checked (streamed from
// the file by an expert store), or not there at all (a pack's, in its expert files).
enum class GgufExperts { kBind, kCheck, kElsewhere };

class GgufBinder {
 public:
    GgufBinder(const ModelConfig& config, const GgufTensorSet& tensors) : tensors_(tensors) {
        for (GgufTensorSource& s : gguf_tensor_map(config)) expected_[s.gguf] = std::move(s);
    }

    Status fail(const std::string& tensor, const std::string& what) const {
        return error(ErrorCode::kInvalidArgument,
                     "[gguf] " + tensors_.file + ": tensor '" + tensor + "' " + what);
    }

    bool has(const std::string& name) const { return tensors_.find(name) != nullptr; }

    // The tensor `name`, present, with the dims the tensor map expects, of a type with kernels and
    // rows that are whole blocks of it.
    Expected<std::pair<const GgufTensor*, const WeightFormat*>> tensor(const std::string& name) const {
        const GgufTensor* t = tensors_.find(name);
        if (t == nullptr)
            return error(ErrorCode::kNotFound, "[gguf] " + tensors_.file + ": missing tensor '" + name + "'");
        // Trailing dims of 1 say nothing (ggml pads ne[] with 1s; the converter writes the shared-expert gate
        // [1, H] as {H, 1}, other writers as {H}).
        auto trimmed = [](std::vector<int64_t> d) {
            while (d.size() > 1 && d.back() == 1) d.pop_back();
            return d;
        };
        auto it = expected_.find(name);
        if (it != expected_.end() && trimmed(it->second.dims) != trimmed(t->dims))
            return fail(name, "has dims " + dims_text(t->dims) + " (ggml order), expected " +
                                  dims_text(it->second.dims) + " for this model's config");
        const WeightFormat* f = kernels::ggml_weight_format(static_cast<uint32_t>(t->type));
        if (f == nullptr || !f->cpu_kernels)
            return fail(name, std::string("is of ggml type ") + format::ggml_type_name(t->type) +
                                  ", which sluice has no kernels for (it runs " + bindable_types() + ")");
        if (const char* bad = f->shape_error(t->cols(), 0))
            return fail(name, std::string("has ") + bad + " of its type (" + format::describe(*t) + ")");
        if (t->data == nullptr) return fail(name, "has no data (a header-only file)");
        return std::make_pair(t, f);
    }

    // A 2-D tensor as a [rows, cols] view (GGUF dims {cols, rows}; {cols}: one row).
    Expected<WeightView> matrix(const std::string& name) const {
        SLUICE_ASSIGN_OR_RETURN(auto tf, tensor(name));
        if (tf.first->dims.size() > 2) return fail(name, "is not 2-D: " + dims_text(tf.first->dims));
        return gguf_matrix_view(*tf.first, tf.first->data, 0);
    }

    // A 1-D (or any) tensor of `numel` values, converted to f32 by its format's definition.
    Expected<std::vector<float>> floats(const std::string& name, int64_t numel) const {
        SLUICE_ASSIGN_OR_RETURN(auto tf, tensor(name));
        const GgufTensor& t = *tf.first;
        if (t.numel() != numel)
            return fail(name,
                        "holds " + std::to_string(t.numel()) + " values, expected " + std::to_string(numel));
        WeightView v;
        v.type = tf.second->type;
        v.rows = t.rows();
        v.cols = t.cols();
        v.data = t.data;
        std::vector<float> out(static_cast<size_t>(numel));
        for (int64_t r = 0; r < v.rows; ++r)
            kernels::reference::dequantize_row(v, r, out.data() + r * v.cols);
        return out;
    }

    const std::string& file_name() const { return tensors_.file; }

    // The 2-D tensor `name` with the converter's kRopePairs permutation undone, when the map says it made
    // one (Mixtral's q/k: tensor_map_gguf.h): its rows gathered back into HF's order, into `owned` —
    // whole rows, so any block type moves unchanged. Otherwise the view into the file.
    Expected<WeightView> matrix_in_hf_rows(const std::string& name,
                                           std::vector<std::vector<uint8_t>>* owned) const {
        SLUICE_ASSIGN_OR_RETURN(WeightView w, matrix(name));
        auto it = expected_.find(name);
        if (it == expected_.end()) return w;
        for (const GgufValueStep& step : it->second.steps) {
            if (step.kind != GgufValueStep::Kind::kRopePairs) continue;
            const int64_t hd = step.head_dim;
            if (hd <= 0 || hd % 2 != 0 || step.nk * hd != w.rows)
                return fail(name, "has " + std::to_string(w.rows) + " rows, not " + std::to_string(step.nk) +
                                      " heads of " + std::to_string(hd));
            // HF row h·hd + s·hd/2 + i is the file's row h·hd + 2i + s (LlamaModel.permute).
            std::vector<int64_t> rows;
            rows.reserve(static_cast<size_t>(w.rows));
            for (int64_t h = 0; h < step.nk; ++h)
                for (int64_t s = 0; s < 2; ++s)
                    for (int64_t i = 0; i < hd / 2; ++i) rows.push_back(h * hd + 2 * i + s);
            w = gather_rows(w, rows, owned);
        }
        return w;
    }

 private:
    const GgufTensorSet& tensors_;
    std::map<std::string, GgufTensorSource> expected_;
};

uint64_t view_bytes(const WeightView& v) {
    return static_cast<uint64_t>(v.rows) * v.row_bytes();
}

std::string blk(int64_t l) {
    return "blk." + std::to_string(l) + ".";
}

// `w` as row tiles in a buffer of `owned` (the view unchanged when its format has none); the whole pages
// of the mapping it was read from are dropped from this process (MADV_DONTNEED on a read-only file
// mapping: a later read faults them in again from the file, so nothing that reads the file breaks).
uint64_t tile_view(WeightView* w, std::vector<std::vector<uint8_t>>* owned) {
    const kernels::WeightType tiled = kernels::tiled_type(*w);
    if (tiled == w->type || w->data == nullptr) return 0;
    const uint64_t bytes = view_bytes(*w);
    std::vector<uint8_t>& buf = owned->emplace_back(bytes);
    const auto* src = static_cast<const uint8_t*>(w->data);
    kernels::ggml_tile_rows(w->type, src, w->rows, w->cols, buf.data());
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(src) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(src) + bytes) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    w->type = tiled;
    w->data = buf.data();
    return bytes;
}

}  // namespace

uint64_t use_dense_row_tiles(ModelWeights* weights) {
    uint64_t bytes = 0;
    auto tile = [&](WeightView& w) { bytes += tile_view(&w, &weights->owned); };
    auto tile_mlp = [&](ExpertWeights& e) {
        tile(e.gate);
        tile(e.up);
        tile(e.down);
    };
    if (weights->lm_head.data != weights->embed.data) {
        tile(weights->lm_head);
    } else {
        // The lm_head is the embedding table: the table itself in tiles, so the product that reads all of
        // it every token takes the tiles' kernels; a lookup reads its row back untiled (dequantize_row).
        tile(weights->embed);
        weights->lm_head.type = weights->embed.type;
        weights->lm_head.data = weights->embed.data;
    }
    tile(weights->mtp.fc);
    for (LayerWeights& l : weights->layers) {
        for (WeightView* w : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj,
                              &l.linear.in_qkvz, &l.linear.in_ba, &l.linear.in_qkv, &l.linear.in_z,
                              &l.linear.in_b, &l.linear.in_a, &l.linear.out_proj})
            tile(*w);
        tile_mlp(l.moe_w.shared);
        tile_mlp(l.dense_mlp);
    }
    return bytes;
}

WeightView gguf_matrix_view(const GgufTensor& tensor, const void* data, int64_t index) {
    const WeightFormat* f = kernels::ggml_weight_format(static_cast<uint32_t>(tensor.type));
    WeightView v;
    v.type = f->type;
    v.cols = tensor.cols();
    v.rows = tensor.dims.size() >= 2 ? tensor.dims[1] : 1;
    v.data = static_cast<const uint8_t*>(data) +
             static_cast<size_t>(index) * static_cast<size_t>(v.rows) * f->data_row_bytes(v.cols);
    return v;
}

namespace {

// Every tensor of the map bound from `tensors` (see load_gguf_weights).
Expected<ModelWeights> bind_gguf(const ModelConfig& cfg, const GgufTensorSet& tensors, GgufExperts experts) {
    GgufBinder b(cfg, tensors);
    ModelWeights mw;
    mw.layout = CheckpointLayout::kGguf;
    const int64_t H = cfg.hidden;

    // A file with more decoder blocks than its metadata describes would run a truncated model.
    for (const auto& [name, t] : tensors.by_name) {
        if (t->name.compare(0, 4, "blk.") != 0) continue;
        const int64_t index = std::strtoll(t->name.c_str() + 4, nullptr, 10);
        // (blocks past them: the MTP head's, run for Qwen, left alone for GLM)
        if (index >= cfg.n_layers && cfg.mtp_layers == 0 && index >= cfg.n_layers + cfg.nextn_layers)
            return b.fail(t->name, "is of block " + std::to_string(index) + ", but the metadata describes " +
                                       std::to_string(cfg.n_layers) + " decoder blocks");
    }

    SLUICE_ASSIGN_OR_RETURN(mw.embed, b.matrix("token_embd.weight"));
    SLUICE_ASSIGN_OR_RETURN(mw.final_norm, b.floats("output_norm.weight", H));
    if (b.has("output.weight")) {
        SLUICE_ASSIGN_OR_RETURN(mw.lm_head, b.matrix("output.weight"));
    } else {
        mw.lm_head = mw.embed;  // tied: the converter writes no output.weight
    }
    mw.dense_bytes += view_bytes(mw.embed) + (mw.lm_head.data != mw.embed.data ? view_bytes(mw.lm_head) : 0);

    const int64_t n_layers = cfg.n_layers + cfg.mtp_layers;
    mw.layers.resize(static_cast<size_t>(n_layers));
    const char* post_norm = gguf_post_norm_name(cfg);
    for (int64_t l = 0; l < n_layers; ++l) {
        LayerWeights& lw = mw.layers[static_cast<size_t>(l)];
        const std::string g = blk(l);
        SLUICE_ASSIGN_OR_RETURN(lw.input_norm, b.floats(g + "attn_norm.weight", H));
        SLUICE_ASSIGN_OR_RETURN(lw.post_norm, b.floats(g + post_norm, H));
        if (cfg.is_full_attention(l)) {
            AttentionWeights& a = lw.attn;
            SLUICE_ASSIGN_OR_RETURN(a.q_proj, b.matrix_in_hf_rows(g + "attn_q.weight", &mw.owned));
            SLUICE_ASSIGN_OR_RETURN(a.k_proj, b.matrix_in_hf_rows(g + "attn_k.weight", &mw.owned));
            SLUICE_ASSIGN_OR_RETURN(a.v_proj, b.matrix(g + "attn_v.weight"));
            SLUICE_ASSIGN_OR_RETURN(a.o_proj, b.matrix(g + "attn_output.weight"));
            if (cfg.attn_qk_norm) {
                SLUICE_ASSIGN_OR_RETURN(a.q_norm, b.floats(g + "attn_q_norm.weight", cfg.head_dim));
                SLUICE_ASSIGN_OR_RETURN(a.k_norm, b.floats(g + "attn_k_norm.weight", cfg.head_dim));
            }
            if (cfg.attn_qkv_bias) {
                const int64_t kv = cfg.n_kv_heads * cfg.head_dim;
                SLUICE_ASSIGN_OR_RETURN(a.q_bias, b.floats(g + "attn_q.bias", cfg.n_heads * cfg.head_dim));
                SLUICE_ASSIGN_OR_RETURN(a.k_bias, b.floats(g + "attn_k.bias", kv));
                SLUICE_ASSIGN_OR_RETURN(a.v_bias, b.floats(g + "attn_v.bias", kv));
            }
            if (cfg.attn_o_bias) {
                SLUICE_ASSIGN_OR_RETURN(a.o_bias, b.floats(g + "attn_output.bias", H));
            }
            if (cfg.attn_sinks) {
                SLUICE_ASSIGN_OR_RETURN(a.sinks, b.floats(g + "attn_sinks.weight", cfg.n_heads));
            }
            for (const WeightView* v : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj})
                mw.dense_bytes += view_bytes(*v);
        } else {
            DeltaNetWeights& d = lw.linear;
            const int64_t nk = cfg.linear_k_heads, nv = cfg.linear_v_heads, r = nv / nk;
            SLUICE_ASSIGN_OR_RETURN(d.in_qkv, b.matrix(g + "attn_qkv.weight"));
            SLUICE_ASSIGN_OR_RETURN(d.in_z, b.matrix(g + "attn_gate.weight"));
            if (cfg.split_linear_projections) {
                SLUICE_ASSIGN_OR_RETURN(d.in_b, b.matrix(g + "ssm_beta.weight"));
                SLUICE_ASSIGN_OR_RETURN(d.in_a, b.matrix(g + "ssm_alpha.weight"));
            } else {
                // Qwen3-Next's ssm_ba keeps HF's rows, [b (r) | a (r)] per key head g: value head g·r + i
                // takes b from row 2rg + i and a from row 2rg + r + i.
                SLUICE_ASSIGN_OR_RETURN(const WeightView ba, b.matrix(g + "ssm_ba.weight"));
                std::vector<int64_t> b_rows, a_rows;
                for (int64_t kh = 0; kh < nk; ++kh)
                    for (int64_t i = 0; i < r; ++i) {
                        b_rows.push_back(2 * r * kh + i);
                        a_rows.push_back(2 * r * kh + r + i);
                    }
                d.in_b = gather_rows(ba, b_rows, &mw.owned);
                d.in_a = gather_rows(ba, a_rows, &mw.owned);
            }
            for (const WeightView* v : {&d.in_qkv, &d.in_z, &d.in_b, &d.in_a})
                mw.dense_bytes += view_bytes(*v);
            SLUICE_ASSIGN_OR_RETURN(d.conv,
                                    b.floats(g + "ssm_conv1d.weight", cfg.conv_dim() * cfg.conv_kernel));
            SLUICE_ASSIGN_OR_RETURN(d.neg_a, b.floats(g + "ssm_a", nv));  // −exp(A_log) already
            SLUICE_ASSIGN_OR_RETURN(d.dt_bias, b.floats(g + "ssm_dt.bias", nv));
            SLUICE_ASSIGN_OR_RETURN(d.norm, b.floats(g + "ssm_norm.weight", cfg.linear_v_dim));
            SLUICE_ASSIGN_OR_RETURN(d.out_proj, b.matrix(g + "ssm_out.weight"));
            mw.dense_bytes += view_bytes(d.out_proj);
        }

        if (!cfg.is_moe_layer(l)) {
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.gate, b.matrix(g + "ffn_gate.weight"));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.up, b.matrix(g + "ffn_up.weight"));
            SLUICE_ASSIGN_OR_RETURN(lw.dense_mlp.down, b.matrix(g + "ffn_down.weight"));
            for (const WeightView* v : {&lw.dense_mlp.gate, &lw.dense_mlp.up, &lw.dense_mlp.down})
                mw.dense_bytes += view_bytes(*v);
        } else {
            MoeWeights& m = lw.moe_w;
            SLUICE_ASSIGN_OR_RETURN(m.router, b.matrix(g + "ffn_gate_inp.weight"));
            mw.dense_bytes += view_bytes(m.router);
            if (cfg.router_sigmoid) {
                SLUICE_ASSIGN_OR_RETURN(m.router_bias, b.floats(g + "exp_probs_b.bias", cfg.n_experts));
            }
            if (cfg.router_logit_bias) {
                SLUICE_ASSIGN_OR_RETURN(m.router_logit_bias,
                                        b.floats(g + "ffn_gate_inp.bias", cfg.n_experts));
            }
            if (cfg.expert_bias) {  // gpt-oss: [E, I], [E, I], [E, H], resident with the dense core
                const int64_t E = cfg.n_experts, I = cfg.expert_ffn;
                SLUICE_ASSIGN_OR_RETURN(m.expert_gate_bias, b.floats(g + "ffn_gate_exps.bias", E * I));
                SLUICE_ASSIGN_OR_RETURN(m.expert_up_bias, b.floats(g + "ffn_up_exps.bias", E * I));
                SLUICE_ASSIGN_OR_RETURN(m.expert_down_bias, b.floats(g + "ffn_down_exps.bias", E * H));
            }
            const GgufTensor* proj[3];
            for (int p = 0; p < 3 && experts != GgufExperts::kElsewhere; ++p) {
                static const char* const kNames[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                      "ffn_down_exps.weight"};
                SLUICE_ASSIGN_OR_RETURN(auto tf, b.tensor(g + kNames[p]));
                proj[p] = tf.first;
                mw.expert_bytes += proj[p]->size_bytes;
            }
            if (experts == GgufExperts::kBind) {
                m.experts.resize(static_cast<size_t>(cfg.n_experts));
                for (int64_t e = 0; e < cfg.n_experts; ++e)
                    m.experts[static_cast<size_t>(e)] = {gguf_matrix_view(*proj[0], proj[0]->data, e),
                                                         gguf_matrix_view(*proj[1], proj[1]->data, e),
                                                         gguf_matrix_view(*proj[2], proj[2]->data, e)};
            }
            if (cfg.shared_expert_ffn > 0) {
                m.has_shared = true;
                SLUICE_ASSIGN_OR_RETURN(m.shared.gate, b.matrix(g + "ffn_gate_shexp.weight"));
                SLUICE_ASSIGN_OR_RETURN(m.shared.up, b.matrix(g + "ffn_up_shexp.weight"));
                SLUICE_ASSIGN_OR_RETURN(m.shared.down, b.matrix(g + "ffn_down_shexp.weight"));
                for (const WeightView* v : {&m.shared.gate, &m.shared.up, &m.shared.down})
                    mw.dense_bytes += view_bytes(*v);
                if (cfg.shared_expert_gated) {
                    SLUICE_ASSIGN_OR_RETURN(m.shared_gate, b.matrix(g + "ffn_gate_inp_shexp.weight"));
                    mw.dense_bytes += view_bytes(m.shared_gate);
                }
            }
        }
        if (cfg.is_mtp_layer(l)) {
            MtpWeights& t = mw.mtp;
            SLUICE_ASSIGN_OR_RETURN(t.fc, b.matrix(g + "nextn.eh_proj.weight"));
            SLUICE_ASSIGN_OR_RETURN(t.norm_embedding, b.floats(g + "nextn.enorm.weight", H));
            SLUICE_ASSIGN_OR_RETURN(t.norm_hidden, b.floats(g + "nextn.hnorm.weight", H));
            SLUICE_ASSIGN_OR_RETURN(t.norm, b.floats(g + "nextn.shared_head_norm.weight", H));
            mw.dense_bytes += view_bytes(t.fc) + sizeof(float) * 3 * static_cast<uint64_t>(H);
        }
    }
    uint64_t floats = mw.final_norm.size();
    for (const LayerWeights& lw : mw.layers)
        floats += lw.input_norm.size() + lw.post_norm.size() + lw.attn.q_norm.size() + lw.attn.k_norm.size() +
                  lw.attn.q_bias.size() + lw.attn.k_bias.size() + lw.attn.v_bias.size() +
                  lw.linear.conv.size() + lw.linear.neg_a.size() + lw.linear.dt_bias.size() +
                  lw.linear.norm.size() + lw.moe_w.router_bias.size() + lw.attn.o_bias.size() +
                  lw.attn.sinks.size() + lw.moe_w.router_logit_bias.size() +
                  lw.moe_w.expert_gate_bias.size() + lw.moe_w.expert_up_bias.size() +
                  lw.moe_w.expert_down_bias.size();
    mw.dense_bytes += sizeof(float) * floats;
    log::debug("[weights] gguf {}, dense {:.1f} MB, experts {:.1f} MB", b.file_name(), mw.dense_bytes / 1e6,
               mw.expert_bytes / 1e6);
    return mw;
}

}  // namespace

Expected<ModelWeights> load_gguf_weights(const ModelConfig& cfg,
                                         std::shared_ptr<format::GgufCheckpoint> checkpoint,
                                         bool bind_experts) {
    GgufTensorSet tensors;
    tensors.file = checkpoint->files().front()->path();
    for (const GgufTensor* t : checkpoint->tensors()) tensors.by_name.emplace(t->name, t);
    SLUICE_ASSIGN_OR_RETURN(ModelWeights mw,
                            bind_gguf(cfg, tensors, bind_experts ? GgufExperts::kBind : GgufExperts::kCheck));
    mw.gguf = std::move(checkpoint);
    return mw;
}

namespace {

// A GGUF pack's dense section as the GGUF tensor it was: a block type's from its ggml_type (the U8 row
// bytes back to elements), an element type's from its dtype. No data yet.
Expected<GgufTensor> gguf_tensor_of_pack_section(const format::PackSection& s) {
    GgufTensor t;
    t.name = s.name;
    std::vector<int64_t> shape = s.shape;
    if (s.ggml_type) {
        t.type = *s.ggml_type;
        if (!shape.empty()) shape.back() = s.ggml_cols();
    } else {
        using format::DType;
        using format::GgmlType;
        switch (s.dtype) {
            case DType::kF32: t.type = GgmlType::kF32; break;
            case DType::kF16: t.type = GgmlType::kF16; break;
            case DType::kBF16: t.type = GgmlType::kBF16; break;
            case DType::kF64: t.type = GgmlType::kF64; break;
            case DType::kI8: t.type = GgmlType::kI8; break;
            case DType::kI16: t.type = GgmlType::kI16; break;
            case DType::kI32: t.type = GgmlType::kI32; break;
            case DType::kI64: t.type = GgmlType::kI64; break;
            default:
                return error(ErrorCode::kCorrupt, "[pack] dense tensor '" + s.name + "' is " +
                                                      format::dtype_name(s.dtype) +
                                                      " without a ggml_type: no GGUF tensor is stored so");
        }
    }
    t.dims.assign(shape.rbegin(), shape.rend());
    t.size_bytes = s.size;
    return t;
}

}  // namespace

Expected<ModelWeights> load_gguf_pack_weights(const ModelConfig& cfg, const format::PackLayout& layout,
                                              std::shared_ptr<format::Checkpoint> dense) {
    // The dense sections as the GGUF tensors they were, their bytes in the mapped dense file (the
    // layout was checked against its header: model::check_pack_dense).
    std::vector<GgufTensor> owned;
    owned.reserve(layout.dense.size());
    for (const format::PackSection& s : layout.dense) {
        SLUICE_ASSIGN_OR_RETURN(GgufTensor t, gguf_tensor_of_pack_section(s));
        const format::TensorInfo* info = dense->find(s.name);
        if (info == nullptr || info->size_bytes != s.size)
            return error(ErrorCode::kCorrupt, "[pack] dense tensor '" + s.name + "' is not in " +
                                                  dense->dir() + "'s " + layout.dense_file +
                                                  " as layout.json says");
        t.data = info->data;
        owned.push_back(std::move(t));
    }
    GgufTensorSet tensors;
    tensors.file = (std::filesystem::path(dense->dir()) / layout.dense_file).string();
    for (const GgufTensor& t : owned) tensors.by_name.emplace(t.name, &t);
    SLUICE_ASSIGN_OR_RETURN(ModelWeights mw, bind_gguf(cfg, tensors, GgufExperts::kElsewhere));
    mw.checkpoint = std::move(dense);
    return mw;
}

int64_t gguf_pack_mtp_layers(const ModelConfig& cfg, const format::PackLayout& layout) {
    if (cfg.family != Family::kQwen3Next && cfg.family != Family::kQwen35Moe) return 0;
    const std::string fc = "blk." + std::to_string(cfg.n_layers) + ".nextn.eh_proj.weight";
    for (const format::PackSection& s : layout.dense)
        if (s.name == fc) return 1;
    return 0;
}

}  // namespace sluice::model
