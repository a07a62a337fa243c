#include "format/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace sluice::format {

namespace {

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {GgmlType::kF32, "f32", 1, 4},
    {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},
    {GgmlType::kQ4_1, "q4_1", 32, 20},
    {GgmlType::kQ5_0, "q5_0", 32, 22},
    {GgmlType::kQ5_1, "q5_1", 32, 24},
    {GgmlType::kQ8_0, "q8_0", 32, 34},
    {GgmlType::kQ8_1, "q8_1", 32, 36},
    {GgmlType::kQ2_K, "q2_K", 256, 84},
    {GgmlType::kQ3_K, "q3_K", 256, 110},
    {GgmlType::kQ4_K, "q4_K", 256, 144},
    {GgmlType::kQ5_K, "q5_K", 256, 176},
    {GgmlType::kQ6_K, "q6_K", 256, 210},
    {GgmlType::kQ8_K, "q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66},
    {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98},
    {GgmlType::kIQ1_S, "iq1_s", 256, 50},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},
    {GgmlType::kIQ3_S, "iq3_s", 256, 110},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
    {GgmlType::kI8, "i8", 1, 1},
    {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},
    {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},
    {GgmlType::kIQ1_M, "iq1_m", 256, 56},
    {GgmlType::kBF16, "bf16", 1, 2},
    {GgmlType::kTQ1_0, "tq1_0", 256, 54},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},
    {GgmlType::kMXFP4, "mxfp4", 32, 17},
    {GgmlType::kNVFP4, "nvfp4", 64, 36},
    {GgmlType::kQ1_0, "q1_0", 128, 18},
    {GgmlType::kQ2_0, "q2_0", 64, 18},
};

// Longest key or tensor name accepted (ggml itself caps tensor names at 63 bytes): keeps error
// messages, which quote names, a sane size.
constexpr uint64_t kMaxNameBytes = 64 * 1024;
// A numel beyond this is no real tensor; keeps every size computation below 2^64.
constexpr uint64_t kMaxNumel = uint64_t{1} << 62;

Status corrupt(const std::string& file, const std::string& what) {
    return error(ErrorCode::kCorrupt, "[gguf] " + file + ": " + what);
}

bool known_value_type(uint32_t t) {
    return t <= static_cast<uint32_t>(GgufValueType::kF64);
}

// Bytes of a scalar of `type` (0 for strings and arrays).
uint64_t scalar_bytes(GgufValueType type) {
    switch (type) {
        case GgufValueType::kU8:
        case GgufValueType::kI8:
        case GgufValueType::kBool: return 1;
        case GgufValueType::kU16:
        case GgufValueType::kI16: return 2;
        case GgufValueType::kU32:
        case GgufValueType::kI32:
        case GgufValueType::kF32: return 4;
        case GgufValueType::kU64:
        case GgufValueType::kI64:
        case GgufValueType::kF64: return 8;
        case GgufValueType::kString:
        case GgufValueType::kArray: return 0;
    }
    return 0;
}

// The fewest bytes a value of `type` takes in the file: what a count is checked against.
uint64_t min_encoded_bytes(GgufValueType type) {
    if (type == GgufValueType::kString) return 8;  // the length
    if (type == GgufValueType::kArray) return 12;  // element type + count
    return scalar_bytes(type);
}

bool is_integer(GgufValueType t) {
    switch (t) {
        case GgufValueType::kU8:
        case GgufValueType::kI8:
        case GgufValueType::kU16:
        case GgufValueType::kI16:
        case GgufValueType::kU32:
        case GgufValueType::kI32:
        case GgufValueType::kU64:
        case GgufValueType::kI64: return true;
        default: return false;
    }
}

bool is_signed(GgufValueType t) {
    return t == GgufValueType::kI8 || t == GgufValueType::kI16 || t == GgufValueType::kI32 ||
           t == GgufValueType::kI64;
}

// Sign-extends the low `bytes` bytes of `bits`.
int64_t sign_extend(uint64_t bits, uint64_t bytes) {
    if (bytes >= 8) return static_cast<int64_t>(bits);
    const unsigned shift = static_cast<unsigned>(64 - 8 * bytes);
    return static_cast<int64_t>(bits << shift) >> shift;
}

uint64_t load_le(const uint8_t* p, uint64_t bytes) {
    uint64_t v = 0;
    std::memcpy(&v, p, bytes);  // little-endian on every target sluice supports
    return v;
}

