// safetensors: the header parser (a pure function over bytes, fuzzed) and a reader for single
// files and sharded checkpoints (model.safetensors.index.json). Format: models.md §6.
//
// parse_safetensors_header() validates everything before a byte of tensor data is trusted:
// header length within the file and ≤ 100 MB, valid JSON object, known dtype, shape × dtype size ==
// byte length, offsets inside the data section, no two tensors overlapping. Every failure names
// the file and the tensor.
//
// Lifetime: a SafetensorsFile keeps its MappedFile alive; TensorInfo::data points into it and is
// valid as long as the file (or the Checkpoint holding it) lives. Data pointers may be unaligned
// (offsets are byte offsets) — consumers use unaligned loads or memcpy.
// Thread safety: immutable after open.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "sluice/status.h"

namespace sluice::format {

enum class DType : uint8_t {
    kBool,
    kU8,
    kI8,
    kI16,
    kU16,
    kF16,
    kBF16,
    kI32,
    kU32,
    kF32,
    kF64,
    kI64,
    kU64,
    kF8E4M3,
    kF8E5M2,
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
// F32, F16 or BF16: the float types a linear's weights may be stored in unquantized.
inline bool is_float_dtype(DType dtype) {
    return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}
bool parse_dtype(std::string_view name, DType* out);

// "BF16 [512,2048]" — the form error messages use.
std::string describe(DType dtype, const std::vector<int64_t>& shape);

struct TensorInfo {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    uint64_t offset = 0;            // relative to the data section
    uint64_t size_bytes = 0;        // == numel × dtype_size
    const uint8_t* data = nullptr;  // set once the file is mapped; unaligned in general

    int64_t numel() const;
};

struct SafetensorsHeader {
    uint64_t data_start = 0;          // 8 + header length
    std::vector<TensorInfo> tensors;  // in offset order
    std::map<std::string, std::string> metadata;
};

// Largest header sluice accepts (the reference parser's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1000 * 1000;

// Parses and validates the header of a safetensors file whose full contents are `bytes` (only
// the header and the file size are inspected). `file_name` is used in error messages.
Expected<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes,
                                                     const std::string& file_name);
// The same check over the first bytes of a file of `file_size` bytes (at least 8 + the header
// length; what `sluice pull` fetches with range requests). Data pointers stay null unless
// `bytes` is the whole file.
Expected<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                                     const std::string& file_name);

// One mapped .safetensors file.
class SafetensorsFile {
 public:
    static Expected<std::shared_ptr<SafetensorsFile>> open(const std::string& path);

    const std::string& path() const { return file_ ? file_->path() : name_; }
    const std::string& name() const { return name_; }  // file name inside the checkpoint folder
    uint64_t data_start() const { return header_.data_start; }
    const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
    const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
    const TensorInfo* find(std::string_view name) const;

 private:
    friend class Checkpoint;
    std::shared_ptr<io::MappedFile> file_;  // null for a header-only file (Checkpoint::from_headers)
    std::string name_;
    SafetensorsHeader header_;
    std::map<std::string, size_t, std::less<>> index_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed by
// model.safetensors.index.json, or (as a fallback) every *.safetensors file in the folder.
class Checkpoint {
 public:
    static Expected<std::shared_ptr<Checkpoint>> open(const std::string& dir);
    // Just the given files of `dir` (a packed model's dense.safetensors).
    static Expected<std::shared_ptr<Checkpoint>> open_files(const std::string& dir,
                                                            const std::vector<std::string>& files);

    // A checkpoint known only by its shard headers (names, shapes, offsets; data pointers null):
    // what `sluice pull` plans from before any tensor byte is downloaded.
    static Expected<std::shared_ptr<Checkpoint>> from_headers(
        const std::string& dir, std::vector<std::pair<std::string, SafetensorsHeader>> headers);

    const std::string& dir() const { return dir_; }
    const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
    const TensorInfo* find(std::string_view name) const;
    // Every tensor name, sorted.
    std::vector<std::string> names() const;
    size_t size() const { return tensors_.size(); }
    uint64_t total_bytes() const;

 private:
    std::string dir_;
    std::vector<std::shared_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo*, std::less<>> tensors_;
};

// A tensor to write: name, dtype, shape and its bytes (size must equal numel × dtype size).
struct TensorToWrite {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    std::string_view bytes;
};

// Serialises tensors into safetensors bytes (header padded to 8 bytes, data in the given order).
Expected<std::string> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                            const std::map<std::string, std::string>& metadata = {});
// serialize_safetensors + io::write_file_atomic.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace sluice::format
