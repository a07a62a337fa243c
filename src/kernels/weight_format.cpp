// The weight-format registry's entries (weight_format.h): bf16/f16/f32, MLX affine 4/8-bit, and ggml's
// block formats as GGUF files hold them.
#include "kernels/weight_format.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/assert.h"
#include "kernels/ggml_tiles.h"

namespace sluice::kernels {
namespace {

uint16_t load_u16(const void* base, int64_t index) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(base) + index * 2, 2);
    return v;
}

float load_scale(const void* base, ScaleType type, int64_t index) {
    switch (type) {
        case ScaleType::kF32: {
            float v;
            std::memcpy(&v, static_cast<const char*>(base) + index * 4, 4);
            return v;
        }
        case ScaleType::kF16: return f16_to_f32(load_u16(base, index));
        case ScaleType::kBF16: return bf16_to_f32(load_u16(base, index));
    }
    return 0.0f;
}

float f32_element(const WeightView& w, int64_t r, int64_t i) {
    float v;
    std::memcpy(&v, static_cast<const char*>(w.data) + (r * w.cols + i) * 4, 4);
    return v;
}
float f16_element(const WeightView& w, int64_t r, int64_t i) {
    return f16_to_f32(load_u16(w.data, r * w.cols + i));
}
float bf16_element(const WeightView& w, int64_t r, int64_t i) {
    return bf16_to_f32(load_u16(w.data, r * w.cols + i));
}

// MLX affine (models.md §5): code q of element i in word i / per_word, LSB first; w = s·q + b with
// the scale and bias of group i / group_size.
template <int kBits>
float mlx_affine_element(const WeightView& w, int64_t r, int64_t i) {
    constexpr int per_word = 32 / kBits;
    const int64_t words_per_row = w.cols / per_word;
    uint32_t word;
    std::memcpy(&word, static_cast<const char*>(w.data) + (r * words_per_row + i / per_word) * 4, 4);
    const uint32_t code = (word >> (kBits * (i % per_word))) & ((1u << kBits) - 1u);
    const int64_t g = r * (w.cols / w.group_size) + i / w.group_size;
    return load_scale(w.scales, w.scale_type, g) * static_cast<float>(code) +
           load_scale(w.biases, w.scale_type, g);
}

// A ggml block format (ggml_quants.h): element i of row r is element i % block of its block, dequantized
// by the definition (reference::ggml_dequantize_row over that one block).
template <GgmlType T>
float ggml_element(const WeightView& w, int64_t r, int64_t i) {
    const GgmlFormat& f = ggml_format(T);
    float block[256];
    const auto* row =
        static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * ggml_row_bytes(f, w.cols);
    reference::ggml_dequantize_row(T, row + (i / f.block_elems) * f.block_bytes, f.block_elems, block);
    return block[i % f.block_elems];
}

// A row-tiled type (ggml_tiles.h): element i of row r by the definition, over row r's block of it put
// back in the natural layout.
template <GgmlType T>
float tiled_element(const WeightView& w, int64_t r, int64_t i) {
    const GgmlFormat& f = ggml_format(T);
    uint8_t blk[256];  // one block of any tiled type (Q6_K's 210 bytes at most)
    ggml_untile_block(w, r, i / f.block_elems, blk);
    float block[256];
    reference::ggml_dequantize_row(T, blk, f.block_elems, block);
    return block[i % f.block_elems];
}

// Every ggml block type has its int8-activation products on the CPU (cpu/ggml_int8*.cpp, every ISA).
template <GgmlType T>
constexpr WeightFormat ggml_entry(WeightType type, const char* name, const char* description, int block_elems,
                                  int block_bytes) {
    WeightFormat f{type, name, description, 0, 0, ggml_element<T>, false, true, true, true};
    f.block_elems = block_elems;
    f.block_bytes = block_bytes;
    f.ggml = T;
    return f;
}

