// sluice's packed (streaming) checkpoint layout: the description files and their parser.
// The full format is documented in docs/FORMATS.md; in short, a packed folder holds
//
//   config.json               the model config; its `quantization` block describes the packed weights
//   dense.safetensors         every tensor except the routed experts (names as in the source)
//   experts/layer_NNN.bin     one file per MoE layer: n_experts fixed-stride records, 4 KiB aligned,
//                             record e = expert e's gate, up and down projections (weights, scales,
//                             biases), so one expert is one aligned read
//   layout.json               every section: name, dtype, shape, offset, size, bits, group size (or
//                             the ggml block type of a GGUF's bytes), xxh3-64 of each dense tensor and
//                             of each expert record
//   tokenizer files, chat template, generation_config.json (copied, symlinks resolved)
//   manifest.json             format magic + version + file sizes; written LAST — its presence
//                             means the folder is complete
//
// Lifetime/threading: plain values, parsed once at load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "sluice/status.h"

namespace sluice::format {

inline constexpr const char* kPackFormatMagic = "sluice-pack";
inline constexpr int kPackFormatVersion = 2;        // 2: every description file checksummed in the manifest
inline constexpr uint64_t kPackRecordAlign = 4096;  // one expert record = whole pages (O_DIRECT)
inline constexpr uint64_t kPackSectionAlign = 64;   // sections inside a record: cache-line aligned

// One tensor inside a file (dense.safetensors) or inside an expert record.
struct PackSection {
    std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight", or "gate.scales" in a record
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    uint64_t offset = 0;  // bytes from the start of the file / record
    uint64_t size = 0;
    int bits = 0;  // 0 = not quantized
    int group_size = 0;
    uint64_t xxh3 = 0;  // dense tensors only (records carry one checksum for the whole record)
    // A GGUF tensor of a ggml block type (`sluice pack FILE.gguf`), its blocks as the file holds them:
    // dtype U8, shape [.., rows, row_bytes] with row_bytes a whole number of blocks. The tensor's
    // logical row length is ggml_cols(). Element types (f32, f16, bf16, ...) are stored as their own
    // dtype instead, and never carry this.
    std::optional<GgmlType> ggml_type;

    // Elements per row of a ggml-typed section: its row bytes / block_bytes × block_elems.
    int64_t ggml_cols() const;
};

// One projection of an expert record: a float weight, MLX affine codes with their scales and biases,
// or (a GGUF's) ggml blocks.
struct PackProjection {
    int64_t rows = 0, cols = 0;  // logical [out, in]
    int bits = 0;                // 0 = float weight of `weight.dtype`, or ggml blocks
    int group_size = 0;
    std::optional<GgmlType> ggml_type;   // the blocks' type (then weight is U8 [rows, row_bytes])
    PackSection weight, scales, biases;  // scales/biases unused when bits == 0
};

struct PackExpertFile {
    int64_t layer = 0;
    std::string file;            // relative, e.g. "experts/layer_003.bin"
    uint64_t record_stride = 0;  // multiple of kPackRecordAlign
    uint64_t record_bytes = 0;   // used bytes of a record (≤ stride)
    PackProjection gate, up, down;
    std::vector<uint64_t> record_xxh3;  // [n_experts]
};

struct PackLayout {
    int version = kPackFormatVersion;
    // "huggingface" or "mlx": which reference the math follows, and so how the dense tensors are named
    // and bound; "gguf": a GGUF's tensors under their GGUF names, bound as a GGUF's are
    // (model/weights_gguf.h) — the only layout whose sections may carry ggml_type.
    std::string source_layout;
    std::string dense_file = "dense.safetensors";
    std::vector<PackSection> dense;
    int64_t n_experts = 0;
    std::vector<PackExpertFile> expert_files;  // one per MoE layer, in layer order

    const PackExpertFile* for_layer(int64_t layer) const;
    uint64_t expert_record_bytes_total() const;
};

// How a GGUF tensor of ggml type `type` is stored in a pack: an element type (f32, f16, bf16, f64, i8 …
// i64) as that dtype, the same bytes; nullopt for a block type, stored as U8 rows of its blocks with the
// section's ggml_type saying which.
std::optional<DType> ggml_element_dtype(GgmlType type);

std::string serialize_pack_layout(const PackLayout& layout);
Expected<PackLayout> parse_pack_layout(const std::string& json_text, const std::string& source);

// The manifest: written last by pack/synth, checked first by every loader.
struct PackManifest {
    std::string format;
    int version = 0;
    std::vector<std::pair<std::string, uint64_t>> files;  // relative path → size in bytes
    // xxh3-64 of every description file (layout.json, config.json, tokenizer files, chat template,
    // generation_config.json): the data files carry per-tensor and per-record checksums in
    // layout.json, which this covers. Packs written before the checksums existed have none.
    std::vector<std::pair<std::string, uint64_t>> xxh3;
};
// Whether a packed file is described by a checksum of its own in the manifest (not the dense
// safetensors or an expert file, whose contents layout.json checksums).
bool manifest_checksums(const std::string& relative_path, const std::string& dense_file);
std::string serialize_pack_manifest(const PackManifest& manifest);
// Parses and checks a manifest.json text on its own (magic, version, file names and sizes, every
// description file with a well-formed checksum, layout.json and config.json listed); the files
// themselves are checked by open_packed_dir. Errors are kCorrupt and name `source`.
Expected<PackManifest> parse_pack_manifest(const std::string& json_text, const std::string& source);

// True when `dir` has a manifest.json (it is meant to be a packed folder, complete or not).
bool is_packed_dir(const std::string& dir);

// Reads and checks manifest.json (magic, version, every listed file present with its size, every
// description file matching its checksum) and layout.json. A missing manifest means an incomplete pack; every
// failure names the file.
Expected<PackLayout> open_packed_dir(const std::string& dir);

}  // namespace sluice::format
