// The Hugging Face Hub's HTTP layout, as `sluice pull` uses it (pure functions: URLs, JSON
// answers, file selection), so that the network code stays small and this part is unit-tested.
//
//   GET {endpoint}/api/models/{repo}/revision/{rev}         → {"sha": commit, "siblings": [...]}
//   GET {endpoint}/api/models/{repo}/tree/{sha}?recursive=true
//       → [{"type":"file","path":..,"size":..,"lfs":{"oid":sha256,"size":..}}, ...]
//         (paged: a `Link: <url>; rel="next"` header points at the next page)
//   GET {endpoint}/{repo}/resolve/{sha}/{path}               → the file (LFS files: a 302 to a CDN)
//
// The revision is resolved to its commit sha once, at the start, and every later URL uses the
// sha, so a resumed pull can never mix files of two revisions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::format {

struct HubFile {
    std::string path;
    uint64_t size_bytes = 0;
    std::string sha256;  // LFS files: the Hub's oid (hex SHA-256 of the content); "" otherwise
};

std::string hub_url_encode(const std::string& s, bool keep_slash);
std::string hub_revision_url(const std::string& endpoint, const std::string& repo,
                             const std::string& revision);
std::string hub_tree_url(const std::string& endpoint, const std::string& repo, const std::string& sha);
std::string hub_resolve_url(const std::string& endpoint, const std::string& repo, const std::string& sha,
                            const std::string& path);

// The commit sha of a revision answer; the files of a tree page; the next-page URL of a Link
// header ("" when none).
Expected<std::string> parse_hub_revision(const std::string& json_text);
Expected<std::vector<HubFile>> parse_hub_tree(const std::string& json_text);
std::string hub_next_page(const std::string& link_header);

// fnmatch(3)-style glob ('*' also matches '/', as huggingface_hub's allow_patterns do).
bool glob_match(const std::string& pattern, const std::string& path);

// What a pull fetches from a repository listing.
struct HubSelection {
    std::vector<HubFile> small_files;      // config.json, index, tokenizer/template files, --include matches
    std::vector<HubFile> shards;           // the safetensors weights, in checkpoint order
    std::vector<std::string> extra_files;  // the --include matches (also in small_files)
};

// config.json and the weights are always selected (an --exclude that removes them is an error);
// tokenizer/template/generation files unless excluded; other files only when an --include
// pattern matches them and no --exclude does. `index_json` is the text of
// model.safetensors.index.json when the repository has one (its weight_map names the shards).
Expected<HubSelection> select_hub_files(const std::vector<HubFile>& files, const std::string& index_json,
                                        const std::vector<std::string>& include,
                                        const std::vector<std::string>& exclude);

// The names `sluice pack` copies next to the weights (experts/pack_writer.cpp uses the same list).
const std::vector<std::string>& model_side_file_names();

}  // namespace sluice::format
