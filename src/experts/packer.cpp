#include "experts/packer.h"

#include <xxhash.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/log.h"
#include "experts/pack_writer.h"
#include "format/pack.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "model/config.h"
#include "model/weights.h"

namespace sluice::experts {

namespace fs = std::filesystem;
using format::DType;
using nlohmann::json;

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

// mlx-lm keeps routers and the shared-expert gate at 8 bits (models.md §5.4).
int module_bits(const std::string& module, int bits) {
    return ends_with(module, "mlp.gate") || ends_with(module, "mlp.shared_expert_gate") ? 8 : bits;
}

format::DType float_dtype(kernels::WeightType t) {
    return t == kernels::WeightType::kF32   ? DType::kF32
           : t == kernels::WeightType::kF16 ? DType::kF16
                                            : DType::kBF16;
}

format::DType scale_dtype(kernels::ScaleType t) {
    return t == kernels::ScaleType::kF32   ? DType::kF32
           : t == kernels::ScaleType::kF16 ? DType::kF16
                                           : DType::kBF16;
}

// Quantizes rows of a float weight view into MLX affine words/scales/biases.
void quantize_view(const kernels::WeightView& src, int bits, int group_size, uint8_t* words, uint8_t* scales,
                   uint8_t* biases) {
    std::vector<float> row(static_cast<size_t>(src.cols));
    const int64_t wpr = src.cols * bits / 32, groups = src.cols / group_size;
    for (int64_t r = 0; r < src.rows; ++r) {
        kernels::reference::dequantize_row(src, r, row.data());
        kernels::quantize_row_affine(row.data(), src.cols, bits, group_size,
                                     reinterpret_cast<uint32_t*>(words) + r * wpr,
                                     reinterpret_cast<uint16_t*>(scales) + r * groups,
                                     reinterpret_cast<uint16_t*>(biases) + r * groups);
    }
}

Status fill_projection(const kernels::WeightView& src, const format::PackProjection& p, uint8_t* record) {
    if (p.bits == 0 || src.quantized()) {
        std::memcpy(record + p.weight.offset, src.data, p.weight.size);
        if (p.bits != 0) {
            std::memcpy(record + p.scales.offset, src.scales, p.scales.size);
            std::memcpy(record + p.biases.offset, src.biases, p.biases.size);
        }
        return Status::ok();
    }
    quantize_view(src, p.bits, p.group_size, record + p.weight.offset, record + p.scales.offset,
                  record + p.biases.offset);
    return Status::ok();
}

format::PackProjection projection_for(const kernels::WeightView& src, int bits, int group_size) {
    if (src.quantized())  // MLX source: verbatim, with its own bits, group and scale dtype
        return make_projection(src.rows, src.cols, src.bits(), src.group_size, DType::kU32,
                               scale_dtype(src.scale_type));
    if (bits == 16 || src.cols % group_size != 0)
        return make_projection(src.rows, src.cols, 0, 0, float_dtype(src.type));
    return make_projection(src.rows, src.cols, bits, group_size, float_dtype(src.type));
}

// The progress record of an interrupted pack: options + finished parts.
struct Progress {
    std::string source;
    int bits = 0, group_size = 0;
    bool dense_done = false;
    format::PackLayout layout;
};

std::string progress_path(const std::string& out) {
    return (fs::path(out) / ".pack-progress.json").string();
}

Status save_progress(const std::string& out, const Progress& p) {
    json j = {{"source", p.source},
              {"bits", p.bits},
              {"group_size", p.group_size},
              {"dense_done", p.dense_done},
              {"layout", json::parse(format::serialize_pack_layout(p.layout))}};
    return io::write_file_atomic(progress_path(out), j.dump());
}

bool load_progress(const std::string& out, Progress* p) {
    auto text = io::read_text_file(progress_path(out));
    if (!text.has_value()) return false;
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("layout")) return false;
    auto layout = format::parse_pack_layout(j["layout"].dump(), progress_path(out));
    if (!layout.has_value()) return false;
    p->source = j.value("source", "");
    p->bits = j.value("bits", 0);
    p->group_size = j.value("group_size", 0);
    p->dense_done = j.value("dense_done", false);
    p->layout = std::move(*layout);
    return true;
}

Status check_options(int bits, int group_size) {
    if (bits != 4 && bits != 8 && bits != 16)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] --bits must be 4, 8 or 16 (keep float), got " + std::to_string(bits));
    if (group_size != 32 && group_size != 64 && group_size != 128)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] --group-size must be 32, 64 or 128, got " + std::to_string(group_size));
    return Status::ok();
}

