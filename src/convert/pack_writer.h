// Writers of sluice's packed layout (format/pack.h, docs/FORMATS.md), shared by `sluice pack`
// (converting a checkpoint) and `sluice synth` (random weights of a real config).
//
// Memory stays bounded whatever the model size: the dense file is streamed tensor by tensor (one
// tensor's output in memory at a time) and expert files record by record (one record buffer).
// Files are written under a ".partial" name and renamed when complete; the caller writes the
// manifest last, so a killed writer never leaves a folder that loads as valid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/pack.h"
#include "sluice/status.h"

namespace sluice::convert {

// One tensor of the dense file; `fill` writes exactly size_bytes() bytes into dst.
struct DenseTensorSpec {
    std::string name;
    format::DType dtype = format::DType::kF32;
    std::vector<int64_t> shape;
    int bits = 0;
    int group_size = 0;
    std::function<Status(uint8_t* dst)> fill;
    uint64_t size_bytes() const;
};

// The first bytes of a dense file holding `sections` (offsets relative to the data section):
// the 8-byte header length, the JSON header, spaces up to a 64-byte boundary.
std::string dense_file_header(const std::vector<format::PackSection>& sections);

// Streams `tensors` into a safetensors file at `path` (via path + ".partial" and a rename);
// returns their sections (offsets relative to the data section, with xxh3 checksums).
Expected<std::vector<format::PackSection>> write_dense_file(
    const std::string& path, std::vector<DenseTensorSpec>& tensors,
    const std::function<void(uint64_t, uint64_t)>& progress = {});

// The record layout of one projection: float (bits 0) or MLX affine with bf16 scales/biases.
format::PackProjection make_projection(int64_t rows, int64_t cols, int bits, int group_size,
                                       format::DType float_dtype,
                                       format::DType scale_dtype = format::DType::kBF16);

// The record layout of one projection of ggml blocks (a GGUF's routed experts, copied as they are): U8
// [rows, row bytes] carrying its ggml type; `cols` a whole number of the type's blocks.
format::PackProjection make_ggml_projection(int64_t rows, int64_t cols, format::GgmlType type);

// Lays out gate, up, down in a record (64-byte aligned sections, 4 KiB-aligned stride).
format::PackExpertFile make_expert_file_layout(int64_t layer, const format::PackProjection& gate,
                                               const format::PackProjection& up,
                                               const format::PackProjection& down);

// Writes n_experts records to `path` (via ".partial" + rename); fill(e, record) writes record e
// (record_bytes, zero-padded to the stride by the writer). Fills the per-record checksums.
Status write_expert_file(const std::string& path, int64_t n_experts, format::PackExpertFile& layout,
                         const std::function<Status(int64_t expert, uint8_t* record)>& fill);

// Copies the tokenizer, chat template and generation config files of `src_dir` (symlinks
// resolved to their contents) into `out_dir`; returns the names copied.
Expected<std::vector<std::string>> copy_model_side_files(const std::string& src_dir,
                                                         const std::string& out_dir);

// Writes manifest.json last, listing every file of the pack with its size.
Status write_manifest(const std::string& out_dir, const std::vector<std::string>& files);

}  // namespace sluice::convert
