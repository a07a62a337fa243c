#include "format/pack.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/hub_api.h"
#include "format/json_text.h"
#include "io/mapped_file.h"

namespace sluice::format {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool parse_json_hex64(const json& j, uint64_t* out) {
    return j.is_string() && format::parse_hex64(j.get_ref<const std::string&>(), out);
}

json section_json(const PackSection& s) {
    json j = {{"name", s.name},
              {"dtype", dtype_name(s.dtype)},
              {"shape", s.shape},
              {"offset", s.offset},
              {"size", s.size}};
    if (s.bits) {
        j["bits"] = s.bits;
        j["group_size"] = s.group_size;
    }
    if (s.ggml_type) j["ggml_type"] = ggml_type_name(*s.ggml_type);
    if (s.xxh3) j["xxh3"] = hex64(s.xxh3);
    return j;
}

json projection_json(const PackProjection& p) {
    json j = {{"rows", p.rows},
              {"cols", p.cols},
              {"bits", p.bits},
              {"group_size", p.group_size},
              {"weight", section_json(p.weight)}};
    if (p.ggml_type) j["ggml_type"] = ggml_type_name(*p.ggml_type);
    if (p.bits) {
        j["scales"] = section_json(p.scales);
        j["biases"] = section_json(p.biases);
    }
    return j;
}

// Bounds on what a layout.json may claim, so a corrupt number never becomes a huge allocation or
// an overflowing product: dims below 2^32, at most 8 of them, 2^20 experts, 2^16 layers.
constexpr int64_t kMaxDim = (int64_t{1} << 32) - 1;
constexpr int64_t kMaxExperts = int64_t{1} << 20;
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int kMaxBits = 16;
constexpr int kMaxGroup = 1 << 16;

bool safe_relative_name(const std::string& f) {
    return !f.empty() && f.find("..") == std::string::npos && f[0] != '/';
}

// numel × element size, or false on overflow / a negative dim.
bool section_bytes(const PackSection& s, uint64_t* out) {
    uint64_t n = dtype_size(s.dtype);
    for (int64_t d : s.shape) {
        if (d < 0 || (d > 0 && n > UINT64_MAX / static_cast<uint64_t>(d))) return false;
        n *= static_cast<uint64_t>(d);
    }
    *out = n;
    return true;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

Status version_error(const std::string& source, int version) {
    return error(
        ErrorCode::kUnsupported,
        "[pack] " + source + ": format version " + std::to_string(version) + ", this sluice reads version " +
            std::to_string(kPackFormatVersion) +
            (version < kPackFormatVersion
                 ? " (an older pack, whose description files may carry no checksums): re-pack the model "
                   "with `sluice pack` (or re-pull it with `sluice pull`)"
                 : " (a newer pack): upgrade sluice, or re-pack the model with this one"));
}

std::string ggml_block_text(const GgmlTypeInfo& t) {
    return std::string(t.name) + " blocks (" + std::to_string(t.block_elems) + " values in " +
           std::to_string(t.block_bytes) + " bytes)";
}

class LayoutParser {
 public:
    explicit LayoutParser(const std::string& source) : f_("[pack]", source, ErrorCode::kCorrupt) {}
    Status status() const { return f_.status(); }
    void fail(const std::string& where, const std::string& what) { f_.fail(where, what); }
    JsonFields& fields() { return f_; }
    // ggml blocks in the dense file are a GGUF's bytes, bound by the GGUF binder: only a "gguf" pack holds
    // them there. Expert records may hold them in any pack (gpt-oss's MXFP4 experts, repacked from the Hub's
    // blocks): the expert store binds a projection by its ggml type whatever the source.
    void set_source_layout(const std::string& layout) { source_layout_ = layout; }

    // An optional "ggml_type" of `j`: a known ggml block type of a gguf pack.
    std::optional<GgmlType> ggml_type(const json& j, const std::string& where) {
        auto it = j.find("ggml_type");
        if (it == j.end()) return std::nullopt;
        if (!it->is_string()) {
            fail(where + ".ggml_type", "expected a string, got " + it->dump());
            return std::nullopt;
        }
        const std::string& name = it->get_ref<const std::string&>();
        const GgmlTypeInfo* info = ggml_type_by_name(name);
        if (info == nullptr) {
            fail(where + ".ggml_type", "unknown ggml type '" + name + "'");
            return std::nullopt;
        }
        if (ggml_element_dtype(info->type)) {
            fail(where + ".ggml_type", "'" + name + "' is an element type: its values are stored as dtype " +
                                           dtype_name(*ggml_element_dtype(info->type)) + ", not as blocks");
            return std::nullopt;
        }
        if (source_layout_ != "gguf" && !in_expert_) {
            fail(where + ".ggml_type", "ggml " + name + " blocks in a pack whose source_layout is '" +
                                           source_layout_ + "' (only a pack of a GGUF, 'gguf', holds them)");
            return std::nullopt;
        }
        return info->type;
    }

    PackSection section(const json& j, const std::string& where) {
        PackSection s;
        if (!j.is_object()) {
            fail(where, "expected an object, got " + json_type_of(j));
            return s;
        }
        s.name = f_.string(j, "name", where, true);
        const std::string dtype = f_.string(j, "dtype", where, true);
        if (f_.ok() && !parse_dtype(dtype, &s.dtype)) fail(where + ".dtype", "unknown dtype '" + dtype + "'");
        auto shape = j.find("shape");
        if (shape == j.end() || !shape->is_array() || shape->size() > 8) {
            fail(where + ".shape", "expected an array of at most 8 dims");
        } else {
            for (size_t i = 0; i < shape->size(); ++i)
                s.shape.push_back(
                    f_.integer_value((*shape)[i], where + ".shape[" + std::to_string(i) + "]", 0, kMaxDim));
        }
        s.offset = f_.unsigned_integer(j, "offset", where, true);
        s.size = f_.unsigned_integer(j, "size", where, true);
        s.bits = static_cast<int>(f_.integer(j, "bits", where, 0, kMaxBits, false));
        s.group_size = static_cast<int>(f_.integer(j, "group_size", where, 0, kMaxGroup, false));
        if (auto x = j.find("xxh3"); x != j.end() && !parse_json_hex64(*x, &s.xxh3))
            fail(where + ".xxh3", "expected 16 hex digits, got " + x->dump());
        s.ggml_type = ggml_type(j, where);
        if (f_.ok() && s.ggml_type) {
            // The blocks' bytes: U8 rows, each a whole number of blocks.
            const GgmlTypeInfo& t = *ggml_type_info(static_cast<uint32_t>(*s.ggml_type));
            if (s.dtype != DType::kU8)
                fail(where + ".dtype", "'" + s.name + "' holds " + t.name + " blocks, stored as U8, not " +
                                           dtype_name(s.dtype));
            else if (s.bits != 0)
                fail(where + ".bits", "'" + s.name + "' holds " + t.name + " blocks and bits " +
                                          std::to_string(s.bits) + " (MLX affine codes)");
            else if (s.shape.empty() || s.shape.back() % t.block_bytes != 0)
                fail(where + ".shape", "'" + s.name + "' is " + shape_str(s.shape) + " bytes, but rows of " +
                                           ggml_block_text(t) + " are a whole number of " +
                                           std::to_string(t.block_bytes) + "-byte blocks");
        }
        uint64_t bytes = 0;
        if (f_.ok() && (!section_bytes(s, &bytes) || bytes != s.size))
            fail(where, "'" + s.name + "' is " + dtype_name(s.dtype) + " " + shape_str(s.shape) + " = " +
                            std::to_string(bytes) + " bytes, but its size says " + std::to_string(s.size));
        if (f_.ok() && s.offset > UINT64_MAX - s.size) fail(where, "offset + size overflows");
        return s;
    }

    // One projection of an expert record: its sections must be exactly what rows × cols at its
    // bits and group size take (`U32 [rows, cols·bits/32]`, scales and biases `[rows, cols/group]`,
    // or a float `[rows, cols]`).
    PackProjection projection(const json& j, const std::string& where) {
        struct InExpert {
            bool& flag;
            explicit InExpert(bool& f) : flag(f) { flag = true; }
            ~InExpert() { flag = false; }
        } in_expert(in_expert_);
        PackProjection p;
        if (!j.is_object()) {
            fail(where, "expected an object, got " + json_type_of(j));
            return p;
        }
        p.rows = f_.integer(j, "rows", where, 1, kMaxDim, true);
        p.cols = f_.integer(j, "cols", where, 1, kMaxDim, true);
        p.bits = static_cast<int>(f_.integer(j, "bits", where, 0, kMaxBits, true));
        p.group_size = static_cast<int>(f_.integer(j, "group_size", where, 0, kMaxGroup, true));
        p.ggml_type = ggml_type(j, where);
        p.weight = section(j.value("weight", json()), where + ".weight");
        if (f_.ok() && (p.ggml_type || p.weight.ggml_type)) return ggml_projection(p, where);
        if (p.bits) {
            p.scales = section(j.value("scales", json()), where + ".scales");
            p.biases = section(j.value("biases", json()), where + ".biases");
        }
        if (!f_.ok()) return p;
        auto expect_shape = [&](const PackSection& s, const char* which, std::vector<int64_t> want) {
            if (s.shape != want)
                fail(where + "." + which,
                     "shape " + shape_str(s.shape) + ", but a " +
                         (p.bits ? std::to_string(p.bits) + "-bit group " + std::to_string(p.group_size)
                                 : std::string("float")) +
                         " projection of [" + std::to_string(p.rows) + ", " + std::to_string(p.cols) +
                         "] needs " + shape_str(want));
        };
        if (p.bits == 0) {
            if (p.group_size != 0)
                fail(where, "a float projection with group_size " + std::to_string(p.group_size));
            expect_shape(p.weight, "weight", {p.rows, p.cols});
            return p;
        }
        if (p.group_size <= 0 || p.cols % p.group_size != 0)
            fail(where, "group_size " + std::to_string(p.group_size) + " does not divide cols " +
                            std::to_string(p.cols));
        else if (p.cols * p.bits % 32 != 0)
            fail(where, std::to_string(p.bits) + "-bit codes of " + std::to_string(p.cols) +
                            " columns do not fill whole 32-bit words");
        else if (p.weight.dtype != DType::kU32)
            fail(where + ".weight",
                 std::string("quantized codes must be U32, got ") + dtype_name(p.weight.dtype));
        else if (p.weight.bits != p.bits || p.weight.group_size != p.group_size)
            fail(where + ".weight", "bits " + std::to_string(p.weight.bits) + " group " +
                                        std::to_string(p.weight.group_size) + ", but the projection says " +
                                        std::to_string(p.bits) + " group " + std::to_string(p.group_size));
        if (!f_.ok()) return p;
        expect_shape(p.weight, "weight", {p.rows, p.cols * p.bits / 32});
        expect_shape(p.scales, "scales", {p.rows, p.cols / p.group_size});
        expect_shape(p.biases, "biases", {p.rows, p.cols / p.group_size});
        return p;
    }

 private:
    // A projection of ggml blocks: no bits or group, the weight's type the projection's, and the weight
    // exactly rows × (cols / block_elems) blocks.
    PackProjection ggml_projection(PackProjection& p, const std::string& where) {
        if (p.ggml_type != p.weight.ggml_type) {
            auto name = [](const std::optional<GgmlType>& t) {
                return t ? std::string(ggml_type_name(*t)) : std::string("none");
            };
            fail(where + ".weight",
                 "ggml_type " + name(p.weight.ggml_type) + ", but the projection says " + name(p.ggml_type));
            return p;
        }
        const GgmlTypeInfo& t = *ggml_type_info(static_cast<uint32_t>(*p.ggml_type));
        if (p.bits != 0 || p.group_size != 0)
            fail(where, "a projection of " + std::string(t.name) + " blocks with bits " +
                            std::to_string(p.bits) + " group_size " + std::to_string(p.group_size) +
                            " (the blocks carry their scales)");
        else if (p.cols % t.block_elems != 0)
            fail(where, "cols " + std::to_string(p.cols) + " is not a whole number of " + ggml_block_text(t));
        if (!f_.ok()) return p;
        const std::vector<int64_t> want = {p.rows, p.cols / t.block_elems * t.block_bytes};
        if (p.weight.shape != want)
            fail(where + ".weight", "shape " + shape_str(p.weight.shape) + ", but a projection of [" +
                                        std::to_string(p.rows) + ", " + std::to_string(p.cols) + "] in " +
                                        ggml_block_text(t) + " needs U8 " + shape_str(want));
        return p;
    }

    JsonFields f_;
    std::string source_layout_;
    bool in_expert_ = false;  // parsing an expert record's projection
};

}  // namespace

int64_t PackSection::ggml_cols() const {
    const GgmlTypeInfo* t = ggml_type ? ggml_type_info(static_cast<uint32_t>(*ggml_type)) : nullptr;
    if (t == nullptr || shape.empty()) return 0;
    return shape.back() / t->block_bytes * t->block_elems;
}

std::optional<DType> ggml_element_dtype(GgmlType type) {
    switch (type) {
        case GgmlType::kF32: return DType::kF32;
        case GgmlType::kF16: return DType::kF16;
        case GgmlType::kBF16: return DType::kBF16;
        case GgmlType::kF64: return DType::kF64;
        case GgmlType::kI8: return DType::kI8;
        case GgmlType::kI16: return DType::kI16;
        case GgmlType::kI32: return DType::kI32;
        case GgmlType::kI64: return DType::kI64;
        default: return std::nullopt;
    }
}

const PackExpertFile* PackLayout::for_layer(int64_t layer) const {
    for (const auto& f : expert_files)
        if (f.layer == layer) return &f;
    return nullptr;
}

uint64_t PackLayout::expert_record_bytes_total() const {
    uint64_t total = 0;
    for (const auto& f : expert_files) total += f.record_stride * static_cast<uint64_t>(n_experts);
    return total;
}

std::string serialize_pack_layout(const PackLayout& layout) {
    json j;
    j["format"] = kPackFormatMagic;
    j["version"] = layout.version;
    j["source_layout"] = layout.source_layout;
    j["dense_file"] = layout.dense_file;
    j["n_experts"] = layout.n_experts;
    j["dense"] = json::array();
    for (const auto& s : layout.dense) j["dense"].push_back(section_json(s));
    j["expert_files"] = json::array();
    for (const auto& f : layout.expert_files) {
        json checks = json::array();
        for (uint64_t c : f.record_xxh3) checks.push_back(hex64(c));
        j["expert_files"].push_back({{"layer", f.layer},
                                     {"file", f.file},
                                     {"record_stride", f.record_stride},
                                     {"record_bytes", f.record_bytes},
                                     {"gate", projection_json(f.gate)},
                                     {"up", projection_json(f.up)},
                                     {"down", projection_json(f.down)},
                                     {"record_xxh3", checks}});
    }
    return j.dump(1);
}

Expected<PackLayout> parse_pack_layout(const std::string& json_text, const std::string& source) {
    SLUICE_ASSIGN_OR_RETURN(const json j, parse_json_text(json_text, source, "[pack]", ErrorCode::kCorrupt));
    if (!j.is_object())
        return error(ErrorCode::kCorrupt,
                     "[pack] " + source + ": expected a JSON object, got " + json_type_of(j));
    LayoutParser p(source);
    JsonFields& f = p.fields();
    if (f.string(j, "format", "", true) != kPackFormatMagic) {
        SLUICE_RETURN_IF_ERROR(f.status());
        return error(ErrorCode::kCorrupt, "[pack] " + source + ": format is not '" + kPackFormatMagic + "'");
    }
    PackLayout layout;
    layout.version = static_cast<int>(f.integer(j, "version", "", 0, 1 << 20, true));
    SLUICE_RETURN_IF_ERROR(f.status());
    if (layout.version != kPackFormatVersion) return version_error(source, layout.version);
    try {
        layout.source_layout = f.string(j, "source_layout", "", true);
        if (f.ok() && layout.source_layout != "huggingface" && layout.source_layout != "mlx" &&
            layout.source_layout != "gguf")
            p.fail("source_layout",
                   "expected \"huggingface\", \"mlx\" or \"gguf\", got \"" + layout.source_layout + "\"");
        p.set_source_layout(layout.source_layout);
        layout.dense_file = f.string(j, "dense_file", "", false, "dense.safetensors");
        if (!safe_relative_name(layout.dense_file))
            p.fail("dense_file", "bad file name '" + layout.dense_file + "'");
        layout.n_experts = f.integer(j, "n_experts", "", 0, kMaxExperts, true);
        auto dense = j.find("dense");
        if (dense == j.end() || !dense->is_array())
            p.fail("dense", "missing or not an array");
        else
            for (size_t i = 0; i < dense->size() && f.ok(); ++i)
                layout.dense.push_back(p.section((*dense)[i], "dense[" + std::to_string(i) + "]"));
        auto files = j.find("expert_files");
        if (files == j.end() || !files->is_array()) {
            p.fail("expert_files", "missing or not an array");
        } else {
            for (size_t i = 0; i < files->size() && f.ok(); ++i) {
                const json& e = (*files)[i];
                PackExpertFile ef;
                const std::string where = "expert_files[" + std::to_string(i) + "]";
                ef.layer = f.integer(e, "layer", where, 0, kMaxLayers, true);
                ef.file = f.string(e, "file", where, true);
                if (f.ok() && !safe_relative_name(ef.file))
                    p.fail(where + ".file", "bad file name '" + ef.file + "'");
                ef.record_stride = f.unsigned_integer(e, "record_stride", where, true);
                ef.record_bytes = f.unsigned_integer(e, "record_bytes", where, true);
                if (f.ok() && (ef.record_stride == 0 || ef.record_stride % kPackRecordAlign != 0 ||
                               ef.record_bytes > ef.record_stride || ef.record_stride > (uint64_t{1} << 40)))
                    p.fail(where, "record_stride " + std::to_string(ef.record_stride) +
                                      " must be a positive multiple of 4096 holding record_bytes " +
                                      std::to_string(ef.record_bytes));
                if (!f.ok()) break;
                ef.gate = p.projection(e.value("gate", json()), where + ".gate");
                ef.up = p.projection(e.value("up", json()), where + ".up");
                ef.down = p.projection(e.value("down", json()), where + ".down");
                auto checks = e.find("record_xxh3");
                if (checks == e.end() || !checks->is_array()) {
                    p.fail(where + ".record_xxh3", "missing or not an array");
                } else if (static_cast<int64_t>(checks->size()) != layout.n_experts) {
                    p.fail(where + ".record_xxh3", std::to_string(checks->size()) + " record checksums for " +
                                                       std::to_string(layout.n_experts) + " experts");
                } else {
                    ef.record_xxh3.reserve(checks->size());
                    for (size_t c = 0; c < checks->size() && f.ok(); ++c) {
                        uint64_t v = 0;
                        if (!parse_json_hex64((*checks)[c], &v))
                            p.fail(where + ".record_xxh3[" + std::to_string(c) + "]",
                                   "expected 16 hex digits, got " + (*checks)[c].dump());
                        ef.record_xxh3.push_back(v);
                    }
                }
                // Sections inside the record, aligned and disjoint: no view reaches past the
                // record or into another section.
                struct Span {
                    uint64_t begin, end;
                    std::string name;
                };
                std::vector<Span> spans;
                for (const auto& [pname, pr] :
                     {std::pair<const char*, const PackProjection*>{"gate", &ef.gate},
                      {"up", &ef.up},
                      {"down", &ef.down}}) {
                    for (const auto& [sname, sec] :
                         {std::pair<const char*, const PackSection*>{"weight", &pr->weight},
                          {"scales", &pr->scales},
                          {"biases", &pr->biases}}) {
                        if (sec->size == 0 && pr->bits == 0 && sec != &pr->weight) continue;
                        const std::string at = where + "." + pname + "." + sname;
                        if (sec->offset % kPackSectionAlign != 0)
                            p.fail(at, "offset " + std::to_string(sec->offset) + " is not 64-byte aligned");
                        if (sec->offset > ef.record_bytes || sec->size > ef.record_bytes - sec->offset)
                            p.fail(at,
                                   "runs past the record (" + std::to_string(ef.record_bytes) + " bytes)");
                        spans.push_back({sec->offset, sec->offset + sec->size, at});
                    }
                }
                std::sort(spans.begin(), spans.end(),
                          [](const Span& a, const Span& b) { return a.begin < b.begin; });
                for (size_t s = 1; s < spans.size(); ++s)
                    if (spans[s].begin < spans[s - 1].end)
                        p.fail(spans[s].name, "overlaps " + spans[s - 1].name);
                for (const PackExpertFile& other : layout.expert_files) {
                    if (other.layer == ef.layer)
                        p.fail(where + ".layer", "layer " + std::to_string(ef.layer) + " is listed twice");
                    if (other.file == ef.file) p.fail(where + ".file", "'" + ef.file + "' is listed twice");
                }
                layout.expert_files.push_back(std::move(ef));
            }
        }
    } catch (const json::exception& e) {  // a backstop: every field above is read type-checked
        p.fail("", std::string("unexpected structure: ") + e.what());
    }
    SLUICE_RETURN_IF_ERROR(p.status());
    return layout;
}

std::string serialize_pack_manifest(const PackManifest& m) {
    json files = json::object();
    for (const auto& [name, size] : m.files) files[name] = size;
    json sums = json::object();
    for (const auto& [name, h] : m.xxh3) sums[name] = hex64(h);
    json j{{"format", m.format}, {"version", m.version}, {"files", files}};
    if (!m.xxh3.empty()) j["xxh3"] = sums;
    return j.dump(1);
}

bool manifest_checksums(const std::string& relative_path, const std::string& dense_file) {
    const bool data = relative_path == dense_file || relative_path.rfind("experts/", 0) == 0 ||
                      (relative_path.size() > 12 && relative_path.ends_with(".safetensors"));
    return !data;
}

bool is_packed_dir(const std::string& dir) {
    std::error_code ec;
    return fs::exists(fs::path(dir) / "manifest.json", ec) || fs::exists(fs::path(dir) / "layout.json", ec);
}

Expected<PackManifest> parse_pack_manifest(const std::string& json_text, const std::string& source) {
    auto corrupt = [&](const std::string& what) { return error(ErrorCode::kCorrupt, "[pack] " + what); };
    SLUICE_ASSIGN_OR_RETURN(const json m, parse_json_text(json_text, source, "[pack]", ErrorCode::kCorrupt));
    if (!m.is_object()) return corrupt(source + ": expected a JSON object, got " + json_type_of(m));
    JsonFields f("[pack]", source, ErrorCode::kCorrupt);
    PackManifest manifest;
    manifest.format = f.string(m, "format", "", true);
    SLUICE_RETURN_IF_ERROR(f.status());
    if (manifest.format != kPackFormatMagic)
        return corrupt(source + ": format is not '" + kPackFormatMagic + "'");
    manifest.version = static_cast<int>(f.integer(m, "version", "", 0, 1 << 20, true));
    SLUICE_RETURN_IF_ERROR(f.status());
    if (manifest.version != kPackFormatVersion) return version_error(source, manifest.version);
    auto files = m.find("files");
    if (files == m.end() || !files->is_object())
        return corrupt(source + ": 'files' missing or not an object");
    auto sums = m.find("xxh3");
    if (sums == m.end() || !sums->is_object()) return corrupt(source + ": 'xxh3' missing or not an object");
    for (auto it = files->begin(); it != files->end(); ++it) {
        if (!safe_relative_name(it.key()))
            return corrupt(source + ": files: bad file name '" + it.key() + "'");
        const uint64_t size = f.unsigned_integer(*files, it.key().c_str(), "files", true);
        SLUICE_RETURN_IF_ERROR(f.status());
        if (manifest_checksums(it.key(), "dense.safetensors") && !sums->contains(it.key()))
            return corrupt(source + ": xxh3: no checksum for '" + it.key() + "'");
        manifest.files.emplace_back(it.key(), size);
    }
    for (const char* required : {"layout.json", "config.json"})
        if (!files->contains(required)) return corrupt(source + ": files: '" + required + "' is not listed");
    for (auto it = sums->begin(); it != sums->end(); ++it) {
        uint64_t want = 0;
        if (!parse_json_hex64(it.value(), &want))
            return corrupt(source + ": xxh3." + it.key() + ": expected 16 hex digits, got " +
                           it.value().dump());
        if (!files->contains(it.key()))
            return corrupt(source + ": xxh3: '" + it.key() + "' is not in 'files'");
        manifest.xxh3.emplace_back(it.key(), want);
    }
    return manifest;
}

Expected<PackLayout> open_packed_dir(const std::string& dir) {
    const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
    std::error_code ec;
    if (!fs::exists(manifest_path, ec)) {
        // No pack was ever started here (no layout, no experts/, no progress record): say what it is.
        const fs::path d(dir);
        const bool pack_traces = fs::exists(d / "layout.json", ec) || fs::exists(d / "experts", ec) ||
                                 fs::exists(d / ".pack-progress.json", ec) ||
                                 fs::exists(d / ".pull-progress.json", ec);
        if (!pack_traces && fs::exists(d / "config.json", ec))
            return error(ErrorCode::kInvalidArgument,
                         "[pack] " + dir +
                             " is a checkpoint (config.json and weights), not a packed model: `sluice pack " +
                             dir + " OUT` converts it; commands that run a model take either");
        if (!pack_traces)
            return error(ErrorCode::kInvalidArgument,
                         "[pack] " + dir +
                             " holds no model: neither a packed model (manifest.json) nor a checkpoint "
                             "(config.json)");
        return error(ErrorCode::kCorrupt, "[pack] " + dir +
                                              " has no manifest.json: the pack is incomplete "
                                              "(interrupted?) — re-run `sluice pack` to resume it");
    }
    auto corrupt = [&](const std::string& what) { return error(ErrorCode::kCorrupt, "[pack] " + what); };
    SLUICE_ASSIGN_OR_RETURN(std::string mtext, io::read_text_file(manifest_path));
    SLUICE_ASSIGN_OR_RETURN(const PackManifest m, parse_pack_manifest(mtext, manifest_path));
    auto listed = [&](const std::string& name) {
        return std::any_of(m.files.begin(), m.files.end(), [&](const auto& e) { return e.first == name; });
    };
    for (const auto& [name, want] : m.files) {
        const fs::path p = fs::path(dir) / name;
        if (!fs::exists(p, ec))
            return corrupt(dir + ": file '" + name + "' listed in the manifest is missing");
        const uint64_t size = fs::file_size(p, ec);
        if (size != want) {
            return corrupt(dir + ": file '" + name + "' is " + std::to_string(size) +
                           " bytes, the manifest says " + std::to_string(want) + " (truncated or modified)");
        }
    }
    // A description file the loader would read but the pack never listed (a tokenizer dropped in
    // later) would be believed unchecked.
    for (const std::string& name : model_side_file_names())
        if (!listed(name) && fs::exists(fs::path(dir) / name, ec))
            return corrupt(
                dir + ": '" + name +
                "' is not listed in manifest.json (added after packing?): remove it, or re-pack the "
                "model with it in the source folder");
    // The description files against their checksums: a layout.json or config.json changed after
    // packing (one byte: "bits": 4 → 2) would otherwise be believed.
    for (const auto& [name, want] : m.xxh3) {
        SLUICE_ASSIGN_OR_RETURN(std::string contents, io::read_text_file((fs::path(dir) / name).string()));
        if (XXH3_64bits(contents.data(), contents.size()) != want)
            return corrupt(dir + ": '" + name +
                           "' does not match its checksum in manifest.json "
                           "(changed after packing; re-pack or re-pull the model)");
    }
    const std::string layout_path = (fs::path(dir) / "layout.json").string();
    SLUICE_ASSIGN_OR_RETURN(std::string ltext, io::read_text_file(layout_path));
    SLUICE_ASSIGN_OR_RETURN(PackLayout layout, parse_pack_layout(ltext, layout_path));
    if (!listed(layout.dense_file))
        return corrupt(layout_path + ": dense_file '" + layout.dense_file +
                       "' is not listed in manifest.json");
    for (const PackExpertFile& e : layout.expert_files)
        if (!listed(e.file))
            return corrupt(layout_path + ": expert file '" + e.file + "' is not listed in manifest.json");
    return layout;
}

}  // namespace sluice::format