// Reads the header front to back. Every read first checks that its bytes are there, and says
// which limit it hit: the end of the file, the end of the bytes given (a prefix), or
// kMaxGgufHeaderBytes.
class Cursor {
 public:
    Cursor(std::span<const uint8_t> bytes, uint64_t file_size, const std::string& file)
        : bytes_(bytes),
          file_size_(file_size),
          end_(std::min<uint64_t>({bytes.size(), file_size, kMaxGgufHeaderBytes})),
          file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return end_ - pos_; }

    Status need(uint64_t n, const std::string& what) const {
        if (n <= remaining()) return Status::ok();
        const std::string at = " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_);
        if (n > file_size_ - pos_) {
            return corrupt(
                file_, "truncated: " + what + at + ", but the file ends at " + std::to_string(file_size_));
        }
        if (n > kMaxGgufHeaderBytes - pos_) {
            return corrupt(file_, what + at + ": the header exceeds the " +
                                      std::to_string(kMaxGgufHeaderBytes) + "-byte limit");
        }
        return corrupt(file_, what + at + ", but only the first " + std::to_string(bytes_.size()) +
                                  " bytes of the file were given");
    }
    // Callers check need() first.
    uint64_t take(uint64_t n) {
        const uint64_t v = load_le(bytes_.data() + pos_, n);
        pos_ += n;
        return v;
    }
    std::string take_string(uint64_t n) {
        std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
        pos_ += n;
        return s;
    }

    // Fails unless `count` items of at least `min_bytes` each fit before the end of the file (or
    // the header limit): a count that cannot be there fails before anything is allocated for it.
    // `what` names the count. (Against the file, not the bytes given: a prefix that ends inside the
    // metadata fails on the read that runs out, saying so.)
    Status check_count(uint64_t count, uint64_t min_bytes, const std::string& what) const {
        const uint64_t limit = std::min(file_size_, kMaxGgufHeaderBytes);
        const uint64_t room = limit > pos_ ? limit - pos_ : 0;
        if (count <= room / min_bytes) return Status::ok();
        const std::string end = limit == file_size_
                                    ? "the end of the file"
                                    : "the " + std::to_string(kMaxGgufHeaderBytes) + "-byte header limit";
        return corrupt(file_, what + " needs at least " + std::to_string(min_bytes) + " bytes each, but " +
                                  std::to_string(room) + " bytes remain before " + end);
    }

    // A string of at most remaining() bytes, or false with the cursor unmoved (then string() with
    // the same limit gives the error).
    bool try_string(std::string* out) {
        if (remaining() < 8) return false;
        const uint64_t n = load_le(bytes_.data() + pos_, 8);
        if (n > remaining() - 8) return false;
        pos_ += 8;
        *out = take_string(n);
        return true;
    }

    Expected<uint64_t> u64(const std::string& what) {
        SLUICE_RETURN_IF_ERROR(need(8, what));
        return take(8);
    }
    Expected<uint32_t> u32(const std::string& what) {
        SLUICE_RETURN_IF_ERROR(need(4, what));
        return static_cast<uint32_t>(take(4));
    }
    // A GGUF string: u64 length, then the bytes (not NUL-terminated). `max_bytes` bounds names.
    Expected<std::string> string(const std::string& what,
                                 uint64_t max_bytes = std::numeric_limits<uint64_t>::max()) {
        SLUICE_ASSIGN_OR_RETURN(uint64_t n, u64(what + " length"));
        if (n > max_bytes) {
            return corrupt(file_, what + " length " + std::to_string(n) + " exceeds the " +
                                      std::to_string(max_bytes) + "-byte limit");
        }
        SLUICE_RETURN_IF_ERROR(need(n, what + " of length " + std::to_string(n)));
        return take_string(n);
    }

    const std::string& file() const { return file_; }

 private:
    std::span<const uint8_t> bytes_;
    uint64_t file_size_;
    uint64_t end_;
    uint64_t pos_ = 0;
    const std::string& file_;
};

Expected<GgufValue> read_value(Cursor& c, GgufValueType type, int depth, const std::string& where);

