#include "convert/pack_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "convert/pack_writer.h"
#include "core/log.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "model/gpt_oss_experts.h"
#include "model/tensor_map.h"

namespace sluice::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Status os_error(const std::string& what, const std::string& path, int err) {
    std::string msg = "[pack] " + what + " '" + path + "': " + std::strerror(err);
    if (err == ENOSPC || err == EDQUOT) msg += " (the disk is full)";
    return error(ErrorCode::kIo, msg);
}

}  // namespace

// ---- PlanWriter -----------------------------------------------------------------------------

PlanWriter::PlanWriter(std::string out_dir, const PackPlan& plan)
    : out_dir_(std::move(out_dir)),
      plan_(plan),
      fds_(plan.out_files.size(), -1),
      shards_(plan.shards.size()) {}

PlanWriter::~PlanWriter() {
    for (int fd : fds_)
        if (fd >= 0) ::close(fd);
}

Expected<std::unique_ptr<PlanWriter>> PlanWriter::open(const std::string& out_dir, const PackPlan& plan,
                                                       bool fresh) {
    std::unique_ptr<PlanWriter> w(new PlanWriter(out_dir, plan));
    for (size_t i = 0; i < plan.out_files.size(); ++i) {
        const PlanOutFile& f = plan.out_files[i];
        const std::string final_path = (fs::path(out_dir) / f.path).string();
        const std::string partial = final_path + ".partial";
        std::error_code ec;
        fs::create_directories(fs::path(partial).parent_path(), ec);
        if (fresh) {
            const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) return os_error("cannot create", partial, errno);
            w->fds_[i] = fd;
            // Reserve the whole file now: a full disk fails here, before anything is downloaded.
            const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(f.size_bytes));
            if (rc == ENOSPC || rc == EDQUOT)
                return os_error("cannot reserve " + std::to_string(f.size_bytes) + " bytes for", partial, rc);
            if (rc != 0 && ::ftruncate(fd, static_cast<off_t>(f.size_bytes)) != 0)
                return os_error("cannot size", partial, errno);
        } else {
            if (!fs::exists(partial, ec) && fs::file_size(final_path, ec) == f.size_bytes && !ec)
                fs::rename(final_path, partial, ec);  // committed by a run killed before the manifest
            const int fd = ::open(partial.c_str(), O_RDWR | O_CLOEXEC);
            if (fd < 0)
                return error(ErrorCode::kNotFound, "[pack] cannot reopen '" + partial + "' to resume");
            w->fds_[i] = fd;
            if (fs::file_size(partial, ec) != f.size_bytes)
                return error(ErrorCode::kNotFound, "[pack] '" + partial + "' has the wrong size to resume");
        }
    }
    if (fresh) SLUICE_RETURN_IF_ERROR(w->write_at(0, plan.dense_header.data(), plan.dense_header.size(), 0));
    return w;
}

void PlanWriter::seek(size_t shard, uint64_t cursor, Sha256* hash) {
    ShardState& st = shards_[shard];
    st.pos = cursor;
    st.piece = 0;
    st.carry.clear();
    st.hash = hash;
}

uint64_t PlanWriter::position(size_t shard) const {
    return shards_[shard].pos;
}

uint64_t PlanWriter::cursor(size_t shard) const {
    return shards_[shard].pos - shards_[shard].carry.size();
}

Status PlanWriter::write_at(uint32_t file, const void* data, uint64_t size, uint64_t offset) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint64_t done = 0;
    while (done < size) {
        const ssize_t n = ::pwrite(fds_[file], p + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return os_error("cannot write", plan_.out_files[file].path + ".partial", errno);
        }
        done += static_cast<uint64_t>(n);
    }
    return Status::ok();
}

Status PlanWriter::read_at(uint32_t file, void* data, uint64_t size, uint64_t offset) {
    auto* p = static_cast<uint8_t*>(data);
    uint64_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fds_[file], p + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return os_error("cannot read back", plan_.out_files[file].path + ".partial", n < 0 ? errno : EIO);
        done += static_cast<uint64_t>(n);
    }
    return Status::ok();
}

