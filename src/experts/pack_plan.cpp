#include "experts/pack_plan.h"

#include <algorithm>

#include "experts/pack_writer.h"
#include "model/weights.h"

namespace sluice::experts {

using format::DType;
using format::TensorInfo;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_routed_expert(const std::string& name) {
    return name.find(".mlp.experts.") != std::string::npos ||
           name.find(".mlp.switch_mlp.") != std::string::npos;
}

bool is_skipped(const std::string& name) {
    return name.rfind("mtp.", 0) == 0 || name.rfind("model.visual.", 0) == 0 ||
           name.rfind("vision_tower.", 0) == 0 || name.rfind("model.mtp.", 0) == 0;
}

bool is_float(DType t) {
    return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
}

// mlx-lm keeps routers and the shared-expert gate at 8 bits (models.md §5.4).
int module_bits(const std::string& module, int bits) {
    return ends_with(module, "mlp.gate") || ends_with(module, "mlp.shared_expert_gate") ? 8 : bits;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// One matrix of the source: `rows` × `cols` at byte `offset` inside tensor `w` (a slice of a
// stacked tensor, or all of it), with its scales/biases slices when it is MLX-quantized.
struct SrcMatrix {
    const TensorInfo* w = nullptr;
    uint64_t w_offset = 0;
    int64_t rows = 0, cols = 0;
    int bits = 0, group_size = 0;  // 0 = float
    const TensorInfo* scales = nullptr;
    const TensorInfo* biases = nullptr;
    uint64_t sb_offset = 0;
};

class Planner {
 public:
    Planner(const model::ModelConfig& cfg, const format::Checkpoint& ckpt, PackPlan* plan)
        : cfg_(cfg), ckpt_(ckpt), plan_(*plan) {
        for (size_t s = 0; s < ckpt.files().size(); ++s) {
            const auto& f = *ckpt.files()[s];
            PlanShard shard;
            shard.file = f.name();
            plan_.shards.push_back(shard);
            for (const auto& t : f.tensors()) {
                shard_of_[t.name] = s;
                data_start_[t.name] = f.data_start();
            }
        }
    }

    Expected<const TensorInfo*> require(const std::string& name) const {
        const TensorInfo* t = ckpt_.find(name);
        if (t == nullptr)
            return error(ErrorCode::kNotFound, "[pack] missing tensor '" + name + "' in " + ckpt_.dir());
        return t;
    }

    // `count` stacked matrices [rows, cols] under module `path` (count 0: one plain matrix).
    Expected<std::vector<SrcMatrix>> stack(const std::string& path, int64_t count, int64_t rows, int64_t cols,
                                           const std::string& weight_suffix = ".weight") const {
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* w, require(path + weight_suffix));
        std::vector<int64_t> lead;
        if (count > 0) lead.push_back(count);
        auto with = [&](int64_t a, int64_t b) {
            auto s = lead;
            s.push_back(a);
            s.push_back(b);
            return s;
        };
        const int64_t n = count > 0 ? count : 1;
        std::vector<SrcMatrix> out(static_cast<size_t>(n));
        const TensorInfo* scales = ckpt_.find(path + ".scales");
        if (scales == nullptr) {
            if (!is_float(w->dtype) || w->shape != with(rows, cols))
                return mismatch(path + weight_suffix, "F32/F16/BF16 " + shape_str(with(rows, cols)), *w);
            const uint64_t stride = static_cast<uint64_t>(rows * cols) * format::dtype_size(w->dtype);
            for (int64_t e = 0; e < n; ++e) out[static_cast<size_t>(e)] = {w, e * stride, rows, cols};
            return out;
        }
        const model::QuantSpec spec = cfg_.quantization.for_module(path);
        if (!cfg_.quantization.present || spec.bits == 0 || cols % spec.group_size != 0)
            return error(ErrorCode::kInvalidArgument,
                         "[pack] module '" + path + "' is quantized in the checkpoint but config.json " +
                             "gives no matching quantization for it");
        const int64_t words = cols * spec.bits / 32, groups = cols / spec.group_size;
        if (w->dtype != DType::kU32 || w->shape != with(rows, words))
            return mismatch(path + weight_suffix, "U32 " + shape_str(with(rows, words)), *w);
        SLUICE_ASSIGN_OR_RETURN(const TensorInfo* biases, require(path + ".biases"));
        for (const TensorInfo* sb : {scales, biases})
            if (!is_float(sb->dtype) || sb->shape != with(rows, groups) || sb->dtype != scales->dtype)
                return mismatch(sb->name, "F32/F16/BF16 " + shape_str(with(rows, groups)), *sb);
        const uint64_t wstride = static_cast<uint64_t>(rows * words) * 4;
        const uint64_t sstride = static_cast<uint64_t>(rows * groups) * format::dtype_size(scales->dtype);
        for (int64_t e = 0; e < n; ++e)
            out[static_cast<size_t>(e)] = {w,      e * wstride, rows,       cols, spec.bits, spec.group_size,
                                           scales, biases,      e * sstride};
        return out;
    }

    // The routed experts of one layer, [E] × {gate, up, down}, in any of the three layouts
    // (MLX switch_mlp, fused gate_up_proj, one tensor per expert) — as model/weights.cpp binds them.
    Expected<std::vector<std::array<SrcMatrix, 3>>> experts(const std::string& p) const {
        const int64_t E = cfg_.n_experts, I = cfg_.expert_ffn, H = cfg_.hidden;
        std::vector<std::array<SrcMatrix, 3>> out(static_cast<size_t>(E));
        if (ckpt_.find(p + "mlp.switch_mlp.gate_proj.weight") != nullptr) {
            SLUICE_ASSIGN_OR_RETURN(auto g, stack(p + "mlp.switch_mlp.gate_proj", E, I, H));
            SLUICE_ASSIGN_OR_RETURN(auto u, stack(p + "mlp.switch_mlp.up_proj", E, I, H));
            SLUICE_ASSIGN_OR_RETURN(auto d, stack(p + "mlp.switch_mlp.down_proj", E, H, I));
            for (size_t e = 0; e < out.size(); ++e) out[e] = {g[e], u[e], d[e]};
        } else if (ckpt_.find(p + "mlp.experts.gate_up_proj") != nullptr) {
            SLUICE_ASSIGN_OR_RETURN(auto gu, stack(p + "mlp.experts.gate_up_proj", E, 2 * I, H, ""));
            SLUICE_ASSIGN_OR_RETURN(auto d, stack(p + "mlp.experts.down_proj", E, H, I, ""));
            if (gu[0].bits != 0)
                return error(ErrorCode::kUnsupported, "[pack] quantized fused gate_up_proj in '" + p +
                                                          "mlp.experts' is not supported");
            for (size_t e = 0; e < out.size(); ++e) {
                SrcMatrix gate = gu[e], up = gu[e];
                gate.rows = up.rows = I;
                up.w_offset += static_cast<uint64_t>(I * H) * format::dtype_size(gu[e].w->dtype);
                out[e] = {gate, up, d[e]};
            }
        } else {
            for (int64_t e = 0; e < E; ++e) {
                const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
                SLUICE_ASSIGN_OR_RETURN(auto g, stack(ep + "gate_proj", 0, I, H));
                SLUICE_ASSIGN_OR_RETURN(auto u, stack(ep + "up_proj", 0, I, H));
                SLUICE_ASSIGN_OR_RETURN(auto d, stack(ep + "down_proj", 0, H, I));
                out[static_cast<size_t>(e)] = {g[0], u[0], d[0]};
            }
        }
        return out;
    }

    uint64_t abs_offset(const TensorInfo* t, uint64_t within) const {
        return data_start_.at(t->name) + t->offset + within;
    }

    void add_copy(const TensorInfo* t, uint64_t within, uint64_t bytes, uint32_t out_file, uint64_t dst) {
        if (bytes == 0) return;
        PlanPiece p;
        p.kind = PlanPiece::Kind::kCopy;
        p.src_begin = abs_offset(t, within);
        p.src_bytes = bytes;
        p.out_file = out_file;
        p.dst = dst;
        plan_.shards[shard_of_.at(t->name)].pieces.push_back(p);
    }

    void add_quantize(const TensorInfo* t, uint64_t within, int64_t rows, int64_t cols, int bits, int group,
                      uint32_t out_file, uint64_t dst, uint64_t dst_scales, uint64_t dst_biases) {
        PlanPiece p;
        p.kind = PlanPiece::Kind::kQuantizeRows;
        p.src_dtype = t->dtype;
        p.cols = cols;
        p.bits = bits;
        p.group_size = group;
        p.src_begin = abs_offset(t, within);
        p.src_bytes = static_cast<uint64_t>(rows) * p.row_bytes();
        p.out_file = out_file;
        p.dst = dst;
        p.dst_scales = dst_scales;
        p.dst_biases = dst_biases;
        plan_.shards[shard_of_.at(t->name)].pieces.push_back(p);
    }

 private:
    static Status mismatch(const std::string& name, const std::string& expected, const TensorInfo& t) {
        return error(ErrorCode::kInvalidArgument, "[pack] tensor '" + name + "': expected " + expected +
                                                      ", got " + format::describe(t.dtype, t.shape));
    }

    const model::ModelConfig& cfg_;
    const format::Checkpoint& ckpt_;
    PackPlan& plan_;
    std::map<std::string, size_t> shard_of_;
    std::map<std::string, uint64_t> data_start_;
};

format::PackProjection projection_for(const SrcMatrix& src, int bits, int group_size) {
    if (src.bits != 0)  // MLX source: verbatim, with its own bits, group and scale dtype
        return make_projection(src.rows, src.cols, src.bits, src.group_size, DType::kU32, src.scales->dtype);
    if (bits == 16 || src.cols % group_size != 0)
        return make_projection(src.rows, src.cols, 0, 0, src.w->dtype);
    return make_projection(src.rows, src.cols, bits, group_size, src.w->dtype);
}

}  // namespace