// The config.json of the pack: the source's, with a `quantization` block describing what was
// quantized here (MLX sources keep theirs).
Status write_packed_config(const std::string& src_config, const std::string& out_dir, bool quantized_here,
                           int bits, int group_size, const std::map<std::string, int>& module_bits_used) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(src_config));
    json cfg = json::parse(text, nullptr, false);
    if (cfg.is_discarded())
        return error(ErrorCode::kInvalidArgument, "[pack] " + src_config + ": not valid JSON");
    if (quantized_here) {
        json q = {{"group_size", group_size}, {"bits", bits}, {"mode", "affine"}};
        for (const auto& [module, b] : module_bits_used)
            if (b != bits) q[module] = {{"group_size", group_size}, {"bits", b}};
        cfg["quantization"] = q;
        cfg["quantization_config"] = q;
    }
    return io::write_file_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2));
}

Status prepare_out_dir(const std::string& out, const std::string& source, int bits, int group_size,
                       Progress* progress, bool* resumed, bool* complete) {
    std::error_code ec;
    *resumed = false;
    *complete = false;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec))
        return error(ErrorCode::kInvalidArgument, "[pack] output '" + out + "' exists and is not a folder");
    fs::create_directories(fs::path(out) / "experts", ec);
    if (ec) return error(ErrorCode::kIo, "[pack] cannot create '" + out + "': " + ec.message());
    Progress old;
    const bool has_progress = load_progress(out, &old);
    if (fs::exists(fs::path(out) / "manifest.json", ec)) {
        if (has_progress && old.source == source && old.bits == bits && old.group_size == group_size) {
            *complete = true;
            return Status::ok();
        }
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + out +
                         "' already holds a complete pack of another source or "
                         "with other options; choose another folder or delete it");
    }
    if (has_progress && old.source == source && old.bits == bits && old.group_size == group_size) {
        *progress = std::move(old);
        *resumed = progress->dense_done || !progress->layout.expert_files.empty();
    } else {
        for (const auto& entry : fs::directory_iterator(out, ec)) {
            const std::string name = entry.path().filename().string();
            if (name != "experts" && name != ".pack-progress.json") {
                return error(ErrorCode::kInvalidArgument, "[pack] '" + out +
                                                              "' is not empty and holds no pack in progress "
                                                              "for this source and options (found '" +
                                                              name + "')");
            }
        }
        progress->source = source;
        progress->bits = bits;
        progress->group_size = group_size;
    }
    return Status::ok();
}

// Keeps a finished expert file of an earlier run when it is present with the right size.
bool reuse_layer(const std::string& out, const Progress& progress, int64_t layer, int64_t n_experts,
                 format::PackExpertFile* file) {
    const format::PackExpertFile* done = progress.layout.for_layer(layer);
    if (done == nullptr) return false;
    std::error_code ec;
    const uint64_t size = fs::file_size(fs::path(out) / done->file, ec);
    if (ec || size != done->record_stride * static_cast<uint64_t>(n_experts)) return false;
    *file = *done;
    return true;
}

std::vector<std::string> pack_file_list(const format::PackLayout& layout,
                                        const std::vector<std::string>& side_files) {
    std::vector<std::string> files = {"config.json", "layout.json", layout.dense_file};
    for (const auto& f : layout.expert_files) files.push_back(f.file);
    files.insert(files.end(), side_files.begin(), side_files.end());
    return files;
}

}  // namespace