Status PlanWriter::process_rows(ShardState& st, const PlanPiece& pc, uint64_t first_row, const uint8_t* src,
                                uint64_t rows) {
    switch (pc.kind) {
        case PlanPiece::Kind::kMxfp4Codes:
        case PlanPiece::Kind::kMxfp4Scales: return mxfp4_rows(st, pc, first_row, src, rows);
        case PlanPiece::Kind::kTransposeRows: return transpose_rows(st, pc, src);
        default: return quantize_rows(st, pc, first_row, src, rows);
    }
}

Status PlanWriter::mxfp4_rows(ShardState& st, const PlanPiece& pc, uint64_t first_row, const uint8_t* src,
                              uint64_t rows) {
    // Each source row patches its half of one output row of ggml blocks (block_mxfp4: the scale byte, then
    // 16 code bytes): read back, patched, written. Rows bound for one destination (gate's, up's) are
    // consecutive there, so each run is one read and one write.
    const int64_t blocks = pc.cols / model::kMxfp4Block;
    const uint64_t out_rb = static_cast<uint64_t>(blocks * model::kMxfp4BlockBytes), in_rb = pc.row_bytes();
    const int parities = pc.interleaved ? 2 : 1;
    for (int parity = 0; parity < parities; ++parity) {
        // The source rows of this parity among [first_row, first_row + rows), and their output rows.
        uint64_t r0 = first_row;
        if (pc.interleaved && r0 % 2 != static_cast<uint64_t>(parity)) ++r0;
        if (r0 >= first_row + rows) continue;
        const uint64_t step = pc.interleaved ? 2 : 1, n = (first_row + rows - r0 + step - 1) / step;
        const uint64_t out_row0 = pc.interleaved ? r0 / 2 : r0;
        const uint64_t at = (parity == 1 ? pc.dst2 : pc.dst) + out_row0 * out_rb;
        st.out.resize(n * out_rb);
        // The codes and the scales of these rows may be patched from two shards' threads at once.
        std::lock_guard<std::mutex> lock(patch_mu_);
        SLUICE_RETURN_IF_ERROR(read_at(pc.out_file, st.out.data(), n * out_rb, at));
        for (uint64_t i = 0; i < n; ++i) {
            const uint8_t* in = src + (r0 + i * step - first_row) * in_rb;
            uint8_t* out = st.out.data() + i * out_rb;
            if (pc.kind == PlanPiece::Kind::kMxfp4Scales) {
                for (int64_t b = 0; b < blocks; ++b) out[b * model::kMxfp4BlockBytes] = in[b];
            } else {
                // The codes of each block in ggml's nibble order; the scale bytes are left as they are.
                for (int64_t b = 0; b < blocks; ++b) {
                    uint8_t* o = out + b * model::kMxfp4BlockBytes;
                    const uint8_t scale = o[0];
                    model::mxfp4_row_hub_to_ggml(in + b * 16, &scale, model::kMxfp4Block, o);
                }
            }
        }
        SLUICE_RETURN_IF_ERROR(write_at(pc.out_file, st.out.data(), n * out_rb, at));
    }
    return Status::ok();
}

Status PlanWriter::transpose_rows(ShardState& st, const PlanPiece& pc, const uint8_t* src) {
    // The piece is one expert's matrix stored input-major, [src_rows, cols]: its output rows are its columns
    // (column 2j of an interleaved gate_up is gate row j, 2j + 1 up row j).
    const size_t eb = format::dtype_size(pc.src_dtype);
    const int64_t in = pc.src_rows, outs = pc.cols, per = pc.interleaved ? outs / 2 : outs;
    for (int parity = 0; parity < (pc.interleaved ? 2 : 1); ++parity) {
        std::vector<uint8_t> rows(static_cast<size_t>(per * in) * eb);
        for (int64_t j = 0; j < per; ++j)
            model::gpt_oss_column(src, in, outs, pc.interleaved ? 2 * j + parity : j, eb,
                                  rows.data() + static_cast<size_t>(j * in) * eb);
        PlanPiece q = pc;
        q.kind = PlanPiece::Kind::kQuantizeRows;
        q.cols = in;
        if (parity == 1) {
            q.dst = pc.dst2;
            q.dst_scales = pc.dst2_scales;
            q.dst_biases = pc.dst2_biases;
        }
        if (q.bits == 0)
            SLUICE_RETURN_IF_ERROR(write_at(q.out_file, rows.data(), rows.size(), q.dst));
        else
            SLUICE_RETURN_IF_ERROR(quantize_rows(st, q, 0, rows.data(), static_cast<uint64_t>(per)));
    }
    return Status::ok();
}