uint64_t PackPlan::source_bytes() const {
    uint64_t n = 0;
    for (const auto& s : shards) n += s.size_bytes;
    return n;
}

uint64_t PackPlan::packed_bytes() const {
    uint64_t n = 0;
    for (const auto& f : out_files) n += f.size_bytes;
    return n;
}

Expected<int> resolve_pack_bits(const model::ModelConfig& cfg, int requested, int group_size,
                                const std::string& source) {
    const int bits = requested == 0 ? 4 : requested;
    if (bits != 4 && bits != 8 && bits != 16)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] --bits must be 4, 8 or 16 (keep float), got " + std::to_string(bits));
    if (group_size != 32 && group_size != 64 && group_size != 128)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] --group-size must be 32, 64 or 128, got " + std::to_string(group_size));
    if (!cfg.quantization.present) return bits;
    if (requested != 0 && requested != cfg.quantization.global.bits) {
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + source + "' is an MLX " + std::to_string(cfg.quantization.global.bits) +
                         "-bit checkpoint; its bytes are copied verbatim, so --bits cannot change it");
    }
    return cfg.quantization.global.bits;
}

Expected<PackPlan> plan_pack(const model::ModelConfig& cfg, const format::Checkpoint& ckpt, int bits,
                             int group_size) {
    PackPlan plan;
    plan.bits = bits;
    plan.group_size = group_size;
    Planner planner(cfg, ckpt, &plan);
    for (size_t s = 0; s < ckpt.files().size(); ++s) {
        const auto& f = *ckpt.files()[s];
        uint64_t end = f.data_start();
        for (const auto& t : f.tensors()) end = std::max(end, f.data_start() + t.offset + t.size_bytes);
        plan.shards[s].size_bytes = end;  // the caller checks this against the real file size
    }
    const std::string prefix = model::text_model_prefix(ckpt);
    if (prefix.empty())
        return error(ErrorCode::kNotFound, "[pack] no embedding table in " + ckpt.dir() +
                                               " (looked for model.embed_tokens.weight and the "
                                               "language_model variants)");
    format::PackLayout& layout = plan.layout;
    layout.source_layout = model::layout_name(model::detect_checkpoint_layout(cfg, ckpt, prefix));
    layout.n_experts = cfg.n_experts;
    plan.quantized_here = !cfg.quantization.present && bits != 16;

    // Dense: every tensor but routed experts (and mtp/vision), in name order, quantized or copied.
    struct DenseSource {
        const TensorInfo* t;
        bool quantize;
        int bits;
    };
    std::vector<DenseSource> dense_sources;
    for (const std::string& name : ckpt.names()) {
        if (is_routed_expert(name) || is_skipped(name)) continue;
        const TensorInfo* t = ckpt.find(name);
        const std::string module = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : "";
        const int b = module_bits(module, bits);
        const bool quantize = plan.quantized_here && is_float(t->dtype) && !module.empty() &&
                              t->shape.size() == 2 && t->shape[1] % group_size == 0;
        dense_sources.push_back({t, quantize, b});
        if (quantize) {
            const int64_t rows = t->shape[0], words = t->shape[1] * b / 32, groups = t->shape[1] / group_size;
            uint64_t off = layout.dense.empty() ? 0 : layout.dense.back().offset + layout.dense.back().size;
            layout.dense.push_back({module + ".weight",
                                    DType::kU32,
                                    {rows, words},
                                    off,
                                    static_cast<uint64_t>(rows * words) * 4,
                                    b,
                                    group_size});
            off += layout.dense.back().size;
            const uint64_t sbytes = static_cast<uint64_t>(rows * groups) * 2;
            layout.dense.push_back({module + ".scales", DType::kBF16, {rows, groups}, off, sbytes});
            layout.dense.push_back({module + ".biases", DType::kBF16, {rows, groups}, off + sbytes, sbytes});
            plan.module_bits_used[module] = b;
        } else {
            const uint64_t off =
                layout.dense.empty() ? 0 : layout.dense.back().offset + layout.dense.back().size;
            layout.dense.push_back({name, t->dtype, t->shape, off, t->size_bytes});
        }
    }
    plan.dense_header = dense_file_header(layout.dense);
    const uint64_t dense_data = plan.dense_header.size();
    uint64_t dense_end = dense_data;
    if (!layout.dense.empty()) dense_end += layout.dense.back().offset + layout.dense.back().size;
    plan.out_files.push_back({layout.dense_file, dense_end});
    size_t section = 0;
    for (const auto& d : dense_sources) {
        if (d.quantize) {
            const auto& w = layout.dense[section];
            planner.add_quantize(d.t, 0, d.t->shape[0], d.t->shape[1], d.bits, group_size, 0,
                                 dense_data + w.offset, dense_data + layout.dense[section + 1].offset,
                                 dense_data + layout.dense[section + 2].offset);
            section += 3;
        } else {
            planner.add_copy(d.t, 0, d.t->size_bytes, 0, dense_data + layout.dense[section].offset);
            section += 1;
        }
    }

    // Experts: one file per MoE layer, record e = expert e's gate, up, down.
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
        if (!cfg.is_moe_layer(l)) continue;
        SLUICE_ASSIGN_OR_RETURN(auto experts, planner.experts(prefix + "layers." + std::to_string(l) + "."));
        format::PackExpertFile file = make_expert_file_layout(
            l, projection_for(experts[0][0], bits, group_size),
            projection_for(experts[0][1], bits, group_size), projection_for(experts[0][2], bits, group_size));
        const auto out_index = static_cast<uint32_t>(plan.out_files.size());
        plan.out_files.push_back({file.file, file.record_stride * static_cast<uint64_t>(cfg.n_experts)});
        for (size_t e = 0; e < experts.size(); ++e) {
            const uint64_t base = e * file.record_stride;
            const format::PackProjection* projections[3] = {&file.gate, &file.up, &file.down};
            for (size_t k = 0; k < 3; ++k) {
                const SrcMatrix& m = experts[e][k];
                const format::PackProjection& p = *projections[k];
                if (m.bits != 0) {
                    planner.add_copy(m.w, m.w_offset, p.weight.size, out_index, base + p.weight.offset);
                    planner.add_copy(m.scales, m.sb_offset, p.scales.size, out_index, base + p.scales.offset);
                    planner.add_copy(m.biases, m.sb_offset, p.biases.size, out_index, base + p.biases.offset);
                } else if (p.bits == 0) {
                    planner.add_copy(m.w, m.w_offset, p.weight.size, out_index, base + p.weight.offset);
                } else {
                    planner.add_quantize(m.w, m.w_offset, m.rows, m.cols, p.bits, p.group_size, out_index,
                                         base + p.weight.offset, base + p.scales.offset,
                                         base + p.biases.offset);
                }
            }
        }
        layout.expert_files.push_back(std::move(file));
    }
    for (auto& s : plan.shards) {
        std::sort(s.pieces.begin(), s.pieces.end(),
                  [](const PlanPiece& a, const PlanPiece& b) { return a.src_begin < b.src_begin; });
        for (size_t i = 1; i < s.pieces.size(); ++i)
            if (s.pieces[i].src_begin < s.pieces[i - 1].src_end())
                return error(ErrorCode::kInternal, "[pack] overlapping source pieces in " + s.file);
    }
    return plan;
}

}  // namespace sluice::experts