Expected<GgufValue> read_array(Cursor& c, int depth, const std::string& where) {
    if (depth > kMaxGgufArrayDepth) {
        return corrupt(c.file(), where + ": arrays nested deeper than " + std::to_string(kMaxGgufArrayDepth));
    }
    SLUICE_ASSIGN_OR_RETURN(uint32_t et, c.u32(where + " array element type"));
    if (!known_value_type(et))
        return corrupt(c.file(), where + ": unknown array element type " + std::to_string(et));
    const auto elem = static_cast<GgufValueType>(et);
    SLUICE_ASSIGN_OR_RETURN(uint64_t count, c.u64(where + " array length"));
    const uint64_t min_bytes = min_encoded_bytes(elem);
    SLUICE_RETURN_IF_ERROR(c.check_count(
        count, min_bytes, where + ": array of " + std::to_string(count) + " " + gguf_value_type_name(elem)));
    if (elem == GgufValueType::kString) {
        std::vector<std::string> items;
        for (uint64_t i = 0; i < count; ++i) {
            // The message is built only when the read fails (vocabularies hold ~10^5 strings).
            std::string s;
            if (!c.try_string(&s)) return c.string(where + " element " + std::to_string(i)).status();
            items.push_back(std::move(s));
        }
        return GgufValue::string_array(std::move(items));
    }
    if (elem == GgufValueType::kArray) {
        std::vector<GgufValue> items;
        for (uint64_t i = 0; i < count; ++i) {
            SLUICE_ASSIGN_OR_RETURN(GgufValue v,
                                    read_array(c, depth + 1, where + "[" + std::to_string(i) + "]"));
            items.push_back(std::move(v));
        }
        return GgufValue::array_array(std::move(items));
    }
    const uint64_t n = count * min_bytes;  // no overflow: check_count bounded it by the file
    SLUICE_RETURN_IF_ERROR(c.need(n, where + " array data"));
    return GgufValue::scalar_array(elem, count, c.take_string(n));
}

Expected<GgufValue> read_value(Cursor& c, GgufValueType type, int depth, const std::string& where) {
    if (type == GgufValueType::kString) {
        SLUICE_ASSIGN_OR_RETURN(std::string s, c.string(where + " string"));
        return GgufValue::string(std::move(s));
    }
    if (type == GgufValueType::kArray) return read_array(c, depth + 1, where);
    const uint64_t n = scalar_bytes(type);
    SLUICE_RETURN_IF_ERROR(c.need(n, where + " value"));
    return GgufValue::scalar(type, c.take(n));
}

std::string dims_text(const std::vector<int64_t>& dims) {
    std::string s = "{";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
    return s + "}";
}

Status read_metadata(Cursor& c, uint64_t n_kv, GgufMetadata& out) {
    for (uint64_t i = 0; i < n_kv; ++i) {
        const std::string nth = "key " + std::to_string(i);
        SLUICE_ASSIGN_OR_RETURN(std::string key, c.string(nth, kMaxNameBytes));
        if (key.empty()) return corrupt(c.file(), nth + " is empty");
        const std::string where = "key '" + key + "'";
        if (out.has(key)) return corrupt(c.file(), where + " appears twice");
        SLUICE_ASSIGN_OR_RETURN(uint32_t type, c.u32(where + " value type"));
        if (!known_value_type(type))
            return corrupt(c.file(), where + " has unknown value type " + std::to_string(type));
        SLUICE_ASSIGN_OR_RETURN(GgufValue value, read_value(c, static_cast<GgufValueType>(type), 0, where));
        out.add(std::move(key), std::move(value));
    }
    return Status::ok();
}

Expected<uint64_t> read_alignment(const GgufMetadata& md, const std::string& file) {
    const GgufValue* v = md.find("general.alignment");
    if (v == nullptr) return uint64_t{32};
    if (v->type() != GgufValueType::kU32)
        return corrupt(file, "key 'general.alignment': expected U32, got " + v->describe());
    const uint64_t a = *v->to_uint();
    if (a == 0 || !std::has_single_bit(a))
        return corrupt(file, "key 'general.alignment': " + std::to_string(a) + " is not a power of two");
    return a;
}