Status PlanWriter::quantize_rows(ShardState& st, const PlanPiece& pc, uint64_t first_row, const uint8_t* src,
                                 uint64_t rows) {
    // The same arithmetic as the MLX affine quantizer over a mapped tensor: each row to f32, then
    // quantize_row_affine (kernels/quantize.h). FP8 rows: each e4m3 value times its block's f32 scale.
    kernels::WeightView v;
    const std::vector<float>* block_scales = nullptr;
    if (pc.src_dtype == format::DType::kF8E4M3) {
        auto it = fp8_scales_.find({pc.scale_shard, pc.scale_begin});
        if (it == fp8_scales_.end())
            return error(ErrorCode::kInternal, "[pack] the block scales of an FP8 tensor were not read");
        block_scales = &it->second;
    } else {
        SLUICE_ASSIGN_OR_RETURN(v.type, model::weight_type_of(pc.src_dtype, 0));
    }
    v.rows = static_cast<int64_t>(rows);
    v.cols = pc.cols;
    v.data = src;
    const uint64_t wpr = static_cast<uint64_t>(pc.cols * pc.bits / 32);
    const uint64_t groups = static_cast<uint64_t>(pc.cols / pc.group_size);
    st.row.resize(static_cast<size_t>(pc.cols));
    st.words.resize(rows * wpr);
    st.scales.resize(rows * groups);
    st.biases.resize(rows * groups);
    for (uint64_t r = 0; r < rows; ++r) {
        if (block_scales != nullptr) {
            const uint8_t* codes = src + r * static_cast<uint64_t>(pc.cols);
            const float* scale_row = block_scales->data() +
                                     static_cast<int64_t>(first_row + r) / pc.fp8_block_rows * pc.scale_cols;
            for (int64_t c = 0; c < pc.cols; ++c)
                st.row[static_cast<size_t>(c)] =
                    kernels::f8e4m3_to_f32(codes[c]) * scale_row[c / pc.fp8_block_cols];
        } else {
            kernels::reference::dequantize_row(v, static_cast<int64_t>(r), st.row.data());
        }
        kernels::quantize_row_affine(st.row.data(), pc.cols, pc.bits, pc.group_size,
                                     st.words.data() + r * wpr, st.scales.data() + r * groups,
                                     st.biases.data() + r * groups);
    }
    SLUICE_RETURN_IF_ERROR(
        write_at(pc.out_file, st.words.data(), rows * wpr * 4, pc.dst + first_row * wpr * 4));
    SLUICE_RETURN_IF_ERROR(
        write_at(pc.out_file, st.scales.data(), rows * groups * 2, pc.dst_scales + first_row * groups * 2));
    return write_at(pc.out_file, st.biases.data(), rows * groups * 2, pc.dst_biases + first_row * groups * 2);
}

