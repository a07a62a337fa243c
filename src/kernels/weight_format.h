// The weight-format registry: every way sluice stores a weight matrix, one descriptor each. A format
// is a WeightType value plus its descriptor here — how a row of it is laid out and sized, its
// scalar reference dequantisation (the definition every kernel of the format is tested against),
// whether sluice's packer writes it, and which backends have kernels for it. Code that sizes,
// copies, names or validates weights asks the descriptor; only kernels (and their twin tests)
// switch on the type, because a kernel is specific to its format by nature. Which checkpoint tensors
// bind to which format is the model floor's (model/tensor_map.h, weight_type_of).
//
// Adding a format: a WeightType value, its descriptor in weight_format.cpp, its reference element
// function, the CPU row kernels (IsaTable entries, every ISA) and CUDA kernels where it has them,
// and the twin tests (docs/ARCHITECTURE.md, "Adding a weight format").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"

namespace sluice::kernels {

struct WeightFormat {
    WeightType type;
    const char* name;  // "F32", "BF16", "Q4" (MLX affine 4-bit), ...
    const char* description;
    // Float formats: bytes per element (rows × cols of them, row-major).
    int element_bytes = 0;
    // Block-quantized formats: bits per code, and the codes per 32-bit word (LSB first); each group of
    // `group_size` consecutive inputs of a row has a scale and a bias (w = s·q + b) in `scales` /
    // `biases` beside the codes. 0 for float formats.
    int code_bits = 0;
    // The reference value of element (r, i): the scalar definition of the format.
    float (*reference_element)(const WeightView& w, int64_t r, int64_t i) = nullptr;
    bool packable = false;      // `sluice pack --bits` writes it from float rows (kernels/quantize.h)
    bool cpu_kernels = false;   // kernels::* runs it (every ISA and the portable path)
    bool cuda_kernels = false;  // the CUDA backend runs it
    bool int8_kernels = false;  // the CPU has its int8-activation products (kernels.h, Activations::kInt8)
    // ggml block formats (GGUF): each row is cols / block_elems blocks of block_bytes, scales inside the
    // blocks (ggml_quants.h says the layouts); 0 for the others.
    int block_elems = 0;
    int block_bytes = 0;
    GgmlType ggml = GgmlType::kF32;  // block formats: the ggml type it is
    // Row-tiled block formats (ggml_tiles.h): rows per tile, the blocks of that many rows interleaved
    // (a view's rows are a multiple of it); 0: rows one after another. Not a GGUF type: written at load.
    int tile_rows = 0;

    // Codes with separate per-group scales and biases (MLX affine); not the ggml block formats.
    bool quantized() const { return code_bits > 0; }
    bool ggml_blocks() const { return block_elems > 0; }
    bool row_tiles() const { return tile_rows > 0; }
    int codes_per_word() const { return code_bits > 0 ? 32 / code_bits : 0; }
    // Bytes of one row of `data` for `cols` inputs.
    size_t data_row_bytes(int64_t cols) const {
        if (block_elems > 0)
            return static_cast<size_t>(cols / block_elems) * static_cast<size_t>(block_bytes);
        return code_bits > 0 ? static_cast<size_t>(cols) * static_cast<size_t>(code_bits) / 8
                             : static_cast<size_t>(cols) * static_cast<size_t>(element_bytes);
    }
    // Bytes of one row of scales plus biases (0 for float formats).
    size_t aux_row_bytes(int64_t cols, int32_t group_size, ScaleType scale_type) const;
    // Whether a [rows, cols] view with this group size is well formed for the format (cols a whole
    // number of groups, a group a whole number of code words); else what is wrong, for an error.
    const char* shape_error(int64_t cols, int32_t group_size) const;
};

// Every registered format, in WeightType order.
std::span<const WeightFormat> weight_formats();
const WeightFormat& weight_format(WeightType type);
// The block-quantized format with `bits`-bit codes, or null when none is registered.
const WeightFormat* quantized_format(int bits);
// The format storing ggml type number `ggml_type` as sluice binds it (F32/F16/BF16 are the float
// formats; never a row-tiled one), or null when sluice has no kernels for that type.
const WeightFormat* ggml_weight_format(uint32_t ggml_type);
// Rows [row0, row0 + rows) of `w` as a view of their own (every format stores rows one after another:
// the codes or elements, and a quantized format's scales and biases, row by row).
WeightView row_slice(const WeightView& w, int64_t row0, int64_t rows);
// The code sizes the packer writes, for messages: "4 or 8".
std::string packable_bits();

}  // namespace sluice::kernels