// One tensor info: its name, dims, type and offset, checked for everything that does not depend
// on the other tensors or on where the data section starts.
Expected<GgufTensor> read_tensor_info(Cursor& c, uint64_t i) {
    const std::string nth = "tensor " + std::to_string(i);
    GgufTensor t;
    SLUICE_ASSIGN_OR_RETURN(t.name, c.string(nth + " name", kMaxNameBytes));
    if (t.name.empty()) return corrupt(c.file(), nth + " has an empty name");
    const std::string where = "tensor '" + t.name + "'";
    SLUICE_ASSIGN_OR_RETURN(uint32_t n_dims, c.u32(where + " n_dims"));
    if (n_dims > 4) {
        return corrupt(c.file(),
                       where + " has " + std::to_string(n_dims) + " dims, ggml tensors have at most 4");
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        SLUICE_ASSIGN_OR_RETURN(uint64_t raw, c.u64(where + " dim " + std::to_string(d)));
        const auto v = static_cast<int64_t>(raw);
        if (v < 0)
            return corrupt(c.file(),
                           where + " dim " + std::to_string(d) + " is negative (" + std::to_string(v) + ")");
        t.dims.push_back(v);
    }
    // The product of the non-zero dims is bounded too: a zero dim makes numel 0, but rows() (every
    // dim but the first) must not overflow either.
    uint64_t nonzero = 1;
    for (int64_t v : t.dims) {
        if (v == 0) continue;
        if (nonzero > kMaxNumel / static_cast<uint64_t>(v))
            return corrupt(c.file(), where + " dims " + dims_text(t.dims) + ": the element count overflows");
        nonzero *= static_cast<uint64_t>(v);
    }
    for (int64_t v : t.dims) numel *= static_cast<uint64_t>(v);
    SLUICE_ASSIGN_OR_RETURN(uint32_t type, c.u32(where + " type"));
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (info == nullptr) return corrupt(c.file(), where + " has unknown ggml type " + std::to_string(type));
    t.type = info->type;
    if (static_cast<uint64_t>(t.cols()) % info->block_elems != 0) {
        return corrupt(c.file(), where + " dims " + dims_text(t.dims) + ": the row of " +
                                     std::to_string(t.cols()) + " elements is not a whole number of " +
                                     info->name + " blocks of " + std::to_string(info->block_elems));
    }
    // blocks · block_bytes can exceed 2^64 even with numel ≤ 2^62 (F64: 8 bytes per element).
    const uint64_t blocks = numel / info->block_elems;
    if (blocks > kMaxNumel / info->block_bytes)
        return corrupt(c.file(), where + " dims " + dims_text(t.dims) + ": the byte size overflows");
    t.size_bytes = blocks * info->block_bytes;
    SLUICE_ASSIGN_OR_RETURN(t.offset, c.u64(where + " offset"));
    return t;
}

// Offsets aligned and inside the file, no two tensors overlapping.
Status check_tensor_data(const GgufHeader& h, uint64_t file_size, const std::string& file) {
    if (!h.tensors.empty() && h.data_start > file_size) {
        return corrupt(file, "the data section starts at " + std::to_string(h.data_start) +
                                 ", past the end of the " + std::to_string(file_size) + "-byte file");
    }
    const uint64_t data_size = file_size - std::min(file_size, h.data_start);
    for (const GgufTensor& t : h.tensors) {
        const std::string where = "tensor '" + t.name + "'";
        if (t.offset % h.alignment != 0) {
            return corrupt(file, where + " offset " + std::to_string(t.offset) +
                                     " is not a multiple of the alignment " + std::to_string(h.alignment));
        }
        if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
            return corrupt(file, where + " " + describe(t) + ": its " + std::to_string(t.size_bytes) +
                                     " bytes at data offset " + std::to_string(t.offset) +
                                     " run past the end of the data section (" + std::to_string(data_size) +
                                     " bytes from offset " + std::to_string(h.data_start) + ")");
        }
    }
    std::vector<const GgufTensor*> by_offset;
    for (const GgufTensor& t : h.tensors) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensor& prev = *by_offset[i - 1];
        const GgufTensor& cur = *by_offset[i];
        if (prev.size_bytes > 0 && cur.size_bytes > 0 && cur.offset < prev.offset + prev.size_bytes)
            return corrupt(file, "tensors '" + prev.name + "' and '" + cur.name + "' overlap");
    }
    return Status::ok();
}

}  // namespace

// ---- GgufValue --------------------------------------------------------------------------------

const char* gguf_value_type_name(GgufValueType type) {
    switch (type) {
        case GgufValueType::kU8: return "U8";
        case GgufValueType::kI8: return "I8";
        case GgufValueType::kU16: return "U16";
        case GgufValueType::kI16: return "I16";
        case GgufValueType::kU32: return "U32";
        case GgufValueType::kI32: return "I32";
        case GgufValueType::kF32: return "F32";
        case GgufValueType::kBool: return "BOOL";
        case GgufValueType::kString: return "STRING";
        case GgufValueType::kArray: return "ARRAY";
        case GgufValueType::kU64: return "U64";
        case GgufValueType::kI64: return "I64";
        case GgufValueType::kF64: return "F64";
    }
    return "?";
}