Status PlanWriter::load_fp8_scales(
    const std::function<Status(size_t, uint64_t, uint64_t,
                               const std::function<Status(std::span<const uint8_t>)>&)>& reader) {
    // The scale tensors each shard's FP8 pieces need, read in as few ranges as the file allows: safetensors
    // writers put tensors of one dtype together (F32 before F8), so a shard's scales are usually one range
    // — one request per shard for `sluice pull`, not one per tensor. Gaps up to 1 MiB are read through.
    struct Need {
        uint64_t begin, bytes;
        int64_t rows, cols;
    };
    std::map<uint32_t, std::map<uint64_t, Need>> needs;  // shard → begin → scales
    for (const PlanShard& shard : plan_.shards)
        for (const PlanPiece& pc : shard.pieces)
            if (pc.src_dtype == format::DType::kF8E4M3)
                needs[pc.scale_shard][pc.scale_begin] = {
                    pc.scale_begin, static_cast<uint64_t>(pc.scale_rows * pc.scale_cols) * sizeof(float),
                    pc.scale_rows, pc.scale_cols};
    constexpr uint64_t kGap = 1ull << 20;
    for (const auto& [shard, by_begin] : needs) {
        auto it = by_begin.begin();
        while (it != by_begin.end()) {
            const uint64_t begin = it->second.begin;
            uint64_t end = begin + it->second.bytes;
            auto last = it;
            for (auto next = std::next(it); next != by_begin.end() && next->second.begin <= end + kGap;
                 ++next) {
                end = std::max(end, next->second.begin + next->second.bytes);
                last = next;
            }
            std::vector<uint8_t> raw;
            raw.reserve(end - begin);
            SLUICE_RETURN_IF_ERROR(reader(shard, begin, end, [&](std::span<const uint8_t> b) -> Status {
                raw.insert(raw.end(), b.begin(), b.end());
                return Status::ok();
            }));
            if (raw.size() != end - begin)
                return error(ErrorCode::kIo, "[pack] '" + plan_.shards[shard].file +
                                                 "': " + std::to_string(raw.size()) + " of the " +
                                                 std::to_string(end - begin) + " bytes of FP8 block scales");
            for (auto n = it;; ++n) {
                const Need& need = n->second;
                std::vector<float> scales(static_cast<size_t>(need.rows * need.cols));
                std::memcpy(scales.data(), raw.data() + (need.begin - begin), need.bytes);
                for (float f : scales)
                    if (!std::isfinite(f))
                        return error(ErrorCode::kInvalidArgument, "[pack] '" + plan_.shards[shard].file +
                                                                      "': an FP8 block scale is not finite");
                fp8_scales_[{shard, need.begin}] = std::move(scales);
                if (n == last) break;
            }
            it = std::next(last);
        }
    }
    return Status::ok();
}

Status PlanWriter::consume(size_t shard, std::span<const uint8_t> bytes) {
    ShardState& st = shards_[shard];
    const std::vector<PlanPiece>& pieces = plan_.shards[shard].pieces;
    const uint8_t* p = bytes.data();
    uint64_t n = bytes.size();
    auto advance = [&](uint64_t k, bool hashed) {
        if (hashed && st.hash) st.hash->update(p, k);
        p += k;
        n -= k;
        st.pos += k;
    };
    while (n > 0) {
        while (st.piece < pieces.size() && pieces[st.piece].src_end() <= st.pos) ++st.piece;
        if (st.piece == pieces.size()) {  // the tail of the shard: nothing of it is packed
            advance(n, true);
            break;
        }
        const PlanPiece& pc = pieces[st.piece];
        if (st.pos < pc.src_begin) {  // a tensor that is not packed (vision), or padding
            advance(std::min(n, pc.src_begin - st.pos), true);
            continue;
        }
        const uint64_t take = std::min(n, pc.src_end() - st.pos);
        if (pc.kind == PlanPiece::Kind::kCopy) {
            SLUICE_RETURN_IF_ERROR(write_at(pc.out_file, p, take, pc.dst + (st.pos - pc.src_begin)));
            advance(take, true);
            continue;
        }
        const uint64_t rb = pc.row_bytes();
        if (!st.carry.empty()) {  // complete the row started by the previous bytes
            const uint64_t t = std::min(take, rb - st.carry.size());
            st.carry.insert(st.carry.end(), p, p + t);
            advance(t, false);
            if (st.carry.size() == rb) {
                const uint64_t row = (st.pos - rb - pc.src_begin) / rb;
                SLUICE_RETURN_IF_ERROR(process_rows(st, pc, row, st.carry.data(), 1));
                if (st.hash) st.hash->update(st.carry.data(), rb);
                st.carry.clear();
            }
            continue;
        }
        const uint64_t rows = take / rb;
        if (rows > 0) {
            SLUICE_RETURN_IF_ERROR(process_rows(st, pc, (st.pos - pc.src_begin) / rb, p, rows));
            advance(rows * rb, true);
            continue;
        }
        st.carry.assign(p, p + take);  // the start of a row; the rest comes with the next bytes
        advance(take, false);
    }
    return Status::ok();
}