// A row-tiled form of ggml type T (ggml_tiles.h): no CUDA kernels, tiles of kGgmlTileRows rows.
template <GgmlType T>
constexpr WeightFormat tiled_entry(WeightType type, const char* name, const char* description,
                                   int block_elems, int block_bytes) {
    WeightFormat f = ggml_entry<T>(type, name, description, block_elems, block_bytes);
    f.reference_element = tiled_element<T>;
    f.cuda_kernels = false;
    f.tile_rows = static_cast<int>(kGgmlTileRows);
    return f;
}

constexpr std::array<WeightFormat, 20> kFormats{{
    {WeightType::kF32, "F32", "32-bit float", 4, 0, f32_element, false, true, true},
    {WeightType::kF16, "F16", "IEEE half", 2, 0, f16_element, false, true, true},
    {WeightType::kBF16, "BF16", "bfloat16", 2, 0, bf16_element, false, true, true},
    {WeightType::kQ4, "Q4", "MLX affine 4-bit (8 codes per u32, per-group scale and bias)", 0, 4,
     mlx_affine_element<4>, true, true, true, true},
    {WeightType::kQ8, "Q8", "MLX affine 8-bit (4 codes per u32, per-group scale and bias)", 0, 8,
     mlx_affine_element<8>, true, true, true, true},
    ggml_entry<GgmlType::kQ4_0>(WeightType::kGgmlQ4_0, "Q4_0", "ggml 4-bit, blocks of 32 with an f16 scale",
                                32, 18),
    ggml_entry<GgmlType::kQ4_1>(WeightType::kGgmlQ4_1, "Q4_1",
                                "ggml 4-bit, blocks of 32 with f16 scale and min", 32, 20),
    ggml_entry<GgmlType::kQ5_0>(WeightType::kGgmlQ5_0, "Q5_0", "ggml 5-bit, blocks of 32 with an f16 scale",
                                32, 22),
    ggml_entry<GgmlType::kQ5_1>(WeightType::kGgmlQ5_1, "Q5_1",
                                "ggml 5-bit, blocks of 32 with f16 scale and min", 32, 24),
    ggml_entry<GgmlType::kQ8_0>(WeightType::kGgmlQ8_0, "Q8_0", "ggml 8-bit, blocks of 32 with an f16 scale",
                                32, 34),
    ggml_entry<GgmlType::kQ4_K>(WeightType::kGgmlQ4_K, "Q4_K", "ggml 4-bit k-quant, super-blocks of 256", 256,
                                144),
    ggml_entry<GgmlType::kQ5_K>(WeightType::kGgmlQ5_K, "Q5_K", "ggml 5-bit k-quant, super-blocks of 256", 256,
                                176),
    ggml_entry<GgmlType::kQ6_K>(WeightType::kGgmlQ6_K, "Q6_K", "ggml 6-bit k-quant, super-blocks of 256", 256,
                                210),
    ggml_entry<GgmlType::kIQ4_NL>(WeightType::kGgmlIQ4_NL, "IQ4_NL",
                                  "ggml 4-bit non-linear codebook, blocks of 32", 32, 18),
    ggml_entry<GgmlType::kIQ4_XS>(WeightType::kGgmlIQ4_XS, "IQ4_XS",
                                  "ggml 4-bit non-linear codebook, super-blocks of 256", 256, 136),
    ggml_entry<GgmlType::kMXFP4>(WeightType::kGgmlMXFP4, "MXFP4",
                                 "OCP MX FP4 (e2m1), blocks of 32 with an e8m0 scale", 32, 17),
    tiled_entry<GgmlType::kQ4_0>(WeightType::kGgmlQ4_0x16, "Q4_0x16",
                                 "ggml Q4_0 in tiles of 16 interleaved rows (the CPU's layout)", 32, 18),
    tiled_entry<GgmlType::kQ6_K>(WeightType::kGgmlQ6_Kx16, "Q6_Kx16",
                                 "ggml Q6_K in tiles of 16 interleaved rows (the CPU's layout)", 256, 210),
    tiled_entry<GgmlType::kQ8_0>(WeightType::kGgmlQ8_0x16, "Q8_0x16",
                                 "ggml Q8_0 in tiles of 16 interleaved rows (the CPU's layout)", 32, 34),
    tiled_entry<GgmlType::kMXFP4>(WeightType::kGgmlMXFP4x16, "MXFP4x16",
                                  "ggml MXFP4 in tiles of 16 interleaved rows (the CPU's layout)", 32, 17),
}};

}  // namespace

