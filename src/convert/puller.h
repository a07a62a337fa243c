// `sluice pull`: a model from the Hugging Face Hub (or a mirror) straight into the packed layout.
//
// Lists the repository at a revision pinned to its commit sha, downloads config, tokenizer and
// template files into OUT/.source/, reads every safetensors header with two range requests, plans
// the pack exactly as `sluice pack` does (pack_plan.h), and streams the shards with range requests
// through the same pieces (pack_stream.h): the raw checkpoint is never stored. Resumable after a
// kill or a dropped connection; every answer is checked before a byte is used (io/http.h); sizes
// and the Hub's SHA-256 of LFS files are verified; the manifest is written last.
//
// Threading: up to `connections` shards stream at once, one thread and one connection each
// (pack_stream.h); `progress` and `notice` may be called from any of them (progress serialised).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "convert/packer.h"
#include "sluice/status.h"

namespace sluice::convert {

struct PullOptions {
    std::string repo;               // "ORG/NAME"
    std::string revision = "main";  // branch, tag or commit
    std::string out_dir;
    std::string endpoint;  // "" = https://huggingface.co (the CLI passes $HF_ENDPOINT)
    std::string token;     // "" = none (the CLI passes $HF_TOKEN)
    int bits = 0;          // as PackOptions::bits
    int group_size = 64;
    std::vector<std::string> include, exclude;  // globs (format/hub_api.h: select_hub_files)
    int connections = 4;                        // shards downloaded at once, one connection each
    double stall_timeout_s = 60;
    int max_attempts = 10;
    double retry_wait_s = 1.0;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;  // ("download", done, total)
    std::function<void(const std::string&)> notice;                        // retries, resume, pinning
};

struct PullResult {
    PackResult pack;
    std::string commit;             // the pinned revision
    uint64_t downloaded_bytes = 0;  // weight bytes fetched by this run
};

Expected<PullResult> pull_model(const PullOptions& options);

}  // namespace sluice::convert
