// The one planning path of `sluice pack` and `sluice pull`: from a checkpoint's safetensors
// headers and config, the packed layout (every section's offset, known before a byte of tensor
// data is read) and the list of pieces that turn source bytes into packed bytes.
//
// A piece is a contiguous byte range of one source shard and what to do with it: copy it verbatim
// to an offset of an output file (MLX sources, float tensors), or quantize it row by row into
// the MLX affine words/scales/biases at their offsets (bf16/f16/f32 sources, and FP8 e4m3 ones with their
// block scales, read ahead of the stream). Because a piece
// needs only whole rows, not whole tensors, the same pieces run over an mmapped file (pack) or a
// byte stream arriving over HTTP (pull) with memory bounded by one row and the read buffer; and
// because both commands run the same pieces, `sluice pull` produces byte-for-byte what `sluice
// pack` produces from the same files.
//
// Lifetime: a PackPlan is a plain value; it refers to shards by index and to nothing mmapped.
// Rejected alternative: gathering each output tensor/expert in memory before transforming it
// (what pack did before) — for a stream it means buffering whole fused [E, 2I, H] tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "sluice/status.h"

namespace sluice::convert {

struct PlanPiece {
    // kMxfp4Codes / kMxfp4Scales: gpt-oss's experts as the Hub stores them (model/gpt_oss_experts.h), rows of
    // MXFP4 codes or of their e8m0 scales, each written into its half of the same ggml MXFP4 rows (read,
    // patched, written back), so the two tensors may arrive in either order and nothing is read ahead.
    // kTransposeRows: gpt-oss's float experts, input-major: the whole piece (one expert's matrix) is one
    // "row", transposed into output rows, then copied or quantized.
    enum class Kind : uint8_t { kCopy, kQuantizeRows, kMxfp4Codes, kMxfp4Scales, kTransposeRows };
    Kind kind = Kind::kCopy;
    uint64_t src_begin = 0;  // absolute byte offset in the shard file
    uint64_t src_bytes = 0;
    uint32_t out_file = 0;  // index into PackPlan::out_files
    uint64_t dst = 0;       // kCopy: destination offset; kQuantizeRows: offset of the packed words
    // kQuantizeRows only: src_bytes / row_bytes() rows of `cols` values of `src_dtype`, written as
    // rows of cols·bits/32 words at dst and cols/group_size bf16 scales/biases at dst_scales/dst_biases.
    format::DType src_dtype = format::DType::kBF16;
    int64_t cols = 0;
    int bits = 0;
    int group_size = 0;
    uint64_t dst_scales = 0;
    uint64_t dst_biases = 0;
    // An FP8 (e4m3) source (src_dtype kF8E4M3): the piece is a whole [rows, cols] tensor, each
    // fp8_block_rows × fp8_block_cols block scaled by an f32 of its weight_scale_inv tensor — bytes
    // [scale_begin, scale_begin + 4·scale_rows·scale_cols) of shard scale_shard, read before the stream
    // (run_pack_plan) so the rows dequantize as they arrive.
    uint32_t scale_shard = 0;
    uint64_t scale_begin = 0;
    int64_t scale_rows = 0, scale_cols = 0;
    int64_t fp8_block_rows = 0, fp8_block_cols = 0;

    // gpt-oss's pieces: source row r goes to output row r of dst, or with `interleaved` (gate_up) row r / 2
    // of dst (r even: gate) or of dst2 (odd: up), each with its own scales and biases (dst2_*) when
    // quantized. kTransposeRows: the source is [src_rows, cols] and its output rows are its columns.
    bool interleaved = false;
    uint64_t dst2 = 0, dst2_scales = 0, dst2_biases = 0;
    int64_t src_rows = 0;

    uint64_t src_end() const { return src_begin + src_bytes; }
    uint64_t row_bytes() const {
        switch (kind) {
            case Kind::kMxfp4Codes: return static_cast<uint64_t>(cols / 32 * 16);
            case Kind::kMxfp4Scales: return static_cast<uint64_t>(cols / 32);
            case Kind::kTransposeRows: return src_bytes;
            default: return static_cast<uint64_t>(cols) * format::dtype_size(src_dtype);
        }
    }
};

struct PlanShard {
    std::string file;  // name inside the checkpoint folder / repository
    uint64_t size_bytes = 0;
    std::vector<PlanPiece> pieces;  // sorted by src_begin, disjoint
};

struct PlanOutFile {
    std::string path;  // relative to the output folder ("dense.safetensors", "experts/layer_003.bin")
    uint64_t size_bytes = 0;
};

struct PackPlan {
    format::PackLayout layout;  // every offset and size; checksums are filled in by finish_pack
    std::string dense_header;   // the dense file's first bytes: length, JSON header, padding
    std::vector<PlanShard> shards;
    std::vector<PlanOutFile> out_files;  // [0] = the dense file, then layout.expert_files in order
    int bits = 4;                        // the pack's bit width (MLX sources: their own)
    int group_size = 64;
    bool quantized_here = false;                  // float weights were quantized by this pack
    std::map<std::string, int> module_bits_used;  // dense modules at another width (routers: 8)

    uint64_t source_bytes() const;  // sum of the shard sizes: what a pull downloads
    uint64_t packed_bytes() const;  // sum of the output file sizes
};

// The effective bit width: `requested` (0 = default) checked against the source; MLX sources keep
// theirs (any other explicit request is an error). `source` names the checkpoint in errors.
Expected<int> resolve_pack_bits(const model::ModelConfig& cfg, int requested, int group_size,
                                const std::string& source);

// Plans the pack of `ckpt` (mapped or header-only) with the effective `bits` and `group_size`.
// Checks the dtype and shape of every routed-expert tensor it slices.
Expected<PackPlan> plan_pack(const model::ModelConfig& cfg, const format::Checkpoint& ckpt, int bits,
                             int group_size);

// Plans the pack of a GGUF (one file or a split set; its files are the shards) whose tensors were
// bound for `cfg` (model::load_gguf_weights): every piece a verbatim copy, each tensor in its own ggml
// type (convert/pack_gguf.cpp says what is packed where). The plan's bits and group size are 0.
Expected<PackPlan> plan_gguf_pack(const model::ModelConfig& cfg, const format::GgufCheckpoint& gguf);

// Sorts each shard's pieces by source offset and checks that none overlap (the stream's precondition).
Status order_plan_pieces(PackPlan* plan);

}  // namespace sluice::convert
