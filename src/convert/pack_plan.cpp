#include "convert/pack_plan.h"

#include <algorithm>
#include <cstdlib>

#include "convert/pack_writer.h"
#include "kernels/weight_format.h"
#include "model/gpt_oss_experts.h"
#include "model/tensor_map.h"
#include "model/weights.h"

namespace sluice::convert {

using format::DType;
using format::TensorInfo;

namespace {

using SrcMatrix = model::SourceMatrix;

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

    // The routed experts of layer l, [E] × {gate, up, down}, as the tensor map finds them.
    Expected<std::vector<std::array<SrcMatrix, 3>>> experts(const model::TensorNames& names,
                                                            int64_t l) const {
        return model::source_experts(cfg_, ckpt_, names, l);
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
                      uint32_t out_file, uint64_t dst, uint64_t dst_scales, uint64_t dst_biases,
                      const TensorInfo* block_scales = nullptr) {
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
        if (block_scales != nullptr) {
            p.scale_shard = static_cast<uint32_t>(shard_of_.at(block_scales->name));
            p.scale_begin = abs_offset(block_scales, 0);
            p.scale_rows = block_scales->shape[0];
            p.scale_cols = block_scales->shape[1];
            p.fp8_block_rows = cfg_.fp8_block_rows;
            p.fp8_block_cols = cfg_.fp8_block_cols;
        }
        plan_.shards[shard_of_.at(t->name)].pieces.push_back(p);
    }

    // A piece of another kind over bytes [within, within + p.src_bytes) of tensor t.
    void add_piece(const TensorInfo* t, uint64_t within, PlanPiece p) {
        p.src_begin = abs_offset(t, within);
        plan_.shards[shard_of_.at(t->name)].pieces.push_back(p);
    }

 private:
    const model::ModelConfig& cfg_;
    const format::Checkpoint& ckpt_;
    PackPlan& plan_;
    std::map<std::string, size_t> shard_of_;
    std::map<std::string, uint64_t> data_start_;
};

// An FP8 tensor packs only by quantization (nothing runs e4m3 as stored): 4 or 8 bits, columns a whole
// number of groups, its weight_scale_inv beside it with one f32 per block.
Status check_fp8(const model::ModelConfig& cfg, const format::Checkpoint& ckpt, const TensorInfo* t,
                 bool quantized, int bits) {
    if (cfg.fp8_block_rows <= 0)
        return error(
            ErrorCode::kUnsupported,
            "[pack] tensor '" + t->name + "' is F8_E4M3 but config.json declares no fp8 quantization_config");
    if (!quantized)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] tensor '" + t->name +
                         "' is FP8 (e4m3): it packs only quantized, to 4 or 8 bits" +
                         (bits == 16 ? " (not --bits 16)" : " with columns a multiple of --group-size") +
                         ", and only where sluice quantizes that module");
    const TensorInfo* s = ckpt.find(t->name + "_scale_inv");
    const int64_t rows = t->shape.size() == 2 ? t->shape[0] : 0,
                  cols = t->shape.size() == 2 ? t->shape[1] : 0;
    const std::vector<int64_t> grid = {(rows + cfg.fp8_block_rows - 1) / cfg.fp8_block_rows,
                                       (cols + cfg.fp8_block_cols - 1) / cfg.fp8_block_cols};
    if (s == nullptr || s->dtype != DType::kF32 || s->shape != grid)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] tensor '" + t->name + "_scale_inv' must be F32 [" + std::to_string(grid[0]) +
                         "," + std::to_string(grid[1]) + "] beside the FP8 weight" +
                         (s == nullptr ? " (missing)" : ", got " + format::describe(s->dtype, s->shape)));
    return Status::ok();
}

format::PackProjection projection_for(const SrcMatrix& src, int bits, int group_size) {
    if (src.bits != 0)  // MLX source: verbatim, with its own bits, group and scale dtype
        return make_projection(src.rows, src.cols, src.bits, src.group_size, DType::kU32, src.scales->dtype);
    if (bits == 16 || src.cols % group_size != 0)
        return make_projection(src.rows, src.cols, 0, 0, src.w->dtype);
    return make_projection(src.rows, src.cols, bits, group_size, src.w->dtype);
}

