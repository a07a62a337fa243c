// GGUF (llama.cpp's model file): the header parser (a pure function over bytes, fuzzed) and a reader
// for single files and split sets (NAME-00001-of-0000N.gguf).
//
// A GGUF file is, all little-endian:
//   "GGUF" | u32 version (2 or 3) | u64 tensor count | u64 metadata count
//   metadata:     key (u64 length + bytes) | u32 value type | value  (arrays: u32 element type, u64
//                 count, the elements; arrays may nest)
//   tensor infos: name | u32 n_dims (≤ 4) | n_dims × i64 dims | u32 ggml type | u64 offset
//   padding to `general.alignment` (u32, a power of two; default 32), then the data section; each
//   tensor's offset is relative to it and a multiple of the alignment.
//
// parse_gguf_header() validates everything before a byte of tensor data is trusted: every length and
// count against the bytes that remain (a count of 2^60 strings fails before anything is allocated),
// value types, nesting depth, duplicate keys and tensor names, dims (non-negative, product without
// overflow, the row a whole number of blocks), known ggml types, offsets aligned and inside the file,
// no two tensors overlapping, `general.alignment` typed and a power of two. Every failure is a
// kCorrupt Status naming the file and the key or tensor ("[gguf] m.gguf: tensor 'blk.0.ffn_up_exps'
// q4_K [128,768,2048]: its 56623104 bytes at data offset 4096 run past the end of the data section
// (1048576 bytes from offset 2048)"). Memory kept is linear in the header's bytes (≤ kMaxGgufHeaderBytes):
// scalar arrays stay as their raw bytes, decoded on access.
//
// Shapes: GGUF lists dims innermost first (ggml's ne[0] is the contiguous row length). GgufTensor
// keeps that order in `dims` and gives the row-major order sluice uses elsewhere, [.., rows, cols],
// from shape(): a 2-D weight of dims {4096, 1024} is the [1024, 4096] matrix W[out, in], and
// blk.N.ffn_up_exps of dims {2048, 768, 128} is [128 experts, 768, 2048] — expert e is the contiguous
// byte range [e·768·row_bytes, (e+1)·768·row_bytes) of the tensor.
//
// Lifetime: a GgufFile keeps its MappedFile alive; GgufTensor::data points into it and is valid as
// long as the file (or the GgufCheckpoint holding it) lives. Metadata values are copied out of the
// map (they outlive it). Thread safety: immutable after open.
// Rejected alternative: values as string_views into the map — a header parsed from a prefix fetched
// over HTTP (what `sluice pull` does for safetensors) would dangle.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "sluice/status.h"

namespace sluice::format {

// ---- metadata -------------------------------------------------------------------------------

// Metadata value types, numbered as in the file (gguf.h's gguf_type).
enum class GgufValueType : uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "U32", "STRING", ...

// One metadata value: a scalar, a string, or an array (of scalars, of strings, or of arrays).
// The to_* accessors return nullopt when the value does not hold that kind; integers convert
// between widths only where the value fits (a U64 of 2^63 is no int64).
class GgufValue {
 public:
    GgufValueType type() const { return type_; }
    bool is_array() const { return type_ == GgufValueType::kArray; }
    // "U32", "STRING", "ARRAY[STRING, 151936]", "ARRAY[ARRAY, 2]" — for messages.
    std::string describe() const;

    // Scalars. Integers: any of the eight integer types (not BOOL); floats: F32 or F64 (an F32 widens
    // exactly).
    std::optional<uint64_t> to_uint() const;
    std::optional<int64_t> to_int() const;
    std::optional<double> to_float() const;
    std::optional<bool> to_bool() const;
    std::optional<std::string_view> to_string() const;

    // Arrays. element_type(): the elements' type (kArray for nested arrays); size(): their count.
    GgufValueType element_type() const { return element_type_; }
    uint64_t size() const { return count_; }
    // Element i as a value of its own (a copy; i < size()).
    GgufValue at(uint64_t i) const;
    // The whole array converted, or nullopt when an element does not convert (to_ints: integer
    // elements; to_floats: F32/F64 elements; to_bools: BOOL elements).
    std::optional<std::vector<int64_t>> to_ints() const;
    std::optional<std::vector<double>> to_floats() const;
    std::optional<std::vector<bool>> to_bools() const;
    // Arrays of strings and of arrays, by reference (empty for other values).
    const std::vector<std::string>& strings() const { return strings_; }
    const std::vector<GgufValue>& arrays() const { return arrays_; }

