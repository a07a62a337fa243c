// `sluice pack` and `sluice synth`: producing packed (streaming) model folders.
//
// pack: a Hugging Face checkpoint (bf16/f16/f32; quantized with the MLX affine algorithm unless
// bits = 16, routers and shared-expert gates at 8-bit as mlx-lm does), an MLX checkpoint (bytes
// copied verbatim) or a GGUF (its ggml blocks copied verbatim) → dense.safetensors + one expert file
// per MoE layer + layout.json + manifest.json. The plan and the byte transform are shared with `sluice pull`
// (pack_plan.h, pack_stream.h). Resumable: a progress record (.pack-progress.json) holds a cursor per shard,
// and a re-run with the same source and options continues from it. Vision tensors are not packed;
// a multi-token-prediction head is (its layer's experts as the expert file of layer n_layers).
//
// synth: random weights of any supported config written straight into the packed layout (used
// for full-size benchmarks without downloads); streaming, bounded memory, seeded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "sluice/status.h"

namespace sluice::convert {

struct PackOptions {
    std::string src_dir;
    std::string out_dir;
    int bits = 0;         // 4 or 8; 16 = keep float weights; 0 = 4 for float sources (MLX: verbatim)
    int group_size = 64;  // 32, 64 or 128
    // Called with (what, done, total) while writing.
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

struct PackResult {
    bool resumed = false;  // some files came from an earlier, interrupted run
    bool already_complete = false;
    uint64_t dense_bytes = 0;
    uint64_t expert_bytes = 0;
    int64_t expert_files = 0;
    uint64_t record_bytes = 0;   // the largest expert record (stride included): one cache slot
    int64_t expert_records = 0;  // routed experts in all (synth)
    // synth's dry run: the decoder layers' own mapped dense weights, all and the largest layer's
    // (PlannedWeights: what streaming the dense core reads).
    uint64_t layers_dense_bytes = 0, max_layer_dense_bytes = 0;
};

// src_dir may also be a GGUF (a .gguf file, a file starting with the GGUF magic, the first of a split
// set, or a folder holding one): then pack_gguf_model.
Expected<PackResult> pack_model(const PackOptions& options);

// A GGUF into the packed layout, every tensor's bytes verbatim in its own ggml type (pack_gguf.cpp);
// options.bits must be 0 (no requantisation), group_size is not used.
Expected<PackResult> pack_gguf_model(const PackOptions& options);

struct SynthOptions {
    std::string config_path;  // a config.json (any supported family)
    std::string out_dir;
    int bits = 4;
    int group_size = 64;
    uint64_t seed = 1;
    std::string tokenizer_dir;  // optional: copy tokenizer files from here
    // A multi-token-prediction head (mtp.*, its layer's experts as the expert file of layer
    // n_layers), as the Qwen3-Next / Qwen3.5 checkpoints ship one; other families have none.
    bool mtp = true;
    // Writes nothing: the sizes the packed model would have (`sluice info CONFIG.json` plans with
    // them before anything is downloaded); dense_bytes is then what the loaded model holds (its
    // linears as mapped, its small vectors as f32 copies). out_dir is not used.
    bool dry_run = false;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

Expected<PackResult> synth_model(const SynthOptions& options);

// Checks every file size and every checksum of a packed folder; returns a list of problems
// (empty = all good). Errors opening the folder itself are returned as a Status.
Expected<std::vector<std::string>> verify_packed(
    const std::string& dir, const std::function<void(const std::string&, uint64_t, uint64_t)>& progress = {});

}  // namespace sluice::convert
