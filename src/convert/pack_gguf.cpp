// `sluice pack FILE.gguf OUT`: a GGUF (one file, or a split set opened by its first) into the packed
// streaming layout with every tensor's bytes verbatim — its ggml blocks as the file holds them, no
// requantisation: a Q4_K file becomes a pack whose experts and dense tensors are the same Q4_K blocks
// (docs/FORMATS.md, "A pack of a GGUF").
//
// The plan is a PackPlan like any pack's (pack_plan.h): the shards are the GGUF's files and every piece
// is a copy — each dense tensor to its place in dense.safetensors under its GGUF name (a block type as
// U8 rows of its blocks, layout.json's ggml_type saying which; an element type as its own dtype), and
// each expert's slice of blk.N.ffn_{gate,up,down}_exps (expert e: bytes [e·slice, (e+1)·slice) of the
// tensor) to its section of record e of experts/layer_NNN.bin. So run_pack_plan (pack_stream.h) streams
// it like a checkpoint's: the files read in order by pread into one 8 MiB buffer (not mapped: the
// process never holds more of the model than that), outputs preallocated under ".partial" names and
// renamed only once every byte is there, resumable after a kill. What the metadata says becomes the
// files a packed folder has: config.json (model_config_json of the config a GGUF load derives) and, when
// the file has a tokenizer, tokenizer.json and tokenizer_config.json with its chat template
// (format::hf_tokenizer_files_from_gguf) — the pack needs nothing of the GGUF afterwards and tokenizes as
// it does. layout.json says source_layout "gguf": the loader binds the dense tensors by their GGUF names
// as a GGUF load binds them (model/weights_gguf.h load_gguf_pack_weights), so a pack runs exactly the
// model the file runs.
//
// Before anything is written the file is bound as `sluice generate FILE.gguf` binds it
// (model::load_gguf_weights): a tensor of other dims than the config implies, a type sluice has no
// kernels for, an expert tensor missing — each is refused naming the file and the tensor, and OUT is not
// touched.
//
// Not packed: the blocks sluice does not run — those after the decoder and its MTP layer (GLM's nextn
// blocks; Qwen MTP blocks after the first), as a pack of the Hugging Face checkpoint leaves them out.
//
// Rejected alternative: renaming the tensors to Hugging Face's and binding them with the checkpoint
// binder — the converter reorders rows and columns (Qwen3.5's tiled value heads, Qwen3-Next's qkvz
// split) in ways a block format cannot undo column-wise, and norms hold a folded +1; the GGUF binder
// already absorbs all of it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "convert/pack_plan.h"
#include "convert/pack_stream.h"
#include "convert/pack_writer.h"
#include "convert/packer.h"
#include "format/tokenizer_gguf.h"
#include "model/config_gguf.h"
#include "model/weights_gguf.h"