    // Builders (the parser's and tests').
    static GgufValue scalar(GgufValueType type, uint64_t raw_bits);
    static GgufValue string(std::string s);
    static GgufValue scalar_array(GgufValueType element_type, uint64_t count, std::string raw);
    static GgufValue string_array(std::vector<std::string> items);
    static GgufValue array_array(std::vector<GgufValue> items);

 private:
    GgufValueType type_ = GgufValueType::kU8;
    GgufValueType element_type_ = GgufValueType::kU8;
    uint64_t count_ = 0;
    uint64_t bits_ = 0;                 // a scalar's little-endian bytes, zero-extended
    std::string raw_;                   // a string scalar, or a scalar array's count × size bytes
    std::vector<std::string> strings_;  // an array of strings
    std::vector<GgufValue> arrays_;     // an array of arrays
};

// The key-value pairs of a file, in file order, with lookups. The typed getters fail with kNotFound
// for a missing key and kCorrupt for a value of another type, naming the file and the key:
// "[gguf] m.gguf: key 'qwen3moe.block_count': expected an unsigned integer, got STRING".
class GgufMetadata {
 public:
    GgufMetadata() = default;
    explicit GgufMetadata(std::string file_name) : file_name_(std::move(file_name)) {}

    size_t size() const { return entries_.size(); }
    const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
    const GgufValue* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // False (and nothing added) when the key is already present.
    bool add(std::string key, GgufValue value);

    Expected<uint64_t> get_uint(std::string_view key) const;
    Expected<int64_t> get_int(std::string_view key) const;
    Expected<double> get_float(std::string_view key) const;
    Expected<bool> get_bool(std::string_view key) const;
    Expected<std::string> get_string(std::string_view key) const;
    Expected<std::vector<int64_t>> get_ints(std::string_view key) const;
    Expected<std::vector<double>> get_floats(std::string_view key) const;
    Expected<std::vector<std::string>> get_strings(std::string_view key) const;

 private:
    Status type_error(std::string_view key, const char* expected, const GgufValue& got) const;
    Expected<const GgufValue*> lookup(std::string_view key) const;

    std::string file_name_;
    std::vector<std::pair<std::string, GgufValue>> entries_;
    std::map<std::string, size_t, std::less<>> index_;
};

// ---- tensors --------------------------------------------------------------------------------

// ggml tensor types, numbered as in the file (ggml.h's ggml_type). Every type a GGUF may hold is
// listed, so a file of any quantisation parses; which of them sluice computes with is the kernels'
// business (kernels/ggml_quants.h).
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ8_1 = 9,
    kQ2_K = 10,
    kQ3_K = 11,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kQ8_K = 15,
    kIQ2_XXS = 16,
    kIQ2_XS = 17,
    kIQ3_XXS = 18,
    kIQ1_S = 19,
    kIQ4_NL = 20,
    kIQ3_S = 21,
    kIQ2_S = 22,
    kIQ4_XS = 23,
    kI8 = 24,
    kI16 = 25,
    kI32 = 26,
    kI64 = 27,
    kF64 = 28,
    kIQ1_M = 29,
    kBF16 = 30,
    kTQ1_0 = 34,
    kTQ2_0 = 35,
    kMXFP4 = 39,
    kNVFP4 = 40,
    kQ1_0 = 41,
    kQ2_0 = 42,
};

// A ggml type's storage: a row of ne[0] elements is ne[0] / block_elems blocks of block_bytes.
struct GgmlTypeInfo {
    GgmlType type;
    const char* name;  // ggml's spelling: "q4_K", "bf16", "mxfp4"
    uint32_t block_elems;
    uint32_t block_bytes;
};
// Null for a number that is no ggml type (or a removed one: 4, 5, 31–33, 36–38).
const GgmlTypeInfo* ggml_type_info(uint32_t type);
const char* ggml_type_name(GgmlType type);
// The type ggml spells `name` ("q4_K", "mxfp4"; case-sensitive, as ggml_type_name writes it), or null.
const GgmlTypeInfo* ggml_type_by_name(std::string_view name);