Status PlanWriter::flush() {
    for (size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i] >= 0 && ::fdatasync(fds_[i]) != 0)
            return os_error("cannot flush", plan_.out_files[i].path + ".partial", errno);
    return Status::ok();
}

Status PlanWriter::commit() {
    for (size_t i = 0; i < fds_.size(); ++i) {
        const std::string final_path = (fs::path(out_dir_) / plan_.out_files[i].path).string();
        const std::string partial = final_path + ".partial";
        if (::fsync(fds_[i]) != 0) return os_error("cannot flush", partial, errno);
        ::close(fds_[i]);
        fds_[i] = -1;
        if (::rename(partial.c_str(), final_path.c_str()) != 0)
            return os_error("cannot rename onto", final_path, errno);
    }
    return Status::ok();
}

// ---- progress record -------------------------------------------------------------------------

std::string serialize_stream_record(const StreamRecord& r) {
    json shards = json::array();
    for (const auto& s : r.shards) {
        json j = {{"file", s.file}, {"size", s.size_bytes}, {"cursor", s.cursor}};
        if (!s.sha256.empty()) {
            j["sha256"] = s.sha256;
            j["sha256_state"] = s.sha256_state;
        }
        shards.push_back(j);
    }
    json j = {{"version", r.version},
              {"source", r.source},
              {"bits", r.bits},
              {"group_size", r.group_size},
              {"shards", shards}};
    return j.dump(1);
}

Expected<StreamRecord> parse_stream_record(const std::string& text, const std::string& path) {
    json j = json::parse(text, nullptr, false);
    auto bad = [&](const std::string& what) {
        return error(ErrorCode::kInvalidArgument, "[pack] progress record '" + path + "': " + what);
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    StreamRecord r;
    if (j.value("version", 0) != r.version) return bad("version is not " + std::to_string(r.version));
    if (!j.contains("shards") || !j["shards"].is_array()) return bad("no 'shards' array");
    try {
        r.source = j.at("source").get<std::string>();
        r.bits = j.at("bits").get<int>();
        r.group_size = j.at("group_size").get<int>();
        for (const auto& s : j["shards"]) {
            ShardCursor c;
            c.file = s.at("file").get<std::string>();
            c.size_bytes = s.at("size").get<uint64_t>();
            c.cursor = s.at("cursor").get<uint64_t>();
            c.sha256 = s.value("sha256", "");
            c.sha256_state = s.value("sha256_state", "");
            if (c.cursor > c.size_bytes) return bad("cursor of '" + c.file + "' is past its size");
            r.shards.push_back(std::move(c));
        }
    } catch (const json::exception& e) {
        return bad(e.what());
    }
    return r;
}

namespace {

bool same_job(const StreamRecord& a, const StreamRecord& b) {
    if (a.source != b.source || a.bits != b.bits || a.group_size != b.group_size ||
        a.shards.size() != b.shards.size())
        return false;
    for (size_t i = 0; i < a.shards.size(); ++i) {
        const auto &x = a.shards[i], &y = b.shards[i];
        if (x.file != y.file || x.size_bytes != y.size_bytes || x.sha256 != y.sha256) return false;
    }
    return true;
}

// The config.json of the pack: the source's, with a `quantization` block describing what was
// quantized here (MLX sources keep theirs).
Status write_packed_config(const std::string& src_config, const std::string& out_dir, const PackPlan& plan) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(src_config));
    json cfg = json::parse(text, nullptr, false);
    if (cfg.is_discarded())
        return error(ErrorCode::kInvalidArgument, "[pack] " + src_config + ": not valid JSON");
    if (plan.quantized_here) {
        json q = {{"group_size", plan.group_size}, {"bits", plan.bits}, {"mode", "affine"}};
        for (const auto& [module, b] : plan.module_bits_used)
            if (b != plan.bits) q[module] = {{"group_size", plan.group_size}, {"bits", b}};
        cfg["quantization"] = q;
        // gpt-oss's Hub quantization_config (quant_method mxfp4) stays: its experts stay MXFP4.
        const json* hub = cfg.contains("quantization_config") ? &cfg["quantization_config"] : nullptr;
        if (hub == nullptr || !hub->is_object() || hub->value("quant_method", "") != "mxfp4")
            cfg["quantization_config"] = q;
    }
    return io::write_file_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2));
}

