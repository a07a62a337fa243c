// A manifest of checksums kept beside a GGUF (issue 26): what `sluice verify FILE.gguf` checks, so a
// file damaged on disk or in a copy is caught — each tensor's bytes hashed (XXH3-64), a routed-expert
// tensor's (`blk.N.ffn_*_exps`, [experts, rows, cols]) expert by expert, the unit a streamed forward
// reads, so a damaged slice names its layer, projection and expert.
//
// The manifest is FIRST.gguf.sluice-manifest.json (the first file of a split set), written atomically
// the first time a file is verified (or with --rewrite after a deliberate change): it can only certify
// what the file held then. It records each file's size and modification time; a file whose size changed
// since is reported as changed rather than compared tensor by tensor.
//
//   {"format": "sluice-gguf-manifest", "version": 1,
//    "files": [{"name": "m-00001-of-00002.gguf", "size": 123, "mtime_ns": 1733000000000000000}, ...],
//    "tensors": {"token_embd.weight": "16 hex digits", ...},          (every tensor but the experts')
//    "experts": {"blk.0.ffn_up_exps.weight": ["16 hex digits", ...], ...}}  (one per expert)
//
// Threading: none; the functions read the mapped files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "sluice/status.h"

namespace sluice::format {

struct GgufManifest {
    struct File {
        std::string name;  // file name, no folder
        uint64_t size = 0;
        int64_t mtime_ns = 0;
    };
    std::vector<File> files;
    std::map<std::string, uint64_t> tensors;               // XXH3-64 of each tensor's bytes
    std::map<std::string, std::vector<uint64_t>> experts;  // per expert, for *_exps tensors
};

using GgufProgress = std::function<void(const std::string& phase, uint64_t done, uint64_t total)>;

// Where the manifest of the GGUF opened as `checkpoint` lives.
std::string gguf_manifest_path(const GgufCheckpoint& checkpoint);
// Whether a tensor is stored expert by expert (a routed-expert tensor of 3 dims).
bool is_gguf_expert_tensor(const GgufTensor& tensor);

// Hashes every tensor of the checkpoint (reads every byte).
Expected<GgufManifest> compute_gguf_manifest(const GgufCheckpoint& checkpoint,
                                             const GgufProgress& progress = {});
std::string serialize_gguf_manifest(const GgufManifest& manifest);
// Errors name `path` and the field.
Expected<GgufManifest> parse_gguf_manifest(std::string_view text, const std::string& path);
// What differs between the manifest and a fresh computation: one sentence per tensor, expert or file
// (empty: the same). Tensors the manifest lacks or that the file lacks are differences too.
std::vector<std::string> compare_gguf_manifest(const GgufManifest& manifest, const GgufManifest& now);

// The manifest beside `checkpoint`, for checking what a streamed forward reads: nullopt when there is
// none, or when it describes other files than these (another name or size: the file changed since, and
// its checksums would only cry wolf) — `why` then says which. An unreadable manifest is an error.
Expected<std::optional<GgufManifest>> gguf_manifest_for_reads(const GgufCheckpoint& checkpoint,
                                                              std::string* why);

struct GgufVerifyResult {
    std::string manifest_path;
    bool manifest_written = false;  // none was there (first use) or `rewrite`: the file's hashes now are it
    int64_t tensors = 0, expert_slices = 0;
    std::vector<std::string> problems;  // empty: every checksum matched the manifest
};
// Verifies `path` (a .gguf, or the first file of a split set) against its manifest, writing the
// manifest when there is none or `rewrite` is set. A manifest that cannot be read or parsed is an
// error naming it (delete it or pass rewrite); a file that cannot be opened, the GGUF parser's error.
Expected<GgufVerifyResult> verify_gguf(const std::string& path, bool rewrite = false,
                                       const GgufProgress& progress = {});

}  // namespace sluice::format