GgufValue GgufValue::scalar(GgufValueType type, uint64_t raw_bits) {
    GgufValue v;
    v.type_ = type;
    v.bits_ = raw_bits;
    return v;
}

GgufValue GgufValue::string(std::string s) {
    GgufValue v;
    v.type_ = GgufValueType::kString;
    v.raw_ = std::move(s);
    return v;
}

GgufValue GgufValue::scalar_array(GgufValueType element_type, uint64_t count, std::string raw) {
    GgufValue v;
    v.type_ = GgufValueType::kArray;
    v.element_type_ = element_type;
    v.count_ = count;
    v.raw_ = std::move(raw);
    return v;
}

GgufValue GgufValue::string_array(std::vector<std::string> items) {
    GgufValue v;
    v.type_ = GgufValueType::kArray;
    v.element_type_ = GgufValueType::kString;
    v.count_ = items.size();
    v.strings_ = std::move(items);
    return v;
}

GgufValue GgufValue::array_array(std::vector<GgufValue> items) {
    GgufValue v;
    v.type_ = GgufValueType::kArray;
    v.element_type_ = GgufValueType::kArray;
    v.count_ = items.size();
    v.arrays_ = std::move(items);
    return v;
}

std::string GgufValue::describe() const {
    if (!is_array()) return gguf_value_type_name(type_);
    return std::string("ARRAY[") + gguf_value_type_name(element_type_) + ", " + std::to_string(count_) + "]";
}

std::optional<uint64_t> GgufValue::to_uint() const {
    if (!is_integer(type_)) return std::nullopt;
    if (is_signed(type_)) {
        const int64_t v = sign_extend(bits_, scalar_bytes(type_));
        if (v < 0) return std::nullopt;
        return static_cast<uint64_t>(v);
    }
    return bits_;
}

std::optional<int64_t> GgufValue::to_int() const {
    if (!is_integer(type_)) return std::nullopt;
    if (is_signed(type_)) return sign_extend(bits_, scalar_bytes(type_));
    if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(bits_);
}

std::optional<double> GgufValue::to_float() const {
    if (type_ == GgufValueType::kF32) {
        float f;
        const auto b = static_cast<uint32_t>(bits_);
        std::memcpy(&f, &b, 4);
        return f;
    }
    if (type_ == GgufValueType::kF64) {
        double d;
        std::memcpy(&d, &bits_, 8);
        return d;
    }
    return std::nullopt;
}

std::optional<bool> GgufValue::to_bool() const {
    if (type_ != GgufValueType::kBool) return std::nullopt;
    return bits_ != 0;
}

std::optional<std::string_view> GgufValue::to_string() const {
    if (type_ != GgufValueType::kString) return std::nullopt;
    return std::string_view(raw_);
}

GgufValue GgufValue::at(uint64_t i) const {
    if (!is_array() || i >= count_) return GgufValue();
    if (element_type_ == GgufValueType::kString) return string(strings_[i]);
    if (element_type_ == GgufValueType::kArray) return arrays_[i];
    const uint64_t n = scalar_bytes(element_type_);
    return scalar(element_type_, load_le(reinterpret_cast<const uint8_t*>(raw_.data()) + i * n, n));
}

std::optional<std::vector<int64_t>> GgufValue::to_ints() const {
    if (!is_array() || !is_integer(element_type_)) return std::nullopt;
    std::vector<int64_t> out;
    out.reserve(count_);
    for (uint64_t i = 0; i < count_; ++i) {
        auto v = at(i).to_int();
        if (!v) return std::nullopt;
        out.push_back(*v);
    }
    return out;
}

std::optional<std::vector<double>> GgufValue::to_floats() const {
    if (!is_array() || (element_type_ != GgufValueType::kF32 && element_type_ != GgufValueType::kF64))
        return std::nullopt;
    std::vector<double> out;
    out.reserve(count_);
    for (uint64_t i = 0; i < count_; ++i) out.push_back(*at(i).to_float());
    return out;
}

std::optional<std::vector<bool>> GgufValue::to_bools() const {
    if (!is_array() || element_type_ != GgufValueType::kBool) return std::nullopt;
    std::vector<bool> out;
    out.reserve(count_);
    for (uint64_t i = 0; i < count_; ++i) out.push_back(raw_[i] != 0);
    return out;
}

// ---- GgufMetadata -----------------------------------------------------------------------------

