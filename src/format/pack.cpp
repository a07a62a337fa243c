#include "format/pack.h"

#include <xxhash.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace sluice::format {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

bool parse_hex64(const json& j, uint64_t* out) {
    if (!j.is_string()) return false;
    const std::string s = j.get<std::string>();
    if (s.empty() || s.size() > 16) return false;
    char* end = nullptr;
    *out = std::strtoull(s.c_str(), &end, 16);
    return *end == '\0';
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
    if (s.xxh3) j["xxh3"] = hex64(s.xxh3);
    return j;
}

json projection_json(const PackProjection& p) {
    json j = {{"rows", p.rows},
              {"cols", p.cols},
              {"bits", p.bits},
              {"group_size", p.group_size},
              {"weight", section_json(p.weight)}};
    if (p.bits) {
        j["scales"] = section_json(p.scales);
        j["biases"] = section_json(p.biases);
    }
    return j;
}

class LayoutParser {
 public:
    explicit LayoutParser(std::string source) : source_(std::move(source)) {}
    Status status() const { return status_; }
    void fail(const std::string& what) {
        if (status_.is_ok()) status_ = error(ErrorCode::kCorrupt, "[pack] " + source_ + ": " + what);
    }
    uint64_t u64(const json& j, const char* key, const std::string& where) {
        auto it = j.find(key);
        if (it == j.end() || !it->is_number_unsigned()) {
            fail(where + ": missing or invalid '" + key + "'");
            return 0;
        }
        return it->get<uint64_t>();
    }
    PackSection section(const json& j, const std::string& where) {
        PackSection s;
        if (!j.is_object()) {
            fail(where + " is not an object");
            return s;
        }
        s.name = j.value("name", "");
        if (!j.contains("dtype") || !j["dtype"].is_string() ||
            !parse_dtype(j["dtype"].get<std::string>(), &s.dtype))
            fail(where + ": missing or unknown 'dtype'");
        if (j.contains("shape") && j["shape"].is_array())
            for (const auto& d : j["shape"]) s.shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
        s.offset = u64(j, "offset", where);
        s.size = u64(j, "size", where);
        s.bits = j.value("bits", 0);
        s.group_size = j.value("group_size", 0);
        if (j.contains("xxh3") && !parse_hex64(j["xxh3"], &s.xxh3)) fail(where + ": bad 'xxh3'");
        return s;
    }
    PackProjection projection(const json& j, const std::string& where) {
        PackProjection p;
        if (!j.is_object()) {
            fail(where + " is not an object");
            return p;
        }
        p.rows = static_cast<int64_t>(u64(j, "rows", where));
        p.cols = static_cast<int64_t>(u64(j, "cols", where));
        p.bits = j.value("bits", 0);
        p.group_size = j.value("group_size", 0);
        p.weight = section(j.value("weight", json()), where + ".weight");
        if (p.bits) {
            p.scales = section(j.value("scales", json()), where + ".scales");
            p.biases = section(j.value("biases", json()), where + ".biases");
        }
        return p;
    }

 private:
    std::string source_;
    Status status_;
};

}  // namespace

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
    json j = json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return error(ErrorCode::kCorrupt, "[pack] " + source + ": not a valid JSON object");
    if (j.value("format", "") != kPackFormatMagic)
        return error(ErrorCode::kCorrupt, "[pack] " + source + ": format is not '" + kPackFormatMagic + "'");
    PackLayout layout;
    layout.version = j.value("version", 0);
    if (layout.version != kPackFormatVersion) {
        return error(ErrorCode::kUnsupported,
                     "[pack] " + source + ": format version " + std::to_string(layout.version) +
                         ", this sluice reads version " + std::to_string(kPackFormatVersion) +
                         " (re-pack the model)");
    }
    LayoutParser p(source);
    layout.source_layout = j.value("source_layout", "");
    layout.dense_file = j.value("dense_file", "dense.safetensors");
    layout.n_experts = static_cast<int64_t>(p.u64(j, "n_experts", "layout"));
    if (j.contains("dense") && j["dense"].is_array())
        for (size_t i = 0; i < j["dense"].size(); ++i)
            layout.dense.push_back(p.section(j["dense"][i], "dense[" + std::to_string(i) + "]"));
    if (!j.contains("expert_files") || !j["expert_files"].is_array())
        p.fail("missing 'expert_files'");
    else {
        for (const auto& f : j["expert_files"]) {
            PackExpertFile ef;
            const std::string where = "expert_files[" + std::to_string(layout.expert_files.size()) + "]";
            ef.layer = static_cast<int64_t>(p.u64(f, "layer", where));
            ef.file = f.value("file", "");
            if (ef.file.empty() || ef.file.find("..") != std::string::npos || ef.file[0] == '/')
                p.fail(where + ": bad file name '" + ef.file + "'");
            ef.record_stride = p.u64(f, "record_stride", where);
            ef.record_bytes = p.u64(f, "record_bytes", where);
            if (ef.record_stride == 0 || ef.record_stride % kPackRecordAlign != 0 ||
                ef.record_bytes > ef.record_stride)
                p.fail(where + ": record_stride must be a positive multiple of 4096 holding record_bytes");
            ef.gate = p.projection(f.value("gate", json()), where + ".gate");
            ef.up = p.projection(f.value("up", json()), where + ".up");
            ef.down = p.projection(f.value("down", json()), where + ".down");
            if (f.contains("record_xxh3") && f["record_xxh3"].is_array()) {
                for (const auto& c : f["record_xxh3"]) {
                    uint64_t v = 0;
                    if (!parse_hex64(c, &v)) p.fail(where + ": bad record checksum");
                    ef.record_xxh3.push_back(v);
                }
            }
            if (static_cast<int64_t>(ef.record_xxh3.size()) != layout.n_experts)
                p.fail(where + ": " + std::to_string(ef.record_xxh3.size()) + " record checksums for " +
                       std::to_string(layout.n_experts) + " experts");
            for (const PackProjection* pr : {&ef.gate, &ef.up, &ef.down}) {
                for (const PackSection* s : {&pr->weight, &pr->scales, &pr->biases}) {
                    if (s->offset + s->size > ef.record_bytes)
                        p.fail(where + ": section '" + s->name + "' runs past the record");
                }
            }
            layout.expert_files.push_back(std::move(ef));
        }
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
    return relative_path != dense_file && relative_path.rfind("experts/", 0) != 0;
}

