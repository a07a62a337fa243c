// The checksum manifest of a GGUF (gguf_manifest.h).
#include "format/gguf_manifest.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/json_text.h"
#include "io/mapped_file.h"

namespace sluice::format {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "sluice-gguf-manifest";
constexpr int kVersion = 1;

// Exactly 16 lowercase hex digits, as serialize_gguf_manifest writes them.
bool parse_json_hex64(const json& j, uint64_t* out) {
    if (!j.is_string()) return false;
    const std::string& s = j.get_ref<const std::string&>();
    return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos &&
           format::parse_hex64(s, out);
}

int64_t mtime_ns(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return 0;
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Experts of a routed-expert tensor and the bytes of one: GGUF dims [cols, rows, experts].
int64_t expert_count(const GgufTensor& t) {
    return t.dims.size() == 3 ? t.dims[2] : 0;
}

}  // namespace

bool is_gguf_expert_tensor(const GgufTensor& t) {
    return t.dims.size() == 3 && t.name.find("_exps") != std::string::npos;
}

std::string gguf_manifest_path(const GgufCheckpoint& checkpoint) {
    return checkpoint.files().front()->path() + ".sluice-manifest.json";
}

Expected<GgufManifest> compute_gguf_manifest(const GgufCheckpoint& checkpoint, const GgufProgress& progress) {
    GgufManifest m;
    for (const auto& f : checkpoint.files())
        m.files.push_back({fs::path(f->path()).filename().string(), f->size_bytes(), mtime_ns(f->path())});
    const uint64_t total = checkpoint.total_bytes();
    uint64_t done = 0;
    for (const GgufTensor* t : checkpoint.tensors()) {
        if (t->data == nullptr && t->size_bytes > 0)
            return error(ErrorCode::kInternal, "[gguf] tensor '" + t->name + "' is not mapped");
        if (is_gguf_expert_tensor(*t)) {
            const int64_t n = expert_count(*t);
            const uint64_t slice = n > 0 ? t->size_bytes / static_cast<uint64_t>(n) : 0;
            std::vector<uint64_t>& hashes = m.experts[t->name];
            for (int64_t e = 0; e < n; ++e)
                hashes.push_back(XXH3_64bits(t->data + static_cast<uint64_t>(e) * slice, slice));
        } else {
            m.tensors[t->name] = XXH3_64bits(t->data, t->size_bytes);
        }
        done += t->size_bytes;
        if (progress) progress("hash", done, total);
    }
    return m;
}

std::string serialize_gguf_manifest(const GgufManifest& m) {
    json j;
    j["format"] = kFormat;
    j["version"] = kVersion;
    json files = json::array();
    for (const auto& f : m.files)
        files.push_back({{"name", f.name}, {"size", f.size}, {"mtime_ns", f.mtime_ns}});
    j["files"] = std::move(files);
    json tensors = json::object();
    for (const auto& [name, h] : m.tensors) tensors[name] = hex64(h);
    j["tensors"] = std::move(tensors);
    json experts = json::object();
    for (const auto& [name, hs] : m.experts) {
        json list = json::array();
        for (uint64_t h : hs) list.push_back(hex64(h));
        experts[name] = std::move(list);
    }
    j["experts"] = std::move(experts);
    return j.dump(1) + "\n";
}

Expected<GgufManifest> parse_gguf_manifest(std::string_view text, const std::string& path) {
    auto fail = [&](const std::string& what) {
        return error(ErrorCode::kCorrupt,
                     fmt::format("[gguf] {}: {} (delete it, or verify with --rewrite)", path, what));
    };
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
    if (j.value("format", std::string()) != kFormat)
        return fail(fmt::format("'format' is not \"{}\"", kFormat));
    if (!j.contains("version") || !j["version"].is_number_integer() ||
        j["version"].get<int64_t>() != kVersion)
        return fail(fmt::format("'version' is not {}", kVersion));
    GgufManifest m;
    const auto files = j.find("files");
    if (files == j.end() || !files->is_array() || files->empty())
        return fail("'files' is not a non-empty array");
    for (size_t i = 0; i < files->size(); ++i) {
        const json& f = (*files)[i];
        const std::string where = fmt::format("files[{}]", i);
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
            return fail(where + ".name is not a string");
        if (!f.contains("size") || !f["size"].is_number_unsigned())
            return fail(where + ".size is not a size");
        if (!f.contains("mtime_ns") || !f["mtime_ns"].is_number_integer())
            return fail(where + ".mtime_ns is not an integer");
        m.files.push_back(
            {f["name"].get<std::string>(), f["size"].get<uint64_t>(), f["mtime_ns"].get<int64_t>()});
    }
    const auto tensors = j.find("tensors");
    if (tensors == j.end() || !tensors->is_object()) return fail("'tensors' is not an object");
    for (const auto& [name, h] : tensors->items()) {
        uint64_t v = 0;
        if (!parse_json_hex64(h, &v)) return fail(fmt::format("tensors['{}'] is not 16 hex digits", name));
        m.tensors[name] = v;
    }
    const auto experts = j.find("experts");
    if (experts == j.end() || !experts->is_object()) return fail("'experts' is not an object");
    for (const auto& [name, list] : experts->items()) {
        if (!list.is_array()) return fail(fmt::format("experts['{}'] is not an array", name));
        std::vector<uint64_t>& hs = m.experts[name];
        for (size_t e = 0; e < list.size(); ++e) {
            uint64_t v = 0;
            if (!parse_json_hex64(list[e], &v))
                return fail(fmt::format("experts['{}'][{}] is not 16 hex digits", name, e));
            hs.push_back(v);
        }
    }
    return m;
}

std::vector<std::string> compare_gguf_manifest(const GgufManifest& want, const GgufManifest& now) {
    std::vector<std::string> problems;
    if (want.files.size() != now.files.size())
        problems.push_back(fmt::format("the manifest lists {} file(s), the model has {}", want.files.size(),
                                       now.files.size()));
    bool changed = false;
    for (size_t i = 0; i < want.files.size() && i < now.files.size(); ++i) {
        const auto &w = want.files[i], &n = now.files[i];
        if (w.name != n.name) {
            problems.push_back(fmt::format("file {} is '{}', the manifest says '{}'", i + 1, n.name, w.name));
            changed = true;
        } else if (w.size != n.size) {
            problems.push_back(
                fmt::format("'{}' is {} bytes, {} when the manifest was written: the file changed "
                            "(verify with --rewrite if that was deliberate)",
                            n.name, n.size, w.size));
            changed = true;
        }
    }
    if (changed) return problems;  // another file: its tensors are not comparable one by one
    for (const auto& [name, h] : want.tensors) {
        const auto it = now.tensors.find(name);
        if (it == now.tensors.end())
            problems.push_back(fmt::format("tensor '{}' is in the manifest but not in the file", name));
        else if (it->second != h)
            problems.push_back(
                fmt::format("tensor '{}': checksum {} differs from the manifest's {} (damaged)", name,
                            hex64(it->second), hex64(h)));
    }
    for (const auto& [name, h] : now.tensors)
        if (!want.tensors.count(name))
            problems.push_back(fmt::format("tensor '{}' is in the file but not in the manifest", name));
    for (const auto& [name, hs] : want.experts) {
        const auto it = now.experts.find(name);
        if (it == now.experts.end()) {
            problems.push_back(fmt::format("tensor '{}' is in the manifest but not in the file", name));
            continue;
        }
        if (it->second.size() != hs.size()) {
            problems.push_back(fmt::format("tensor '{}' has {} experts, the manifest {}", name,
                                           it->second.size(), hs.size()));
            continue;
        }
        for (size_t e = 0; e < hs.size(); ++e)
            if (it->second[e] != hs[e])
                problems.push_back(
                    fmt::format("tensor '{}', expert {}: checksum {} differs from the manifest's {} "
                                "(damaged)",
                                name, e, hex64(it->second[e]), hex64(hs[e])));
    }
    for (const auto& [name, hs] : now.experts)
        if (!want.experts.count(name))
            problems.push_back(fmt::format("tensor '{}' is in the file but not in the manifest", name));
    return problems;
}

Expected<std::optional<GgufManifest>> gguf_manifest_for_reads(const GgufCheckpoint& checkpoint,
                                                              std::string* why) {
    const std::string path = gguf_manifest_path(checkpoint);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        *why = "no checksum manifest beside it (" + path + ")";
        return std::optional<GgufManifest>();
    }
    SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(path));
    SLUICE_ASSIGN_OR_RETURN(GgufManifest m, parse_gguf_manifest(text, path));
    const auto& files = checkpoint.files();
    bool same = m.files.size() == files.size();
    for (size_t i = 0; same && i < files.size(); ++i)
        same = m.files[i].name == fs::path(files[i]->path()).filename().string() &&
               m.files[i].size == files[i]->size_bytes();
    if (!same) {
        *why = "its checksum manifest (" + path + ") describes files of other names or sizes";
        return std::optional<GgufManifest>();
    }
    return std::optional<GgufManifest>(std::move(m));
}

Expected<GgufVerifyResult> verify_gguf(const std::string& path, bool rewrite, const GgufProgress& progress) {
    SLUICE_ASSIGN_OR_RETURN(auto checkpoint, GgufCheckpoint::open(path));
    GgufVerifyResult r;
    r.manifest_path = gguf_manifest_path(*checkpoint);
    SLUICE_ASSIGN_OR_RETURN(GgufManifest now, compute_gguf_manifest(*checkpoint, progress));
    r.tensors = static_cast<int64_t>(now.tensors.size() + now.experts.size());
    for (const auto& [name, hs] : now.experts) r.expert_slices += static_cast<int64_t>(hs.size());
    std::error_code ec;
    if (!rewrite && fs::exists(r.manifest_path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(r.manifest_path));
        SLUICE_ASSIGN_OR_RETURN(GgufManifest want, parse_gguf_manifest(text, r.manifest_path));
        r.problems = compare_gguf_manifest(want, now);
        return r;
    }
    SLUICE_RETURN_IF_ERROR(io::write_file_atomic(r.manifest_path, serialize_gguf_manifest(now)));
    r.manifest_written = true;
    return r;
}

}  // namespace sluice::format