const GgufValue* GgufMetadata::find(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

bool GgufMetadata::add(std::string key, GgufValue value) {
    if (index_.count(key)) return false;
    index_.emplace(key, entries_.size());
    entries_.emplace_back(std::move(key), std::move(value));
    return true;
}

Status GgufMetadata::type_error(std::string_view key, const char* expected, const GgufValue& got) const {
    return corrupt(file_name_,
                   "key '" + std::string(key) + "': expected " + expected + ", got " + got.describe());
}

Expected<const GgufValue*> GgufMetadata::lookup(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr)
        return error(ErrorCode::kNotFound,
                     "[gguf] " + file_name_ + ": key '" + std::string(key) + "' not found");
    return v;
}

Expected<uint64_t> GgufMetadata::get_uint(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_uint()) return *x;
    return type_error(key, "a non-negative integer", *v);
}

Expected<int64_t> GgufMetadata::get_int(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_int()) return *x;
    return type_error(key, "an integer", *v);
}

Expected<double> GgufMetadata::get_float(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_float()) return *x;
    return type_error(key, "F32 or F64", *v);
}

Expected<bool> GgufMetadata::get_bool(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_bool()) return *x;
    return type_error(key, "BOOL", *v);
}

Expected<std::string> GgufMetadata::get_string(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_string()) return std::string(*x);
    return type_error(key, "STRING", *v);
}

Expected<std::vector<int64_t>> GgufMetadata::get_ints(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_ints()) return std::move(*x);
    return type_error(key, "an array of integers", *v);
}

Expected<std::vector<double>> GgufMetadata::get_floats(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (auto x = v->to_floats()) return std::move(*x);
    return type_error(key, "an array of F32 or F64", *v);
}

Expected<std::vector<std::string>> GgufMetadata::get_strings(std::string_view key) const {
    SLUICE_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
    if (v->is_array() && v->element_type() == GgufValueType::kString) return v->strings();
    return type_error(key, "an array of STRING", *v);
}

// ---- tensors ----------------------------------------------------------------------------------

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
    for (const auto& e : kGgmlTypes)
        if (static_cast<uint32_t>(e.type) == type) return &e;
    return nullptr;
}

const GgmlTypeInfo* ggml_type_by_name(std::string_view name) {
    for (const auto& e : kGgmlTypes)
        if (name == e.name) return &e;
    return nullptr;
}

const char* ggml_type_name(GgmlType type) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
    return info ? info->name : "?";
}

std::vector<int64_t> GgufTensor::shape() const {
    return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

int64_t GgufTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

int64_t GgufTensor::rows() const {
    int64_t n = 1;
    for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
    return n;
}

uint64_t GgufTensor::row_bytes() const {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
    return static_cast<uint64_t>(cols()) / info->block_elems * info->block_bytes;
}

std::string describe(const GgufTensor& tensor) {
    std::string s = std::string(ggml_type_name(tensor.type)) + " [";
    const auto shape = tensor.shape();
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// ---- the header -------------------------------------------------------------------------------

Expected<GgufHeader> parse_gguf_header(std::span<const uint8_t> bytes, const std::string& file_name) {
    return parse_gguf_header(bytes, bytes.size(), file_name);
}

Expected<GgufHeader> parse_gguf_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                       const std::string& file_name) {
    if (bytes.size() > file_size) return corrupt(file_name, "more bytes than the file size");
    const bool whole_file = bytes.size() == file_size;
    Cursor c(bytes, file_size, file_name);

    SLUICE_RETURN_IF_ERROR(c.need(4, "the magic"));
    if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
        std::string magic;
        for (int i = 0; i < 4; ++i) {
            const char ch = static_cast<char>(bytes[i]);
            magic += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
        }
        return corrupt(file_name, "not a GGUF file: magic '" + magic + "', expected 'GGUF'");
    }
    c.take(4);
    GgufHeader h;
    h.metadata = GgufMetadata(file_name);
    SLUICE_ASSIGN_OR_RETURN(h.version, c.u32("the version"));
    if ((h.version & 0xFFFF) == 0 && h.version != 0) {
        return corrupt(file_name, "version " + std::to_string(h.version) +
                                      " looks byte-swapped: a big-endian GGUF, which sluice does not read");
    }
    if (h.version == 1)
        return corrupt(file_name,
                       "GGUF version 1 is not supported (versions 2 and 3 are; re-convert the model)");
    if (h.version != 2 && h.version != 3) {
        return corrupt(file_name,
                       "unsupported GGUF version " + std::to_string(h.version) + " (2 and 3 are read)");
    }
    SLUICE_ASSIGN_OR_RETURN(uint64_t n_tensors, c.u64("the tensor count"));
    SLUICE_ASSIGN_OR_RETURN(uint64_t n_kv, c.u64("the metadata count"));
    // The fewest bytes an entry takes: a key of one byte, its type, a one-byte value (14); a tensor
    // info of a one-byte name, n_dims, type and offset (25).
    SLUICE_RETURN_IF_ERROR(c.check_count(n_kv, 14, "metadata count " + std::to_string(n_kv)));
    SLUICE_RETURN_IF_ERROR(c.check_count(n_tensors, 25, "tensor count " + std::to_string(n_tensors)));
    SLUICE_RETURN_IF_ERROR(read_metadata(c, n_kv, h.metadata));
    SLUICE_ASSIGN_OR_RETURN(h.alignment, read_alignment(h.metadata, file_name));

    SLUICE_RETURN_IF_ERROR(c.check_count(n_tensors, 25, "tensor count " + std::to_string(n_tensors)));
    std::map<std::string, size_t, std::less<>> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        SLUICE_ASSIGN_OR_RETURN(GgufTensor t, read_tensor_info(c, i));
        if (!names.emplace(t.name, i).second)
            return corrupt(file_name, "tensor '" + t.name + "' appears twice");
        h.tensors.push_back(std::move(t));
    }
    // pos ≤ kMaxGgufHeaderBytes and alignment < 2^32: no overflow.
    h.data_start = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
    SLUICE_RETURN_IF_ERROR(check_tensor_data(h, file_size, file_name));
    for (GgufTensor& t : h.tensors) {
        t.file_offset = h.data_start + t.offset;
        t.data = whole_file ? bytes.data() + t.file_offset : nullptr;
    }
    return h;
}