// The largest metadata + tensor-info section sluice accepts. Real files stay far below it (a
// 262k-token vocabulary with its merges is ~30 MB); hostile counts fail against it before their
// values are built.
inline constexpr uint64_t kMaxGgufHeaderBytes = 512ull << 20;
// Nesting of arrays inside arrays (gguf-py writes one level; ggml reads none).
inline constexpr int kMaxGgufArrayDepth = 8;

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::kF32;
    std::vector<int64_t> dims;      // GGUF order: dims[0] is the row length (ggml's ne[0])
    uint64_t offset = 0;            // relative to the data section of its file (a multiple of the alignment)
    uint64_t size_bytes = 0;        // rows() · row_bytes()
    uint64_t file_offset = 0;       // data_start + offset: where the bytes are in the file (for pread)
    uint32_t file_index = 0;        // which file of a split set (0 for a single file)
    const uint8_t* data = nullptr;  // into the map; null for a header parsed from a prefix

    // Row-major, outermost first: dims reversed ([.., rows, cols]).
    std::vector<int64_t> shape() const;
    int64_t numel() const;
    int64_t cols() const { return dims.empty() ? 1 : dims[0]; }
    int64_t rows() const;  // product of every dim but the first
    uint64_t row_bytes() const;
};

// "q4_K [128,768,2048]" (row-major) — the form error messages use.
std::string describe(const GgufTensor& tensor);

struct GgufHeader {
    uint32_t version = 0;
    uint64_t alignment = 32;
    uint64_t data_start = 0;  // absolute offset of the data section (aligned)
    GgufMetadata metadata;
    std::vector<GgufTensor> tensors;  // in file order
};

// Parses and validates a GGUF file whose full contents are `bytes`. `file_name` is used in errors.
Expected<GgufHeader> parse_gguf_header(std::span<const uint8_t> bytes, const std::string& file_name);
// The same over the first bytes of a file of `file_size` bytes (enough to hold the header); tensors
// are checked against file_size, data pointers stay null unless `bytes` is the whole file.
Expected<GgufHeader> parse_gguf_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                       const std::string& file_name);

// One mapped .gguf file.
class GgufFile {
 public:
    static Expected<std::shared_ptr<GgufFile>> open(const std::string& path);

    const std::string& path() const { return file_->path(); }
    const GgufHeader& header() const { return header_; }
    const GgufMetadata& metadata() const { return header_.metadata; }
    const std::vector<GgufTensor>& tensors() const { return header_.tensors; }
    const GgufTensor* find(std::string_view name) const;
    uint64_t size_bytes() const { return file_->size(); }

 private:
    friend class GgufCheckpoint;  // numbers the tensors' file_index
    std::shared_ptr<io::MappedFile> file_;
    GgufHeader header_;
    std::map<std::string, size_t, std::less<>> index_;
};

// A model's GGUF: one file, or every file of a split set (`split.count` > 1: NAME-00001-of-0000N.gguf
// … NAME-0000N-of-0000N.gguf, each with its `split.no`; the metadata lives in the first). Opening the
// first file (or a folder holding exactly one .gguf or one first split) opens them all; tensors are
// looked up across them, and a name in two files is an error.
class GgufCheckpoint {
 public:
    static Expected<std::shared_ptr<GgufCheckpoint>> open(const std::string& path);

    const std::vector<std::shared_ptr<GgufFile>>& files() const { return files_; }
    const GgufMetadata& metadata() const { return files_.front()->metadata(); }
    const GgufTensor* find(std::string_view name) const;
    // Every tensor, file by file in file order.
    std::vector<const GgufTensor*> tensors() const;
    size_t size() const { return index_.size(); }
    uint64_t total_bytes() const;

 private:
    std::vector<std::shared_ptr<GgufFile>> files_;
    std::map<std::string, const GgufTensor*, std::less<>> index_;
};

// Whether `path` names a GGUF model: a .gguf file, or a folder that holds .gguf files and no
// config.json (GgufCheckpoint::open then picks the file). Nothing is parsed.
bool is_gguf_model_path(const std::string& path);

// "NAME-00002-of-00005.gguf" for split `no` (0-based) of `count`, given NAME (llama.cpp's
// llama_split_path format).
std::string gguf_split_path(const std::string& prefix, int no, int count);

}  // namespace sluice::format
