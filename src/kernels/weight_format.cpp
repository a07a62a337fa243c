// The weight-format registry's entries (weight_format.h): bf16/f16/f32 and MLX affine 4/8-bit.
#include "kernels/weight_format.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/assert.h"

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

constexpr std::array<WeightFormat, 5> kFormats{{
    {WeightType::kF32, "F32", "32-bit float", 4, 0, f32_element, false, true, true},
    {WeightType::kF16, "F16", "IEEE half", 2, 0, f16_element, false, true, true},
    {WeightType::kBF16, "BF16", "bfloat16", 2, 0, bf16_element, false, true, true},
    {WeightType::kQ4, "Q4", "MLX affine 4-bit (8 codes per u32, per-group scale and bias)", 0, 4,
     mlx_affine_element<4>, true, true, true, true},
    {WeightType::kQ8, "Q8", "MLX affine 8-bit (4 codes per u32, per-group scale and bias)", 0, 8,
     mlx_affine_element<8>, true, true, true, true},
}};

}  // namespace

size_t WeightFormat::aux_row_bytes(int64_t cols, int32_t group_size, ScaleType scale_type) const {
    if (!quantized() || group_size <= 0) return 0;
    const size_t scale_bytes = scale_type == ScaleType::kF32 ? 4 : 2;
    return 2 * static_cast<size_t>(cols / group_size) * scale_bytes;
}

const char* WeightFormat::shape_error(int64_t cols, int32_t group_size) const {
    if (cols < 0) return "a negative column count";
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
    return activations == Activations::kInt8 && weight_format(type).int8_kernels && group_size >= 32 &&
           (group_size & (group_size - 1)) == 0;
}

bool WeightView::quantized() const {
    return weight_format(type).quantized();
}

}  // namespace sluice::kernels
