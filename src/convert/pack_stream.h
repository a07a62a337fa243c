// Running a PackPlan (pack_plan.h): source bytes arrive shard by shard, in order, from any
// reader — an mmapped file for `sluice pack`, HTTP range requests for `sluice pull` — and go
// straight to their final offsets in the packed files. The raw checkpoint is never stored: the
// output files are preallocated (so a full disk fails at the start, and peak disk ≈ the packed
// size) and written through ".partial" names that are renamed when every shard is done.
//
// Resumable: a progress record (JSON, docs/FORMATS.md) holds a cursor per shard — the offset
// up to which every byte has reached the output files — and, where the source gives one, the
// shard's expected SHA-256 with the running hash state at the cursor. It is rewritten (after an
// fdatasync of the outputs) every `flush_every_bytes` or `flush_every_s`. A cursor never points
// inside a row being quantized: the writer holds at most one partial row per shard, and the
// cursor stays at that row's start. After the last shard: checksums (xxh3, read back from the
// written files), layout.json, config.json, side files (or the files made for the pack: a GGUF's), and
// the manifest last.
//
// Threading: shards may be streamed on several threads at once (StreamOptions::parallel_shards):
// a PlanWriter's per-shard calls (seek/consume/position/cursor) touch only that shard's state and
// pwrite to disjoint ranges, so different shards may be fed concurrently; one shard is fed by one
// thread. The exception is gpt-oss's MXFP4 pieces: a tensor's codes and its scales (which may sit in
// different shards) patch the same output rows by read-modify-write, under `patch_mu_`.
// run_pack_plan serialises the progress record and progress reports.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "convert/pack_plan.h"
#include "convert/packer.h"
#include "core/sha256.h"
#include "sluice/status.h"

namespace sluice::convert {

// Writes the bytes of a plan's shards into its output files (see the file comment).
class PlanWriter {
 public:
    // Opens the ".partial" outputs under out_dir: created, preallocated and given the dense header
    // when `fresh`; reopened (a finished file is taken back from its final name) otherwise.
    static Expected<std::unique_ptr<PlanWriter>> open(const std::string& out_dir, const PackPlan& plan,
                                                      bool fresh);
    ~PlanWriter();
    PlanWriter(const PlanWriter&) = delete;
    PlanWriter& operator=(const PlanWriter&) = delete;

    // Starts (or resumes) shard `shard` at byte `cursor`; with `hash`, the bytes are hashed as
    // they are consumed (the caller restores its state to `cursor` first).
    void seek(size_t shard, uint64_t cursor, Sha256* hash = nullptr);
    // The next bytes of the shard, from position(shard) on.
    Status consume(size_t shard, std::span<const uint8_t> bytes);
    uint64_t position(size_t shard) const;
    // Where a resumed run may restart: position minus the partial row held in memory. The hash
    // given to seek() covers exactly the bytes before the cursor.
    uint64_t cursor(size_t shard) const;
    Status flush();   // fdatasync of every output
    Status commit();  // fsync, close and rename every output to its final name
    // Reads the block scales of the plan's FP8 pieces through `reader` (their weight_scale_inv bytes), which
    // quantize_rows needs before those pieces' rows arrive; a no-op for a plan without FP8 sources.
    Status load_fp8_scales(
        const std::function<Status(size_t shard, uint64_t begin, uint64_t end,
                                   const std::function<Status(std::span<const uint8_t>)>&)>& reader);

 private:
    struct ShardState {
        uint64_t pos = 0;
        size_t piece = 0;
        std::vector<uint8_t> carry;  // the start of a row not yet complete (< one row)
        Sha256* hash = nullptr;
        std::vector<float> row;  // quantization scratch
        std::vector<uint32_t> words;
        std::vector<uint16_t> scales, biases;
        std::vector<uint8_t> out;  // gpt-oss pieces' output rows
    };
    PlanWriter(std::string out_dir, const PackPlan& plan);
    // Block scales of FP8 pieces by (scale_shard, scale_begin), read once before the stream.
    std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> fp8_scales_;
    std::mutex patch_mu_;  // mxfp4_rows' read-modify-write of output rows shared by two shards' pieces
    Status write_at(uint32_t file, const void* data, uint64_t size, uint64_t offset);
    Status read_at(uint32_t file, void* data, uint64_t size, uint64_t offset);
    // `rows` whole source rows of a non-copy piece, starting at row `first_row` of it: by its kind.
    Status process_rows(ShardState& st, const PlanPiece& piece, uint64_t first_row, const uint8_t* src,
                        uint64_t rows);
    Status mxfp4_rows(ShardState& st, const PlanPiece& piece, uint64_t first_row, const uint8_t* src,
                      uint64_t rows);
    Status transpose_rows(ShardState& st, const PlanPiece& piece, const uint8_t* src);
    Status quantize_rows(ShardState& st, const PlanPiece& piece, uint64_t first_row, const uint8_t* src,
                         uint64_t rows);

    std::string out_dir_;
    const PackPlan& plan_;
    std::vector<int> fds_;
    std::vector<ShardState> shards_;
};

// The per-shard part of a progress record.
struct ShardCursor {
    std::string file;
    uint64_t size_bytes = 0;
    uint64_t cursor = 0;       // bytes [0, cursor) are in the output files
    std::string sha256;        // expected SHA-256 (hex) of the whole file; "" = none known
    std::string sha256_state;  // Sha256::save() at `cursor` (when sha256 is set)
};

struct StreamRecord {
    int version = 2;
    std::string source;  // a canonical folder (pack) or "hf:ORG/REPO@COMMIT" (pull)
    int bits = 0, group_size = 0;
    std::vector<ShardCursor> shards;
};
std::string serialize_stream_record(const StreamRecord& record);
Expected<StreamRecord> parse_stream_record(const std::string& json_text, const std::string& path);

// Reads bytes [begin, end) of shard `shard` and hands them, in order, to `sink`.
using ShardSink = std::function<Status(std::span<const uint8_t>)>;
using ShardReader = std::function<Status(size_t shard, uint64_t begin, uint64_t end, const ShardSink& sink)>;

struct StreamOptions {
    std::string out_dir;
    std::string record_name;  // ".pack-progress.json" or ".pull-progress.json"
    std::string source;       // the record's identity of what is packed
    std::string side_dir;     // holds config.json and the tokenizer/template files
    // Description files made here rather than copied from side_dir (a GGUF's config.json and tokenizer
    // files, from its metadata): (name, contents). When set, side_dir is not read.
    std::vector<std::pair<std::string, std::string>> generated_files;
    std::vector<std::string> shard_sha256;  // per plan shard, "" = unknown
    std::vector<std::string> extra_files;   // more files of side_dir to copy (pull --include)
    int parallel_shards = 1;                // shards streamed at once (pull: one connection each)
    uint64_t flush_every_bytes = 64ull << 20;
    double flush_every_s = 2.0;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;  // ("bytes", done, total)
};

// Runs `plan` into o.out_dir (or resumes it) with bytes from `reader`; see the file comment.
Expected<PackResult> run_pack_plan(const PackPlan& plan, const ShardReader& reader, const StreamOptions& o);

}  // namespace sluice::convert