// gpt-oss's experts of layer l (model/gpt_oss_experts.h): the Hub's MXFP4 kept as ggml MXFP4 (its codes and
// scales each patched into the output rows), or the float layout transposed per expert and copied (bits 16)
// or quantized like any float source.
Status plan_gpt_oss_experts(const model::ModelConfig& cfg, const format::Checkpoint& ckpt,
                            const model::TensorNames& names, int64_t l, Planner& planner, PackPlan& plan,
                            int group_size) {
    SLUICE_ASSIGN_OR_RETURN(const model::GptOssExpertTensors t,
                            model::gpt_oss_expert_tensors(cfg, ckpt, names, l));
    const int64_t E = cfg.n_experts, I = cfg.expert_ffn, H = cfg.hidden;
    const int bits = plan.bits;
    auto float_projection = [&](int64_t rows, int64_t cols) {
        return bits == 16 || cols % group_size != 0
                   ? make_projection(rows, cols, 0, 0, t.gate_up->dtype)
                   : make_projection(rows, cols, bits, group_size, t.gate_up->dtype);
    };
    format::PackExpertFile file =
        t.mxfp4 ? make_expert_file_layout(l, make_ggml_projection(I, H, format::GgmlType::kMXFP4),
                                          make_ggml_projection(I, H, format::GgmlType::kMXFP4),
                                          make_ggml_projection(H, I, format::GgmlType::kMXFP4))
                : make_expert_file_layout(l, float_projection(I, H), float_projection(I, H),
                                          float_projection(H, I));
    if (!t.mxfp4 && t.down->dtype != t.gate_up->dtype)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + t.down->name + "' is " + format::dtype_name(t.down->dtype) + ", '" +
                         t.gate_up->name + "' " + format::dtype_name(t.gate_up->dtype) +
                         ": gpt-oss's two expert tensors must share a dtype");
    const auto out_index = static_cast<uint32_t>(plan.out_files.size());
    plan.out_files.push_back({file.file, file.record_stride * static_cast<uint64_t>(E)});
    for (int64_t e = 0; e < E; ++e) {
        const uint64_t base = static_cast<uint64_t>(e) * file.record_stride;
        // gate_up (interleaved into gate and up), then down.
        for (const bool gate_up : {true, false}) {
            const format::PackProjection& out = gate_up ? file.gate : file.down;
            PlanPiece p;
            p.out_file = out_index;
            p.interleaved = gate_up;
            p.dst = base + out.weight.offset;
            p.dst_scales = base + out.scales.offset;
            p.dst_biases = base + out.biases.offset;
            if (gate_up) {
                p.dst2 = base + file.up.weight.offset;
                p.dst2_scales = base + file.up.scales.offset;
                p.dst2_biases = base + file.up.biases.offset;
            }
            const int64_t rows = gate_up ? 2 * I : H, cols = gate_up ? H : I;  // the [out, in] matrix
            if (t.mxfp4) {
                p.kind = PlanPiece::Kind::kMxfp4Codes;
                p.src_dtype = DType::kU8;
                p.cols = cols;
                p.src_bytes = static_cast<uint64_t>(rows) * p.row_bytes();
                planner.add_piece(gate_up ? t.gate_up : t.down, static_cast<uint64_t>(e) * p.src_bytes, p);
                p.kind = PlanPiece::Kind::kMxfp4Scales;
                p.src_bytes = static_cast<uint64_t>(rows) * p.row_bytes();
                planner.add_piece(gate_up ? t.gate_up_scales : t.down_scales,
                                  static_cast<uint64_t>(e) * p.src_bytes, p);
            } else {
                p.kind = PlanPiece::Kind::kTransposeRows;
                p.src_dtype = t.gate_up->dtype;
                p.src_rows = cols;  // input-major: [in, out]
                p.cols = rows;
                p.bits = out.bits;
                p.group_size = out.group_size;
                p.src_bytes = static_cast<uint64_t>(rows * cols) * format::dtype_size(p.src_dtype);
                planner.add_piece(gate_up ? t.gate_up : t.down, static_cast<uint64_t>(e) * p.src_bytes, p);
            }
        }
    }
    plan.layout.expert_files.push_back(std::move(file));
    return Status::ok();
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
    const kernels::WeightFormat* format = kernels::quantized_format(bits);
    if (bits != 16 && (format == nullptr || !format->packable))
        return error(ErrorCode::kInvalidArgument, "[pack] --bits must be " + kernels::packable_bits() +
                                                      " or 16 (keep float), got " + std::to_string(bits));
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
    SLUICE_ASSIGN_OR_RETURN(const model::TensorNames names, model::find_tensor_names(ckpt, cfg));
    // The multi-token-prediction head is kept: its dense tensors with the rest, its layer's routed
    // experts as the expert file of layer n_layers.
    const int64_t n_layers = cfg.n_layers + model::mtp_layers_in(cfg, ckpt);
    const std::string& prefix = names.prefix;
    format::PackLayout& layout = plan.layout;
    layout.source_layout = model::layout_name(model::detect_checkpoint_layout(cfg, ckpt, prefix));
    layout.n_experts = cfg.n_experts;
    plan.quantized_here = !cfg.quantization.present && bits != 16;

    // Dense: every tensor but routed experts (and vision towers), in name order, quantized or copied.
    struct DenseSource {
        const TensorInfo* t;
        bool quantize;
        int bits;
    };
    std::vector<DenseSource> dense_sources;
    // DeepSeek-style MTP layers after the decoder's (GLM's model.layers.46): the first is kept as the
    // drafting head (n_layers above counts it) but for its copies of the embedding table and lm_head,
    // which it shares with the model; a head without eh_proj, and any further layers, are left out.
    auto is_nextn_layer = [&](const std::string& name) {
        const std::string layers = prefix + "layers.";
        return (cfg.nextn_layers > 0 && name.starts_with(layers) &&
                std::strtoll(name.c_str() + layers.size(), nullptr, 10) >= n_layers) ||
               names.is_nextn_copy_of_shared(name);
    };
    const bool fp8 = cfg.fp8_block_rows > 0;
    for (const std::string& name : ckpt.names()) {
        if (model::TensorNames::is_routed_expert(name) || model::TensorNames::is_auxiliary(name) ||
            is_nextn_layer(name) || (fp8 && name.ends_with(".weight_scale_inv")))
            continue;
        const TensorInfo* t = ckpt.find(name);
        const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
        const int b = model::TensorNames::module_bits(cfg, module, bits);
        const bool quantize = plan.quantized_here && b != 16 &&
                              (format::is_float_dtype(t->dtype) || t->dtype == DType::kF8E4M3) &&
                              !module.empty() && t->shape.size() == 2 && t->shape[1] % group_size == 0;
        if (t->dtype == DType::kF8E4M3) SLUICE_RETURN_IF_ERROR(check_fp8(cfg, ckpt, t, quantize, bits));
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
            planner.add_quantize(
                d.t, 0, d.t->shape[0], d.t->shape[1], d.bits, group_size, 0, dense_data + w.offset,
                dense_data + layout.dense[section + 1].offset, dense_data + layout.dense[section + 2].offset,
                d.t->dtype == DType::kF8E4M3 ? ckpt.find(d.t->name + "_scale_inv") : nullptr);
            section += 3;
        } else {
            planner.add_copy(d.t, 0, d.t->size_bytes, 0, dense_data + layout.dense[section].offset);
            section += 1;
        }
    }

    // Experts: one file per MoE layer, record e = expert e's gate, up, down.
    for (int64_t l = 0; l < n_layers; ++l) {
        if (!cfg.is_moe_layer(l)) continue;
        if (cfg.family == model::Family::kGptOss) {
            SLUICE_RETURN_IF_ERROR(plan_gpt_oss_experts(cfg, ckpt, names, l, planner, plan, group_size));
            continue;
        }
        SLUICE_ASSIGN_OR_RETURN(auto experts, planner.experts(names, l));
        for (const auto& projections : experts)
            for (const SrcMatrix& m : projections)
                if (m.block_scales != nullptr)
                    SLUICE_RETURN_IF_ERROR(
                        check_fp8(cfg, ckpt, m.w, bits != 16 && m.cols % group_size == 0, bits));
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
                    planner.add_copy(m.w, m.offset, p.weight.size, out_index, base + p.weight.offset);
                    planner.add_copy(m.scales, m.sb_offset, p.scales.size, out_index, base + p.scales.offset);
                    planner.add_copy(m.biases, m.sb_offset, p.biases.size, out_index, base + p.biases.offset);
                } else if (p.bits == 0) {
                    planner.add_copy(m.w, m.offset, p.weight.size, out_index, base + p.weight.offset);
                } else {
                    planner.add_quantize(m.w, m.offset, m.rows, m.cols, p.bits, p.group_size, out_index,
                                         base + p.weight.offset, base + p.scales.offset,
                                         base + p.biases.offset, m.block_scales);
                }
            }
        }
        layout.expert_files.push_back(std::move(file));
    }
    SLUICE_RETURN_IF_ERROR(order_plan_pieces(&plan));
    return plan;
}

Status order_plan_pieces(PackPlan* plan) {
    for (auto& s : plan->shards) {
        std::sort(s.pieces.begin(), s.pieces.end(),
                  [](const PlanPiece& a, const PlanPiece& b) { return a.src_begin < b.src_begin; });
        for (size_t i = 1; i < s.pieces.size(); ++i)
            if (s.pieces[i].src_begin < s.pieces[i - 1].src_end())
                return error(ErrorCode::kInternal, "[pack] overlapping source pieces in " + s.file);
    }
    return Status::ok();
}

}  // namespace sluice::convert