Expected<PackResult> pack_model(const PackOptions& options) {
    PackOptions o = options;
    if (o.bits == 0) o.bits = 4;
    SLUICE_RETURN_IF_ERROR(check_options(o.bits, o.group_size));
    std::error_code ec;
    if (format::is_packed_dir(o.src_dir))
        return error(ErrorCode::kInvalidArgument, "[pack] '" + o.src_dir + "' is already a packed model");
    const std::string source = fs::weakly_canonical(o.src_dir, ec).string();
    SLUICE_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::load_model_config(o.src_dir));
    SLUICE_ASSIGN_OR_RETURN(auto ckpt, format::Checkpoint::open(o.src_dir));
    SLUICE_ASSIGN_OR_RETURN(model::ModelWeights weights, model::load_weights(cfg, ckpt));
    const bool mlx_source = cfg.quantization.present;
    if (mlx_source && options.bits != 0 && options.bits != cfg.quantization.global.bits) {
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + o.src_dir + "' is an MLX " + std::to_string(cfg.quantization.global.bits) +
                         "-bit checkpoint; its bytes are copied verbatim, so --bits cannot change it");
    }

    if (mlx_source) o.bits = cfg.quantization.global.bits;
    PackResult result;
    Progress progress;
    SLUICE_RETURN_IF_ERROR(prepare_out_dir(o.out_dir, source, o.bits, o.group_size, &progress,
                                           &result.resumed, &result.already_complete));
    if (result.already_complete) return result;

    format::PackLayout& layout = progress.layout;
    layout.source_layout = model::layout_name(weights.layout);
    layout.n_experts = cfg.n_experts;

    // Dense: every tensor but routed experts (and mtp/vision), quantized or copied.
    std::map<std::string, int> module_bits_used;
    const bool quantize_here = !mlx_source && o.bits != 16;
    std::vector<DenseTensorSpec> specs;
    for (const std::string& name : ckpt->names()) {
        if (is_routed_expert(name) || is_skipped(name)) continue;
        const format::TensorInfo* t = ckpt->find(name);
        const bool is_float = t->dtype == DType::kBF16 || t->dtype == DType::kF16 || t->dtype == DType::kF32;
        const std::string module = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : "";
        const int bits = module_bits(module, o.bits);
        if (quantize_here && is_float && !module.empty() && t->shape.size() == 2 &&
            t->shape[1] % o.group_size == 0) {
            kernels::WeightView src;
            src.type = t->dtype == DType::kF32   ? kernels::WeightType::kF32
                       : t->dtype == DType::kF16 ? kernels::WeightType::kF16
                                                 : kernels::WeightType::kBF16;
            src.rows = t->shape[0];
            src.cols = t->shape[1];
            src.data = t->data;
            const int64_t rows = src.rows, words = src.cols * bits / 32, groups = src.cols / o.group_size;
            // The three outputs are produced together by the first fill and handed to the next two.
            auto shared = std::make_shared<std::vector<uint8_t>>();
            const uint64_t wbytes = static_cast<uint64_t>(rows * words) * 4,
                           sbytes = static_cast<uint64_t>(rows * groups) * 2;
            specs.push_back(
                {module + ".weight", DType::kU32, {rows, words}, bits, o.group_size, [=](uint8_t* dst) {
                     shared->resize(2 * sbytes);
                     quantize_view(src, bits, o.group_size, dst, shared->data(), shared->data() + sbytes);
                     return Status::ok();
                 }});
            specs.push_back({module + ".scales", DType::kBF16, {rows, groups}, 0, 0, [=](uint8_t* dst) {
                                 std::memcpy(dst, shared->data(), sbytes);
                                 return Status::ok();
                             }});
            specs.push_back({module + ".biases", DType::kBF16, {rows, groups}, 0, 0, [=](uint8_t* dst) {
                                 std::memcpy(dst, shared->data() + sbytes, sbytes);
                                 shared->clear();
                                 shared->shrink_to_fit();
                                 return Status::ok();
                             }});
            module_bits_used[module] = bits;
            (void)wbytes;
        } else {
            specs.push_back({name, t->dtype, t->shape, 0, 0, [t](uint8_t* dst) {
                                 std::memcpy(dst, t->data, t->size_bytes);
                                 return Status::ok();
                             }});
        }
    }
    const std::string dense_path = (fs::path(o.out_dir) / layout.dense_file).string();
    if (!(progress.dense_done && fs::exists(dense_path, ec))) {
        auto report = [&](uint64_t done, uint64_t total) {
            if (o.progress) o.progress("dense", done, total);
        };
        SLUICE_ASSIGN_OR_RETURN(layout.dense, write_dense_file(dense_path, specs, report));
        progress.dense_done = true;
        SLUICE_RETURN_IF_ERROR(save_progress(o.out_dir, progress));
    }
    for (const auto& s : layout.dense) result.dense_bytes += s.size;

    // Experts: one file per MoE layer, record by record.
    std::vector<format::PackExpertFile> files;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
        const model::LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
        if (!lw.moe) continue;
        const auto& experts = lw.moe_w.experts;
        format::PackExpertFile file;
        if (!reuse_layer(o.out_dir, progress, l, cfg.n_experts, &file)) {
            file = make_expert_file_layout(l, projection_for(experts[0].gate, o.bits, o.group_size),
                                           projection_for(experts[0].up, o.bits, o.group_size),
                                           projection_for(experts[0].down, o.bits, o.group_size));
            for (const auto& p : {file.gate, file.up, file.down})
                if (p.bits) module_bits_used["experts"] = p.bits;
            SLUICE_RETURN_IF_ERROR(
                write_expert_file((fs::path(o.out_dir) / file.file).string(), cfg.n_experts, file,
                                  [&](int64_t e, uint8_t* record) {
                                      const model::ExpertWeights& ex = experts[static_cast<size_t>(e)];
                                      SLUICE_RETURN_IF_ERROR(fill_projection(ex.gate, file.gate, record));
                                      SLUICE_RETURN_IF_ERROR(fill_projection(ex.up, file.up, record));
                                      return fill_projection(ex.down, file.down, record);
                                  }));
            progress.layout.expert_files.push_back(file);
            SLUICE_RETURN_IF_ERROR(save_progress(o.out_dir, progress));
        }
        files.push_back(file);
        result.expert_bytes += file.record_stride * static_cast<uint64_t>(cfg.n_experts);
        if (o.progress)
            o.progress("experts", static_cast<uint64_t>(l + 1), static_cast<uint64_t>(cfg.n_layers));
    }
    layout.expert_files = files;
    result.expert_files = static_cast<int64_t>(files.size());
    module_bits_used.erase("experts");

    // Description, config, side files, and the manifest last.
    SLUICE_RETURN_IF_ERROR(io::write_file_atomic((fs::path(o.out_dir) / "layout.json").string(),
                                                 format::serialize_pack_layout(layout)));
    SLUICE_RETURN_IF_ERROR(write_packed_config((fs::path(o.src_dir) / "config.json").string(), o.out_dir,
                                               quantize_here, o.bits, o.group_size, module_bits_used));
    SLUICE_ASSIGN_OR_RETURN(auto side, copy_model_side_files(o.src_dir, o.out_dir));
    SLUICE_RETURN_IF_ERROR(write_manifest(o.out_dir, pack_file_list(layout, side)));
    return result;
}