// The xxh3 of `bytes` of a read-only file mapping, whose whole pages are then handed back (a later read
// faults them in again from the file): hashing a packed file holds one tensor or record of it in the
// process, not the whole file.
uint64_t hash_and_drop(const uint8_t* bytes, uint64_t size) {
    const uint64_t h = XXH3_64bits(bytes, size);
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(bytes) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(bytes) + size) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    return h;
}

// Checksums from the written files, then layout.json, config.json, side files, manifest last.
Expected<PackResult> finish_pack(const PackPlan& plan, const StreamOptions& o) {
    format::PackLayout layout = plan.layout;
    {
        SLUICE_ASSIGN_OR_RETURN(auto dense,
                                io::MappedFile::open((fs::path(o.out_dir) / layout.dense_file).string()));
        const uint8_t* data = dense->data() + plan.dense_header.size();
        for (auto& s : layout.dense) s.xxh3 = hash_and_drop(data + s.offset, s.size);
    }
    for (auto& f : layout.expert_files) {
        SLUICE_ASSIGN_OR_RETURN(auto mapped, io::MappedFile::open((fs::path(o.out_dir) / f.file).string()));
        f.record_xxh3.assign(static_cast<size_t>(layout.n_experts), 0);
        for (int64_t e = 0; e < layout.n_experts; ++e)
            f.record_xxh3[static_cast<size_t>(e)] =
                hash_and_drop(mapped->data() + static_cast<uint64_t>(e) * f.record_stride, f.record_bytes);
    }
    SLUICE_RETURN_IF_ERROR(io::write_file_atomic((fs::path(o.out_dir) / "layout.json").string(),
                                                 format::serialize_pack_layout(layout)));
    std::vector<std::string> side;
    if (!o.generated_files.empty()) {
        bool config = false;
        for (const auto& [name, contents] : o.generated_files) {
            SLUICE_RETURN_IF_ERROR(io::write_file_atomic((fs::path(o.out_dir) / name).string(), contents));
            if (name == "config.json")
                config = true;
            else
                side.push_back(name);
        }
        if (!config) return error(ErrorCode::kInternal, "[pack] no config.json among the files made");
    } else {
        SLUICE_RETURN_IF_ERROR(
            write_packed_config((fs::path(o.side_dir) / "config.json").string(), o.out_dir, plan));
        SLUICE_ASSIGN_OR_RETURN(side, copy_model_side_files(o.side_dir, o.out_dir));
    }
    for (const auto& extra : o.extra_files) {
        if (std::find(side.begin(), side.end(), extra) != side.end()) continue;
        const fs::path dst = fs::path(o.out_dir) / extra;
        std::error_code ec;
        fs::create_directories(dst.parent_path(), ec);
        fs::copy_file(fs::path(o.side_dir) / extra, dst, fs::copy_options::overwrite_existing, ec);
        if (ec) return error(ErrorCode::kIo, "[pack] cannot copy '" + extra + "': " + ec.message());
        side.push_back(extra);
    }
    std::vector<std::string> files = {"config.json", "layout.json", layout.dense_file};
    for (const auto& f : layout.expert_files) files.push_back(f.file);
    files.insert(files.end(), side.begin(), side.end());
    SLUICE_RETURN_IF_ERROR(write_manifest(o.out_dir, files));

    PackResult result;
    for (const auto& s : layout.dense) result.dense_bytes += s.size;
    for (const auto& f : layout.expert_files)
        result.expert_bytes += f.record_stride * static_cast<uint64_t>(layout.n_experts);
    result.expert_files = static_cast<int64_t>(layout.expert_files.size());
    return result;
}

}  // namespace