WeightView row_slice(const WeightView& w, int64_t row0, int64_t rows) {
    const WeightFormat& f = weight_format(w.type);
    WeightView v = w;
    v.rows = rows;
    v.data = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row0) * f.data_row_bytes(w.cols);
    if (f.quantized()) {
        const size_t half = f.aux_row_bytes(w.cols, w.group_size, w.scale_type) / 2;  // scales or biases
        v.scales = static_cast<const uint8_t*>(w.scales) + static_cast<size_t>(row0) * half;
        v.biases = static_cast<const uint8_t*>(w.biases) + static_cast<size_t>(row0) * half;
    }
    return v;
}

size_t WeightFormat::aux_row_bytes(int64_t cols, int32_t group_size, ScaleType scale_type) const {
    if (!quantized() || group_size <= 0) return 0;
    const size_t scale_bytes = scale_type == ScaleType::kF32 ? 4 : 2;
    return 2 * static_cast<size_t>(cols / group_size) * scale_bytes;
}

const char* WeightFormat::shape_error(int64_t cols, int32_t group_size) const {
    if (cols < 0) return "a negative column count";
    if (ggml_blocks())
        return cols % block_elems == 0 ? nullptr : "columns that are not a whole number of blocks";
    if (!quantized()) return nullptr;
    if (group_size <= 0) return "no group size";
    if (cols % group_size != 0) return "columns that are not a whole number of groups";
    if (group_size % codes_per_word() != 0) return "a group that is not a whole number of code words";
    return nullptr;
}

std::span<const WeightFormat> weight_formats() {
    return kFormats;
}

const WeightFormat& weight_format(WeightType type) {
    const auto i = static_cast<size_t>(type);
    SLUICE_ASSERT(i < kFormats.size() && kFormats[i].type == type);
    return kFormats[i];
}

const WeightFormat* quantized_format(int bits) {
    for (const WeightFormat& f : kFormats)
        if (f.code_bits == bits && bits > 0) return &f;
    return nullptr;
}

const WeightFormat* ggml_weight_format(uint32_t ggml_type) {
    switch (static_cast<GgmlType>(ggml_type)) {
        case GgmlType::kF32: return &kFormats[static_cast<size_t>(WeightType::kF32)];
        case GgmlType::kF16: return &kFormats[static_cast<size_t>(WeightType::kF16)];
        case GgmlType::kBF16: return &kFormats[static_cast<size_t>(WeightType::kBF16)];
        default: break;
    }
    for (const WeightFormat& f : kFormats)
        if (f.ggml_blocks() && !f.row_tiles() && static_cast<uint32_t>(f.ggml) == ggml_type) return &f;
    return nullptr;
}

std::string packable_bits() {
    std::vector<std::string> bits;
    for (const WeightFormat& f : kFormats)
        if (f.packable) bits.push_back(std::to_string(f.code_bits));
    std::string out;
    for (size_t i = 0; i < bits.size(); ++i)
        out += (i == 0 ? "" : i + 1 == bits.size() ? " or " : ", ") + bits[i];
    return out;
}

const char* weight_type_name(WeightType type) {
    const auto i = static_cast<size_t>(type);
    return i < kFormats.size() ? kFormats[i].name : "unknown";
}

size_t WeightView::row_bytes() const {
    return weight_format(type).data_row_bytes(cols);
}

int WeightView::bits() const {
    return weight_format(type).code_bits;
}

bool WeightView::int8_activations() const {
    const WeightFormat& f = weight_format(type);
    if (activations != Activations::kInt8 || !f.int8_kernels) return false;
    // ggml blocks carry their scales (group_size 0), and each is a whole number of x's 32-blocks.
    return f.ggml_blocks() || (group_size >= 32 && (group_size & (group_size - 1)) == 0);
}

bool WeightView::quantized() const {
    return weight_format(type).quantized();
}

bool WeightView::ggml_blocks() const {
    return weight_format(type).ggml_blocks();
}

}  // namespace sluice::kernels