namespace sluice::convert {

namespace fs = std::filesystem;
using format::GgufTensor;

namespace {

// "blk.N." → N, or -1 for a tensor outside the blocks.
int64_t block_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::strtoll(name.c_str() + 4, nullptr, 10);
}

constexpr const char* kExpertTensors[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                           "ffn_down_exps.weight"};

bool is_routed_expert(const std::string& name) {
    for (const char* suffix : kExpertTensors)
        if (name.ends_with(std::string(".") + suffix)) return true;
    return false;
}

// The projection of one expert's slice of `t` ([E, rows, cols]): its float dtype, or its blocks.
format::PackProjection projection_of(const GgufTensor& t) {
    const int64_t rows = t.dims[1], cols = t.dims[0];
    if (auto dtype = format::ggml_element_dtype(t.type)) return make_projection(rows, cols, 0, 0, *dtype);
    return make_ggml_projection(rows, cols, t.type);
}

constexpr uint64_t kReadSliceBytes = 8ull << 20;

// Bytes [begin, end) of `path` handed to `sink` in slices of `buffer`, by pread (sequential: the kernel
// reads ahead). A file shorter than `end` — changed since it was parsed — is an error naming it.
Status read_slices(const std::string& path, uint64_t begin, uint64_t end, std::vector<uint8_t>& buffer,
                   const ShardSink& sink) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error(ErrorCode::kIo, "[pack] cannot open '" + path + "': " + std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    ::posix_fadvise(fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_SEQUENTIAL);
    for (uint64_t at = begin; at < end;) {
        const uint64_t want = std::min<uint64_t>(buffer.size(), end - at);
        uint64_t got = 0;
        while (got < want) {
            const ssize_t n = ::pread(fd, buffer.data() + got, want - got, static_cast<off_t>(at + got));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0)
                return error(ErrorCode::kIo, "[pack] cannot read '" + path + "': " + std::strerror(errno));
            if (n == 0)
                return error(ErrorCode::kIo, "[pack] '" + path + "' ends at byte " +
                                                 std::to_string(at + got) + ", before its " +
                                                 std::to_string(end) +
                                                 " bytes: it changed while it was packed");
            got += static_cast<uint64_t>(n);
        }
        SLUICE_RETURN_IF_ERROR(sink({buffer.data(), want}));
        at += want;
    }
    return Status::ok();
}

}  // namespace

Expected<PackPlan> plan_gguf_pack(const model::ModelConfig& cfg, const format::GgufCheckpoint& gguf) {
    PackPlan plan;
    plan.bits = 0;
    plan.group_size = 0;
    format::PackLayout& layout = plan.layout;
    layout.source_layout = "gguf";
    layout.n_experts = cfg.n_experts;
    for (const auto& f : gguf.files())
        plan.shards.push_back({fs::path(f->path()).filename().string(), f->size_bytes(), {}});
    // The blocks that run: the decoder's and its MTP layer (blk.{n_layers}).
    const int64_t kept_blocks = cfg.n_layers + cfg.mtp_layers;
    auto copy = [&](const GgufTensor& t, uint64_t within, uint64_t bytes, uint32_t out_file, uint64_t dst) {
        PlanPiece p;
        p.src_begin = t.file_offset + within;
        p.src_bytes = bytes;
        p.out_file = out_file;
        p.dst = dst;
        plan.shards[t.file_index].pieces.push_back(p);
    };

    // Dense: every tensor but the routed experts, in file order, its bytes as they are.
    std::vector<const GgufTensor*> dense;
    uint64_t offset = 0;
    for (const GgufTensor* t : gguf.tensors()) {
        const int64_t block = block_of(t->name);
        if (block >= kept_blocks || (block >= 0 && is_routed_expert(t->name))) continue;
        format::PackSection s;
        s.name = t->name;
        s.shape = t->shape();
        if (auto dtype = format::ggml_element_dtype(t->type)) {
            s.dtype = *dtype;
        } else {
            s.dtype = format::DType::kU8;
            s.ggml_type = t->type;
            if (s.shape.empty()) s.shape.push_back(1);
            s.shape.back() = static_cast<int64_t>(t->row_bytes());
        }
        s.offset = offset;
        s.size = t->size_bytes;
        offset += s.size;
        layout.dense.push_back(std::move(s));
        dense.push_back(t);
    }
    plan.dense_header = dense_file_header(layout.dense);
    const uint64_t dense_data = plan.dense_header.size();
    plan.out_files.push_back({layout.dense_file, dense_data + offset});
    for (size_t i = 0; i < dense.size(); ++i)
        copy(*dense[i], 0, dense[i]->size_bytes, 0, dense_data + layout.dense[i].offset);

    // Experts: one file per MoE layer, record e = expert e's slices of gate, up and down.
    for (int64_t l = 0; l < kept_blocks; ++l) {
        if (!cfg.is_moe_layer(l)) continue;
        const GgufTensor* proj[3];
        for (int p = 0; p < 3; ++p) {
            const std::string name = "blk." + std::to_string(l) + "." + kExpertTensors[p];
            proj[p] = gguf.find(name);
            if (proj[p] == nullptr || proj[p]->dims.size() != 3 || proj[p]->dims[2] != cfg.n_experts)
                return error(ErrorCode::kInvalidArgument,
                             "[pack] " + gguf.files().front()->path() + ": tensor '" + name + "' " +
                                 (proj[p] == nullptr ? std::string("is missing")
                                                     : "is " + format::describe(*proj[p]) + ", not [" +
                                                           std::to_string(cfg.n_experts) + ", rows, cols]"));
        }
        format::PackExpertFile file = make_expert_file_layout(
            l, projection_of(*proj[0]), projection_of(*proj[1]), projection_of(*proj[2]));
        const auto out_index = static_cast<uint32_t>(plan.out_files.size());
        plan.out_files.push_back({file.file, file.record_stride * static_cast<uint64_t>(cfg.n_experts)});
        const format::PackProjection* sections[3] = {&file.gate, &file.up, &file.down};
        for (int64_t e = 0; e < cfg.n_experts; ++e) {
            const uint64_t base = static_cast<uint64_t>(e) * file.record_stride;
            for (int p = 0; p < 3; ++p) {
                const uint64_t slice = proj[p]->size_bytes / static_cast<uint64_t>(cfg.n_experts);
                copy(*proj[p], static_cast<uint64_t>(e) * slice, slice, out_index,
                     base + sections[p]->weight.offset);
            }
        }
        layout.expert_files.push_back(std::move(file));
    }
    SLUICE_RETURN_IF_ERROR(order_plan_pieces(&plan));
    return plan;
}