Expected<std::vector<std::string>> verify_packed(
    const std::string& dir, const std::function<void(const std::string&, uint64_t, uint64_t)>& progress) {
    SLUICE_ASSIGN_OR_RETURN(format::PackLayout layout, format::open_packed_dir(dir));
    std::vector<std::string> problems;
    auto dense = format::SafetensorsFile::open((fs::path(dir) / layout.dense_file).string());
    if (!dense.has_value()) {
        problems.push_back(dense.status().message());
    } else {
        for (const auto& s : layout.dense) {
            const format::TensorInfo* t = (*dense)->find(s.name);
            if (t == nullptr) {
                problems.push_back("dense tensor '" + s.name + "' is missing from " + layout.dense_file);
                continue;
            }
            if (t->size_bytes != s.size) {
                problems.push_back("dense tensor '" + s.name + "' is " + std::to_string(t->size_bytes) +
                                   " bytes, layout says " + std::to_string(s.size));
                continue;
            }
            if (XXH3_64bits(t->data, t->size_bytes) != s.xxh3)
                problems.push_back("dense tensor '" + s.name + "': checksum mismatch");
        }
    }
    uint64_t layer_index = 0;
    for (const auto& f : layout.expert_files) {
        auto mapped = io::MappedFile::open((fs::path(dir) / f.file).string());
        ++layer_index;
        if (!mapped.has_value()) {
            problems.push_back(mapped.status().message());
            continue;
        }
        const uint64_t want = f.record_stride * static_cast<uint64_t>(layout.n_experts);
        if ((*mapped)->size() != want) {
            problems.push_back(f.file + " is " + std::to_string((*mapped)->size()) + " bytes, expected " +
                               std::to_string(want));
            continue;
        }
        for (int64_t e = 0; e < layout.n_experts; ++e) {
            const uint8_t* rec = (*mapped)->data() + static_cast<uint64_t>(e) * f.record_stride;
            if (XXH3_64bits(rec, f.record_bytes) != f.record_xxh3[static_cast<size_t>(e)])
                problems.push_back(f.file + ": expert " + std::to_string(e) + " (layer " +
                                   std::to_string(f.layer) + "): checksum mismatch");
        }
        if (progress) progress("verify", layer_index, layout.expert_files.size());
    }
    return problems;
}

}  // namespace sluice::experts