// ---- files ------------------------------------------------------------------------------------

Expected<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(auto mapped, io::MappedFile::open(path));
    SLUICE_ASSIGN_OR_RETURN(auto header, parse_gguf_header(mapped->bytes(), path));
    auto file = std::make_shared<GgufFile>();
    file->file_ = std::move(mapped);
    file->header_ = std::move(header);
    for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->index_[file->header_.tensors[i].name] = i;
    return file;
}

const GgufTensor* GgufFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::string gguf_split_path(const std::string& prefix, int no, int count) {
    char suffix[48];
    std::snprintf(suffix, sizeof(suffix), "-%05d-of-%05d.gguf", no + 1, count);
    return prefix + suffix;
}

namespace {

// The .gguf to open in a folder: its only .gguf file, or its only first split.
Expected<std::string> gguf_in_folder(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> all, first_splits;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (entry.path().extension() != ".gguf") continue;
        all.push_back(entry.path().string());
        if (name.find("-00001-of-") != std::string::npos) first_splits.push_back(entry.path().string());
    }
    if (all.size() == 1) return all.front();
    if (first_splits.size() == 1) return first_splits.front();
    if (all.empty()) return error(ErrorCode::kNotFound, "[gguf] no .gguf file in '" + dir + "'");
    return error(ErrorCode::kInvalidArgument, "[gguf] '" + dir + "' holds " + std::to_string(all.size()) +
                                                  " .gguf files and " + std::to_string(first_splits.size()) +
                                                  " first splits: name the file to open");
}

// split.no / split.count of a file, or nullopt when it has none. Written as U16 by llama.cpp's and
// gguf-py's writers; any unsigned integer below 2^16 is taken.
Expected<std::optional<uint64_t>> split_key(const GgufFile& f, const char* key) {
    if (!f.metadata().has(key)) return std::optional<uint64_t>();
    SLUICE_ASSIGN_OR_RETURN(uint64_t v, f.metadata().get_uint(key));
    if (v > 0xFFFF)
        return corrupt(f.path(), std::string("key '") + key + "': " + std::to_string(v) + " exceeds 65535");
    return std::optional<uint64_t>(v);
}

}  // namespace

bool is_gguf_model_path(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return fs::path(path).extension() == ".gguf";
    if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return false;
    for (const auto& entry : fs::directory_iterator(path, ec))
        if (entry.path().extension() == ".gguf") return true;
    return false;
}

