#include "format/hub_api.h"

#include <fnmatch.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace sluice::format {

using nlohmann::json;

const std::vector<std::string>& model_side_file_names() {
    static const std::vector<std::string> kNames = {"tokenizer.json",
                                                    "tokenizer_config.json",
                                                    "chat_template.jinja",
                                                    "chat_template.json",
                                                    "generation_config.json",
                                                    "special_tokens_map.json",
                                                    "added_tokens.json",
                                                    "vocab.json",
                                                    "merges.txt"};
    return kNames;
}

std::string hub_url_encode(const std::string& s, bool keep_slash) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

std::string hub_revision_url(const std::string& endpoint, const std::string& repo,
                             const std::string& revision) {
    return endpoint + "/api/models/" + hub_url_encode(repo, true) + "/revision/" +
           hub_url_encode(revision, false);
}

std::string hub_tree_url(const std::string& endpoint, const std::string& repo, const std::string& sha) {
    return endpoint + "/api/models/" + hub_url_encode(repo, true) + "/tree/" + hub_url_encode(sha, false) +
           "?recursive=true";
}

std::string hub_resolve_url(const std::string& endpoint, const std::string& repo, const std::string& sha,
                            const std::string& path) {
    return endpoint + "/" + hub_url_encode(repo, true) + "/resolve/" + hub_url_encode(sha, false) + "/" +
           hub_url_encode(path, true);
}

Expected<std::string> parse_hub_revision(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string())
        return error(ErrorCode::kInvalidArgument, "[hub] revision answer has no 'sha' string");
    const std::string sha = j["sha"].get<std::string>();
    if (sha.size() != 40 || !std::all_of(sha.begin(), sha.end(), [](char c) { return std::isxdigit(c); }))
        return error(ErrorCode::kInvalidArgument,
                     "[hub] revision answer: 'sha' is not a commit hash: " + sha);
    return sha;
}

Expected<std::vector<HubFile>> parse_hub_tree(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array())
        return error(ErrorCode::kInvalidArgument, "[hub] tree answer is not a JSON array");
    std::vector<HubFile> files;
    for (const auto& e : j) {
        if (!e.is_object() || e.value("type", "") != "file") continue;
        HubFile f;
        if (!e.contains("path") || !e["path"].is_string() || !e.contains("size") ||
            !e["size"].is_number_unsigned())
            return error(ErrorCode::kInvalidArgument,
                         "[hub] tree entry without 'path' or 'size': " + e.dump());
        f.path = e["path"].get<std::string>();
        f.size_bytes = e["size"].get<uint64_t>();
        if (f.path.empty() || f.path[0] == '/' || f.path.find("..") != std::string::npos)
            return error(ErrorCode::kInvalidArgument, "[hub] tree entry with an unsafe path: " + f.path);
        if (e.contains("lfs") && e["lfs"].is_object()) {
            const auto& lfs = e["lfs"];
            const std::string oid = lfs.value("oid", "");
            if (oid.size() == 64) f.sha256 = oid;
            if (lfs.contains("size") && lfs["size"].is_number_unsigned() &&
                lfs["size"].get<uint64_t>() != f.size_bytes)
                return error(ErrorCode::kInvalidArgument,
                             "[hub] tree entry '" + f.path + "': size " + std::to_string(f.size_bytes) +
                                 " but LFS size " + std::to_string(lfs["size"].get<uint64_t>()));
        }
        files.push_back(std::move(f));
    }
    return files;
}

std::string hub_next_page(const std::string& link) {
    // <https://host/api/...&cursor=...>; rel="next", <...>; rel="prev"
    size_t pos = 0;
    while ((pos = link.find('<', pos)) != std::string::npos) {
        const size_t close = link.find('>', pos);
        if (close == std::string::npos) return "";
        const size_t next = link.find(',', close);
        const std::string params =
            link.substr(close, next == std::string::npos ? std::string::npos : next - close);
        if (params.find("rel=\"next\"") != std::string::npos || params.find("rel=next") != std::string::npos)
            return link.substr(pos + 1, close - pos - 1);
        pos = close;
    }
    return "";
}

bool glob_match(const std::string& pattern, const std::string& path) {
    return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
}

Expected<HubSelection> select_hub_files(const std::vector<HubFile>& files, const std::string& index_json,
                                        const std::vector<std::string>& include,
                                        const std::vector<std::string>& exclude) {
    auto find = [&](const std::string& path) -> const HubFile* {
        for (const auto& f : files)
            if (f.path == path) return &f;
        return nullptr;
    };
    auto matches = [](const std::vector<std::string>& globs, const std::string& path) {
        return std::any_of(globs.begin(), globs.end(),
                           [&](const std::string& g) { return glob_match(g, path); });
    };
    HubSelection sel;
    std::vector<std::string> shard_names;
    if (!index_json.empty()) {
        json index = json::parse(index_json, nullptr, false);
        if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
            !index["weight_map"].is_object())
            return error(ErrorCode::kInvalidArgument,
                         "[hub] model.safetensors.index.json has no 'weight_map' object");
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                return error(ErrorCode::kInvalidArgument,
                             "[hub] weight_map entry '" + it.key() + "' is not a file");
            const std::string shard = it.value().get<std::string>();
            if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end())
                shard_names.push_back(shard);
        }
    } else if (find("model.safetensors") != nullptr) {
        shard_names.push_back("model.safetensors");
    } else {
        for (const auto& f : files)
            if (f.path.find('/') == std::string::npos && f.path.size() > 12 &&
                f.path.compare(f.path.size() - 12, 12, ".safetensors") == 0)
                shard_names.push_back(f.path);
        std::sort(shard_names.begin(), shard_names.end());
    }
    if (shard_names.empty())
        return error(ErrorCode::kNotFound, "[hub] the repository has no .safetensors weights at its root");
    for (const auto& name : shard_names) {
        const HubFile* f = find(name);
        if (f == nullptr)
            return error(ErrorCode::kNotFound, "[hub] shard '" + name + "' is not in the repository");
        if (matches(exclude, name))
            return error(ErrorCode::kInvalidArgument,
                         "[hub] --exclude matches '" + name + "', a weight file the model needs");
        sel.shards.push_back(*f);
    }
    const HubFile* config = find("config.json");
    if (config == nullptr) return error(ErrorCode::kNotFound, "[hub] the repository has no config.json");
    if (matches(exclude, "config.json"))
        return error(ErrorCode::kInvalidArgument,
                     "[hub] --exclude matches config.json, which the model needs");
    sel.small_files.push_back(*config);
    if (const HubFile* idx = find("model.safetensors.index.json"); idx && !index_json.empty())
        sel.small_files.push_back(*idx);
    for (const auto& name : model_side_file_names())
        if (const HubFile* f = find(name); f && !matches(exclude, name)) sel.small_files.push_back(*f);
    for (const auto& f : files) {
        const bool taken = std::any_of(sel.small_files.begin(), sel.small_files.end(),
                                       [&](const HubFile& s) { return s.path == f.path; }) ||
                           std::any_of(shard_names.begin(), shard_names.end(),
                                       [&](const std::string& s) { return s == f.path; });
        if (taken || !matches(include, f.path) || matches(exclude, f.path)) continue;
        sel.small_files.push_back(f);
        sel.extra_files.push_back(f.path);
    }
    return sel;
}

}  // namespace sluice::format
