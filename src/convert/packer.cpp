#include "convert/packer.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "convert/pack_plan.h"
#include "convert/pack_stream.h"
#include "format/gguf.h"
#include "format/pack.h"
#include "io/mapped_file.h"
#include "model/config.h"
#include "model/weights.h"

namespace sluice::convert {

namespace fs = std::filesystem;

namespace {

// A GGUF by its name (a .gguf, a folder of one) or, for a file named otherwise, by its magic.
bool is_gguf_source(const std::string& path) {
    if (format::is_gguf_model_path(path)) return true;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return false;
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

Expected<PackResult> pack_model(const PackOptions& o) {
    if (is_gguf_source(o.src_dir)) return pack_gguf_model(o);
    std::error_code file_ec;
    if (fs::is_regular_file(o.src_dir, file_ec))
        return error(ErrorCode::kInvalidArgument,
                     "[pack] '" + o.src_dir +
                         "' is a file but not a GGUF (no 'GGUF' magic): pack takes a checkpoint folder "
                         "(config.json and safetensors) or a .gguf");
    if (format::is_packed_dir(o.src_dir))
        return error(ErrorCode::kInvalidArgument, "[pack] '" + o.src_dir + "' is already a packed model");
    std::error_code ec;
    const std::string source = fs::weakly_canonical(o.src_dir, ec).string();
    SLUICE_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::load_model_config(o.src_dir));
    SLUICE_ASSIGN_OR_RETURN(auto ckpt, format::Checkpoint::open(o.src_dir));
    // Binding every tensor checks names, dtypes and shapes before anything is written.
    SLUICE_RETURN_IF_ERROR(model::load_weights(cfg, ckpt, true, /*check_only=*/true).status());
    SLUICE_ASSIGN_OR_RETURN(const int bits, resolve_pack_bits(cfg, o.bits, o.group_size, o.src_dir));
    SLUICE_ASSIGN_OR_RETURN(PackPlan plan, plan_pack(cfg, *ckpt, bits, o.group_size));

    // The source bytes: each shard mapped, handed over in slices (the pieces need no more).
    std::vector<std::shared_ptr<io::MappedFile>> shards(plan.shards.size());
    for (size_t s = 0; s < plan.shards.size(); ++s) {
        SLUICE_ASSIGN_OR_RETURN(shards[s],
                                io::MappedFile::open((fs::path(o.src_dir) / plan.shards[s].file).string()));
        plan.shards[s].size_bytes = shards[s]->size();
    }
    const ShardReader reader = [&](size_t s, uint64_t begin, uint64_t end, const ShardSink& sink) -> Status {
        constexpr uint64_t kSliceBytes = 8ull << 20;
        for (uint64_t at = begin; at < end; at += kSliceBytes)
            SLUICE_RETURN_IF_ERROR(sink({shards[s]->data() + at, std::min(kSliceBytes, end - at)}));
        return Status::ok();
    };
    StreamOptions so;
    so.out_dir = o.out_dir;
    so.record_name = ".pack-progress.json";
    so.source = source;
    so.side_dir = o.src_dir;
    so.progress = o.progress;
    return run_pack_plan(plan, reader, so);
}

Expected<std::vector<std::string>> verify_packed(
    const std::string& dir, const std::function<void(const std::string&, uint64_t, uint64_t)>& progress) {
    SLUICE_ASSIGN_OR_RETURN(format::PackLayout layout, format::open_packed_dir(dir));
    std::vector<std::string> problems;
    auto dense = format::SafetensorsFile::open((fs::path(dir) / layout.dense_file).string());
    if (!dense.has_value()) {
        problems.push_back(dense.status().message());
    } else {
        for (const auto& s : layout.dense) {
            const format::TensorInfo* t = (*dense)->find(s.name);
            if (t == nullptr) {
                problems.push_back("dense tensor '" + s.name + "' is missing from " + layout.dense_file);
                continue;
            }
            if (t->size_bytes != s.size) {
                problems.push_back("dense tensor '" + s.name + "' is " + std::to_string(t->size_bytes) +
                                   " bytes, layout says " + std::to_string(s.size));
                continue;
            }
            if (XXH3_64bits(t->data, t->size_bytes) != s.xxh3)
                problems.push_back("dense tensor '" + s.name + "': checksum mismatch");
        }
    }
    uint64_t layer_index = 0;
    for (const auto& f : layout.expert_files) {
        auto mapped = io::MappedFile::open((fs::path(dir) / f.file).string());
        ++layer_index;
        if (!mapped.has_value()) {
            problems.push_back(mapped.status().message());
            continue;
        }
        const uint64_t want = f.record_stride * static_cast<uint64_t>(layout.n_experts);
        if ((*mapped)->size() != want) {
            problems.push_back(f.file + " is " + std::to_string((*mapped)->size()) + " bytes, expected " +
                               std::to_string(want));
            continue;
        }
        for (int64_t e = 0; e < layout.n_experts; ++e) {
            const uint8_t* rec = (*mapped)->data() + static_cast<uint64_t>(e) * f.record_stride;
            if (XXH3_64bits(rec, f.record_bytes) != f.record_xxh3[static_cast<size_t>(e)])
                problems.push_back(f.file + ": expert " + std::to_string(e) + " (layer " +
                                   std::to_string(f.layer) + "): checksum mismatch");
        }
        if (progress) progress("expert files", layer_index, layout.expert_files.size());
    }
    return problems;
}

}  // namespace sluice::convert