Expected<PackResult> run_pack_plan(const PackPlan& plan, const ShardReader& reader, const StreamOptions& o) {
    const std::string record_path = (fs::path(o.out_dir) / o.record_name).string();
    StreamRecord want;
    want.source = o.source;
    want.bits = plan.bits;
    want.group_size = plan.group_size;
    for (size_t s = 0; s < plan.shards.size(); ++s) {
        ShardCursor c;
        c.file = plan.shards[s].file;
        c.size_bytes = plan.shards[s].size_bytes;
        if (s < o.shard_sha256.size()) c.sha256 = o.shard_sha256[s];
        want.shards.push_back(c);
    }

    // The folder: a complete pack of this job, one in progress, or empty.
    std::error_code ec;
    if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec))
        return error(ErrorCode::kInvalidArgument,
                     "[pack] output '" + o.out_dir + "' exists and is not a folder");
    fs::create_directories(o.out_dir, ec);
    if (ec) return error(ErrorCode::kIo, "[pack] cannot create '" + o.out_dir + "': " + ec.message());
    StreamRecord record = want;
    bool have_record = false;
    if (auto text = io::read_text_file(record_path); text.has_value()) {
        auto old = parse_stream_record(*text, record_path);
        if (old.has_value() && same_job(*old, want)) {
            record = std::move(*old);
            have_record = true;
        }
    }
    PackResult result;
    if (fs::exists(fs::path(o.out_dir) / "manifest.json", ec)) {
        if (have_record) {
            result.already_complete = true;
            return result;
        }
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + o.out_dir +
                         "' already holds a complete pack of another source or "
                         "with other options; choose another folder or delete it");
    }
    if (!have_record) {
        for (const auto& entry : fs::directory_iterator(o.out_dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name != "experts" && name != o.record_name && name != ".source")
                return error(ErrorCode::kInvalidArgument, "[pack] '" + o.out_dir +
                                                              "' is not empty and holds no pack in progress "
                                                              "for this source and options (found '" +
                                                              name + "')");
        }
    }
    // The folder is this job's: only now its experts/ (a refused folder is left as it was).
    fs::create_directories(fs::path(o.out_dir) / "experts", ec);
    if (ec) return error(ErrorCode::kIo, "[pack] cannot create '" + o.out_dir + "/experts': " + ec.message());
    bool fresh = true;
    for (const auto& c : record.shards) fresh = fresh && c.cursor == 0;
    auto writer = PlanWriter::open(o.out_dir, plan, fresh);
    if (!writer.has_value() && !fresh) {
        log::warn("{}; starting over", writer.status().message());
        record = want;
        fresh = true;
        writer = PlanWriter::open(o.out_dir, plan, true);
    }
    if (!writer.has_value()) return writer.status();
    SLUICE_RETURN_IF_ERROR((*writer)->load_fp8_scales(reader));
    result.resumed = !fresh;
    SLUICE_RETURN_IF_ERROR(io::write_file_atomic(record_path, serialize_stream_record(record)));

    // Progress counts this run's bytes only, so that the rate and ETA are right after a resume.
    uint64_t resumed_bytes = 0;
    for (const auto& c : record.shards) resumed_bytes += c.cursor;
    const uint64_t total = plan.source_bytes() - resumed_bytes;

    // Shards run on up to o.parallel_shards threads. Each thread owns its shard's writer state and
    // hash; `mu` guards the record (every cursor, the file) and progress reports.
    std::mutex mu;
    std::atomic<uint64_t> done_bytes{0};
    std::atomic<bool> stop{false};
    PlanWriter& w = **writer;
    auto run_shard = [&](size_t s) -> Status {
        ShardCursor& c = record.shards[s];
        Sha256 hash;
        uint64_t start;
        {
            std::lock_guard<std::mutex> lock(mu);
            if (!c.sha256.empty() && c.cursor > 0 && !hash.restore(c.sha256_state)) c.cursor = 0;
            start = c.cursor;
        }
        const bool hashed = !c.sha256.empty();
        w.seek(s, start, hashed ? &hash : nullptr);
        auto last_flush = std::chrono::steady_clock::now();
        uint64_t since_flush = 0;
        auto checkpoint = [&]() -> Status {
            SLUICE_RETURN_IF_ERROR(w.flush());
            since_flush = 0;
            last_flush = std::chrono::steady_clock::now();
            std::lock_guard<std::mutex> lock(mu);
            c.cursor = w.cursor(s);
            if (hashed) c.sha256_state = hash.save();
            return io::write_file_atomic(record_path, serialize_stream_record(record));
        };
        if (start >= c.size_bytes) return Status::ok();
        const ShardSink sink = [&](std::span<const uint8_t> bytes) -> Status {
            if (stop) return error(ErrorCode::kCancelled, "[pack] stopped: another shard failed");
            if (w.position(s) + bytes.size() > c.size_bytes)
                return error(ErrorCode::kIo,
                             "[pack] '" + c.file + "': more bytes than its " + std::to_string(c.size_bytes));
            SLUICE_RETURN_IF_ERROR(w.consume(s, bytes));
            since_flush += bytes.size();
            const uint64_t done = done_bytes += bytes.size();
            if (o.progress) {
                std::lock_guard<std::mutex> lock(mu);
                o.progress("bytes", std::min(total, done), total);
            }
            const double age =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush).count();
            if (since_flush >= o.flush_every_bytes || age >= o.flush_every_s) return checkpoint();
            return Status::ok();
        };
        const Status st = reader(s, start, c.size_bytes, sink);
        if (!st.is_ok()) {
            (void)checkpoint();  // keep what arrived intact for the next run
            return st;
        }
        if (w.position(s) != c.size_bytes)
            return error(ErrorCode::kIo, "[pack] '" + c.file + "': got " + std::to_string(w.position(s)) +
                                             " of " + std::to_string(c.size_bytes) + " bytes");
        if (hashed && hash.hex_digest() != c.sha256) {
            const std::string got = hash.hex_digest();
            std::lock_guard<std::mutex> lock(mu);
            c.cursor = 0;  // the bytes are wrong: fetch the whole file again next time
            c.sha256_state.clear();
            (void)io::write_file_atomic(record_path, serialize_stream_record(record));
            return error(ErrorCode::kIo, "[pull] '" + c.file + "': SHA-256 mismatch, expected " + c.sha256 +
                                             ", got " + got + " (it will be fetched again on the next run)");
        }
        return checkpoint();
    };
    std::atomic<size_t> next{0};
    Status first_error = Status::ok();
    auto worker = [&] {
        for (size_t s; !stop && (s = next++) < plan.shards.size();) {
            const Status st = run_shard(s);
            if (st.is_ok()) continue;
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.is_ok() || first_error.code() == ErrorCode::kCancelled) first_error = st;
            stop = true;
        }
    };
    const size_t n_threads =
        std::clamp<size_t>(static_cast<size_t>(o.parallel_shards), 1, plan.shards.size());
    std::vector<std::thread> threads;
    for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    SLUICE_RETURN_IF_ERROR(first_error);
    SLUICE_RETURN_IF_ERROR((*writer)->commit());
    SLUICE_ASSIGN_OR_RETURN(PackResult finished, finish_pack(plan, o));
    finished.resumed = result.resumed;
    return finished;
}

}  // namespace sluice::convert