bool is_packed_dir(const std::string& dir) {
    std::error_code ec;
    return fs::exists(fs::path(dir) / "manifest.json", ec) || fs::exists(fs::path(dir) / "layout.json", ec);
}

Expected<PackLayout> open_packed_dir(const std::string& dir) {
    const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
    std::error_code ec;
    if (!fs::exists(manifest_path, ec)) {
        return error(ErrorCode::kCorrupt, "[pack] " + dir +
                                              " has no manifest.json: the pack is incomplete "
                                              "(interrupted?) — re-run `sluice pack` to resume it");
    }
    SLUICE_ASSIGN_OR_RETURN(std::string mtext, io::read_text_file(manifest_path));
    json m = json::parse(mtext, nullptr, false);
    if (m.is_discarded() || !m.is_object())
        return error(ErrorCode::kCorrupt, "[pack] " + manifest_path + ": not valid JSON");
    if (m.value("format", "") != kPackFormatMagic)
        return error(ErrorCode::kCorrupt,
                     "[pack] " + manifest_path + ": format is not '" + kPackFormatMagic + "'");
    const int version = m.value("version", 0);
    if (version != kPackFormatVersion) {
        return error(ErrorCode::kUnsupported, "[pack] " + manifest_path + ": format version " +
                                                  std::to_string(version) + ", this sluice reads version " +
                                                  std::to_string(kPackFormatVersion) +
                                                  " (re-pack the model)");
    }
    if (!m.contains("files") || !m["files"].is_object())
        return error(ErrorCode::kCorrupt, "[pack] " + manifest_path + ": missing 'files'");
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
        const fs::path p = fs::path(dir) / it.key();
        if (!it.value().is_number_unsigned())
            return error(ErrorCode::kCorrupt,
                         "[pack] " + manifest_path + ": bad size for '" + it.key() + "'");
        if (!fs::exists(p, ec))
            return error(ErrorCode::kCorrupt,
                         "[pack] " + dir + ": file '" + it.key() + "' listed in the manifest is missing");
        const uint64_t size = fs::file_size(p, ec);
        if (size != it.value().get<uint64_t>()) {
            return error(ErrorCode::kCorrupt, "[pack] " + dir + ": file '" + it.key() + "' is " +
                                                  std::to_string(size) + " bytes, the manifest says " +
                                                  std::to_string(it.value().get<uint64_t>()) +
                                                  " (truncated or modified)");
        }
    }
    // The description files against their checksums: a layout.json or config.json changed after
    // packing (one byte: "bits": 4 → 2) would otherwise be believed.
    if (auto sums = m.find("xxh3"); sums != m.end()) {
        if (!sums->is_object())
            return error(ErrorCode::kCorrupt, "[pack] " + manifest_path + ": 'xxh3' is not an object");
        for (auto it = sums->begin(); it != sums->end(); ++it) {
            uint64_t want = 0;
            if (!parse_hex64(it.value(), &want))
                return error(ErrorCode::kCorrupt,
                             "[pack] " + manifest_path + ": bad checksum for '" + it.key() + "'");
            const std::string path = (fs::path(dir) / it.key()).string();
            SLUICE_ASSIGN_OR_RETURN(std::string contents, io::read_text_file(path));
            if (XXH3_64bits(contents.data(), contents.size()) != want)
                return error(ErrorCode::kCorrupt,
                             "[pack] " + dir + ": '" + it.key() +
                                 "' does not match its checksum in manifest.json "
                                 "(changed after packing; re-pack or re-pull the model)");
        }
    }
    const std::string layout_path = (fs::path(dir) / "layout.json").string();
    SLUICE_ASSIGN_OR_RETURN(std::string ltext, io::read_text_file(layout_path));
    return parse_pack_layout(ltext, layout_path);
}

}  // namespace sluice::format