Expected<PackResult> pack_gguf_model(const PackOptions& o) {
    if (o.bits != 0)
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + o.src_dir +
                         "' is a GGUF: its tensors are packed as they are, in their own ggml types; --bits "
                         "converts Hugging Face checkpoints");
    SLUICE_ASSIGN_OR_RETURN(auto gguf, format::GgufCheckpoint::open(o.src_dir));
    const std::string first = gguf->files().front()->path();
    SLUICE_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::load_gguf_model_config(*gguf));
    // Binding every tensor (the experts checked, not bound) refuses a file sluice would not run before
    // anything is written.
    SLUICE_RETURN_IF_ERROR(model::load_gguf_weights(cfg, gguf, /*bind_experts=*/false).status());
    SLUICE_ASSIGN_OR_RETURN(PackPlan plan, plan_gguf_pack(cfg, *gguf));

    StreamOptions so;
    SLUICE_ASSIGN_OR_RETURN(std::string config_json, model::model_config_json(cfg));
    so.generated_files.emplace_back("config.json", std::move(config_json));
    if (gguf->metadata().has(format::kGgufTokenizerModel)) {
        SLUICE_ASSIGN_OR_RETURN(format::HfTokenizerFiles tokenizer,
                                format::hf_tokenizer_files_from_gguf(gguf->metadata(), first));
        so.generated_files.emplace_back("tokenizer.json", std::move(tokenizer.tokenizer_json));
        so.generated_files.emplace_back("tokenizer_config.json", std::move(tokenizer.tokenizer_config_json));
    }

    // The source bytes: each file read in order in slices of one buffer (the pieces need no more), so
    // the process holds one slice of the model, not the pages of a mapping of all of it.
    std::vector<std::string> paths;
    for (const auto& f : gguf->files()) paths.push_back(f->path());
    std::vector<uint8_t> buffer(kReadSliceBytes);
    const ShardReader reader = [&](size_t s, uint64_t begin, uint64_t end, const ShardSink& sink) -> Status {
        return read_slices(paths[s], begin, end, buffer, sink);
    };
    std::error_code ec;
    so.out_dir = o.out_dir;
    so.record_name = ".pack-progress.json";
    so.source = fs::weakly_canonical(first, ec).string();
    so.progress = o.progress;
    return run_pack_plan(plan, reader, so);
}

}  // namespace sluice::convert