Expected<std::shared_ptr<GgufCheckpoint>> GgufCheckpoint::open(const std::string& path) {
    std::string first_path = path;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(first_path, gguf_in_folder(path));
    }
    SLUICE_ASSIGN_OR_RETURN(auto first, GgufFile::open(first_path));
    auto ckpt = std::make_shared<GgufCheckpoint>();
    ckpt->files_.push_back(first);

    SLUICE_ASSIGN_OR_RETURN(auto count, split_key(*first, "split.count"));
    SLUICE_ASSIGN_OR_RETURN(auto no, split_key(*first, "split.no"));
    const uint64_t n_files = count.value_or(1);
    if (n_files == 0) return corrupt(first_path, "key 'split.count' is 0");
    if (no.value_or(0) != 0) {
        const int n = static_cast<int>(*no), total = static_cast<int>(n_files);
        const std::string suffix = gguf_split_path("", n, total);
        const bool named = first_path.size() > suffix.size() &&
                           first_path.compare(first_path.size() - suffix.size(), suffix.size(), suffix) == 0;
        const std::string first_name =
            named ? gguf_split_path(first_path.substr(0, first_path.size() - suffix.size()), 0, total)
                  : gguf_split_path("NAME", 0, total);
        return error(ErrorCode::kInvalidArgument, "[gguf] " + first_path + " is split " +
                                                      std::to_string(n + 1) + " of " + std::to_string(total) +
                                                      ": open the first, '" + first_name + "'");
    }
    if (n_files > 1) {
        const std::string suffix = gguf_split_path("", 0, static_cast<int>(n_files));
        if (first_path.size() <= suffix.size() ||
            first_path.compare(first_path.size() - suffix.size(), suffix.size(), suffix) != 0) {
            return corrupt(first_path, "key 'split.count' is " + std::to_string(n_files) +
                                           " but the file name does not end in '" + suffix + "'");
        }
        const std::string prefix = first_path.substr(0, first_path.size() - suffix.size());
        for (uint64_t i = 1; i < n_files; ++i) {
            const std::string split_path =
                gguf_split_path(prefix, static_cast<int>(i), static_cast<int>(n_files));
            auto split = GgufFile::open(split_path);
            if (!split.has_value()) {
                return split.status().with_context("[gguf] split " + std::to_string(i + 1) + " of " +
                                                   std::to_string(n_files) + " of " + first_path);
            }
            SLUICE_ASSIGN_OR_RETURN(auto split_no, split_key(**split, "split.no"));
            SLUICE_ASSIGN_OR_RETURN(auto split_count, split_key(**split, "split.count"));
            if (split_no != std::optional<uint64_t>(i)) {
                return corrupt(split_path,
                               "key 'split.no' is " +
                                   (split_no ? std::to_string(*split_no) : std::string("missing")) +
                                   ", expected " + std::to_string(i));
            }
            if (split_count && *split_count != n_files) {
                return corrupt(split_path, "key 'split.count' is " + std::to_string(*split_count) +
                                               ", the first file says " + std::to_string(n_files));
            }
            ckpt->files_.push_back(std::move(*split));
        }
    }
    for (size_t f = 0; f < ckpt->files_.size(); ++f) {
        auto& file = *ckpt->files_[f];
        for (GgufTensor& t : file.header_.tensors) {
            t.file_index = static_cast<uint32_t>(f);
            if (!ckpt->index_.emplace(t.name, &t).second)
                return corrupt(file.path(), "tensor '" + t.name + "' is also in an earlier split");
        }
    }
    if (n_files > 1 && first->metadata().has("split.tensors.count")) {
        SLUICE_ASSIGN_OR_RETURN(uint64_t expected, first->metadata().get_uint("split.tensors.count"));
        if (expected != ckpt->index_.size()) {
            return corrupt(first_path, "key 'split.tensors.count' is " + std::to_string(expected) +
                                           " but the " + std::to_string(n_files) + " files hold " +
                                           std::to_string(ckpt->index_.size()) + " tensors");
        }
    }
    return ckpt;
}

const GgufTensor* GgufCheckpoint::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

std::vector<const GgufTensor*> GgufCheckpoint::tensors() const {
    std::vector<const GgufTensor*> out;
    out.reserve(index_.size());
    for (const auto& f : files_)
        for (const GgufTensor& t : f->tensors()) out.push_back(&t);
    return out;
}

uint64_t GgufCheckpoint::total_bytes() const {
    uint64_t total = 0;
    for (const auto& [name, t] : index_) total += t->size_bytes;
    return total;
}

}  // namespace sluice::format
