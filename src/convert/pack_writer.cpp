#include "convert/pack_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "format/hub_api.h"
#include "io/mapped_file.h"

namespace sluice::convert {

namespace fs = std::filesystem;

namespace {

uint64_t round_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

Status os_error(const std::string& what, const std::string& path) {
    return error(ErrorCode::kIo, "[pack] " + what + " '" + path + "': " + std::strerror(errno));
}

// A file written through a ".partial" name and renamed into place by commit().
class PartialFile {
 public:
    explicit PartialFile(std::string path) : path_(std::move(path)), partial_(path_ + ".partial") {}
    ~PartialFile() {
        if (fd_ >= 0) {
            ::close(fd_);
            ::unlink(partial_.c_str());
        }
    }
    Status open() {
        fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        return fd_ < 0 ? os_error("cannot create", partial_) : Status::ok();
    }
    Status write_at(const void* data, uint64_t size, uint64_t offset) {
        const auto* p = static_cast<const uint8_t*>(data);
        uint64_t done = 0;
        while (done < size) {
            ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(offset + done));
            if (n < 0) {
                if (errno == EINTR) continue;
                return os_error("cannot write", partial_);
            }
            done += static_cast<uint64_t>(n);
        }
        return Status::ok();
    }
    Status commit() {
        if (::fsync(fd_) != 0) return os_error("cannot flush", partial_);
        ::close(fd_);
        fd_ = -1;
        if (::rename(partial_.c_str(), path_.c_str()) != 0) return os_error("cannot rename onto", path_);
        return Status::ok();
    }

 private:
    std::string path_, partial_;
    int fd_ = -1;
};

}  // namespace

std::string dense_file_header(const std::vector<format::PackSection>& sections) {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "sluice-pack"}};
    for (const auto& s : sections) {
        header[s.name] = {{"dtype", format::dtype_name(s.dtype)},
                          {"shape", s.shape},
                          {"data_offsets", {s.offset, s.offset + s.size}}};
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 64 != 0) text.push_back(' ');
    const uint64_t header_len = text.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &header_len, 8);
    return out + text;
}

uint64_t DenseTensorSpec::size_bytes() const {
    uint64_t n = format::dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

Expected<std::vector<format::PackSection>> write_dense_file(
    const std::string& path, std::vector<DenseTensorSpec>& tensors,
    const std::function<void(uint64_t, uint64_t)>& progress) {
    // Header first (all sizes are known up front), then the tensors in order.
    std::vector<format::PackSection> sections;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        const uint64_t size = t.size_bytes();
        format::PackSection s;
        s.name = t.name;
        s.dtype = t.dtype;
        s.shape = t.shape;
        s.offset = offset;
        s.size = size;
        s.bits = t.bits;
        s.group_size = t.group_size;
        sections.push_back(std::move(s));
        offset += size;
    }
    const std::string header_bytes = dense_file_header(sections);
    PartialFile file(path);
    SLUICE_RETURN_IF_ERROR(file.open());
    SLUICE_RETURN_IF_ERROR(file.write_at(header_bytes.data(), header_bytes.size(), 0));
    const uint64_t data_start = header_bytes.size();
    std::vector<uint8_t> buffer;
    for (size_t i = 0; i < tensors.size(); ++i) {
        buffer.assign(sections[i].size, 0);
        SLUICE_RETURN_IF_ERROR(
            tensors[i].fill(buffer.data()).with_context("[pack] tensor '" + tensors[i].name + "'"));
        sections[i].xxh3 = XXH3_64bits(buffer.data(), buffer.size());
        SLUICE_RETURN_IF_ERROR(file.write_at(buffer.data(), buffer.size(), data_start + sections[i].offset));
        tensors[i].fill = nullptr;  // release anything the producer captured
        if (progress) progress(sections[i].offset + sections[i].size, offset);
    }
    SLUICE_RETURN_IF_ERROR(file.commit());
    return sections;
}

format::PackProjection make_projection(int64_t rows, int64_t cols, int bits, int group_size,
                                       format::DType float_dtype, format::DType scale_dtype) {
    format::PackProjection p;
    p.rows = rows;
    p.cols = cols;
    p.bits = bits;
    p.group_size = bits ? group_size : 0;
    if (bits == 0) {
        p.weight = {"weight",
                    float_dtype,
                    {rows, cols},
                    0,
                    static_cast<uint64_t>(rows * cols) * format::dtype_size(float_dtype)};
        return p;
    }
    const int64_t words = cols * bits / 32, groups = cols / group_size;
    p.weight = {"weight", format::DType::kU32, {rows, words}, 0, static_cast<uint64_t>(rows * words) * 4,
                bits,     group_size};
    const uint64_t ss = format::dtype_size(scale_dtype);
    p.scales = {"scales", scale_dtype, {rows, groups}, 0, static_cast<uint64_t>(rows * groups) * ss};
    p.biases = {"biases", scale_dtype, {rows, groups}, 0, static_cast<uint64_t>(rows * groups) * ss};
    return p;
}

format::PackProjection make_ggml_projection(int64_t rows, int64_t cols, format::GgmlType type) {
    const format::GgmlTypeInfo& t = *format::ggml_type_info(static_cast<uint32_t>(type));
    const int64_t row_bytes = cols / t.block_elems * t.block_bytes;
    format::PackProjection p;
    p.rows = rows;
    p.cols = cols;
    p.ggml_type = type;
    p.weight = {"weight", format::DType::kU8, {rows, row_bytes}, 0, static_cast<uint64_t>(rows * row_bytes)};
    p.weight.ggml_type = type;
    return p;
}

format::PackExpertFile make_expert_file_layout(int64_t layer, const format::PackProjection& gate,
                                               const format::PackProjection& up,
                                               const format::PackProjection& down) {
    format::PackExpertFile f;
    f.layer = layer;
    char name[64];
    std::snprintf(name, sizeof name, "experts/layer_%03lld.bin", static_cast<long long>(layer));
    f.file = name;
    f.gate = gate;
    f.up = up;
    f.down = down;
    uint64_t offset = 0;
    const char* proj_names[] = {"gate", "up", "down"};
    int pi = 0;
    for (format::PackProjection* p : {&f.gate, &f.up, &f.down}) {
        for (format::PackSection* s : {&p->weight, &p->scales, &p->biases}) {
            if (s->size == 0) continue;
            s->name = std::string(proj_names[pi]) + "." + s->name;
            s->offset = offset;
            offset = round_up(offset + s->size, format::kPackSectionAlign);
        }
        ++pi;
    }
    f.record_bytes = offset;
    f.record_stride = round_up(offset, format::kPackRecordAlign);
    return f;
}

Status write_expert_file(const std::string& path, int64_t n_experts, format::PackExpertFile& layout,
                         const std::function<Status(int64_t expert, uint8_t* record)>& fill) {
    PartialFile file(path);
    SLUICE_RETURN_IF_ERROR(file.open());
    std::unique_ptr<uint8_t, decltype(&std::free)> record(
        static_cast<uint8_t*>(std::aligned_alloc(format::kPackRecordAlign, layout.record_stride)),
        &std::free);
    if (!record) return error(ErrorCode::kOutOfMemory, "[pack] cannot allocate a record buffer");
    layout.record_xxh3.assign(static_cast<size_t>(n_experts), 0);
    for (int64_t e = 0; e < n_experts; ++e) {
        std::memset(record.get(), 0, layout.record_stride);
        SLUICE_RETURN_IF_ERROR(fill(e, record.get()));
        layout.record_xxh3[static_cast<size_t>(e)] = XXH3_64bits(record.get(), layout.record_bytes);
        SLUICE_RETURN_IF_ERROR(file.write_at(record.get(), layout.record_stride,
                                             static_cast<uint64_t>(e) * layout.record_stride));
    }
    return file.commit();
}

Expected<std::vector<std::string>> copy_model_side_files(const std::string& src_dir,
                                                         const std::string& out_dir) {
    std::vector<std::string> copied;
    std::error_code ec;
    for (const std::string& name : format::model_side_file_names()) {
        const fs::path src = fs::path(src_dir) / name;
        if (!fs::exists(src, ec)) continue;  // follows symlinks: a dangling one counts as absent
        const fs::path real = fs::canonical(src, ec);
        if (ec) return error(ErrorCode::kIo, "[pack] cannot resolve '" + src.string() + "': " + ec.message());
        SLUICE_ASSIGN_OR_RETURN(std::string contents, io::read_text_file(real.string()));
        SLUICE_RETURN_IF_ERROR(io::write_file_atomic((fs::path(out_dir) / name).string(), contents));
        copied.emplace_back(name);
    }
    return copied;
}

Status write_manifest(const std::string& out_dir, const std::vector<std::string>& files) {
    format::PackManifest m;
    m.format = format::kPackFormatMagic;
    m.version = format::kPackFormatVersion;
    std::error_code ec;
    for (const auto& f : files) {
        const uint64_t size = fs::file_size(fs::path(out_dir) / f, ec);
        if (ec)
            return error(ErrorCode::kIo, "[pack] cannot stat '" + f + "' for the manifest: " + ec.message());
        m.files.emplace_back(f, size);
        if (format::manifest_checksums(f, "dense.safetensors")) {
            SLUICE_ASSIGN_OR_RETURN(std::string contents,
                                    io::read_text_file((fs::path(out_dir) / f).string()));
            m.xxh3.emplace_back(f, XXH3_64bits(contents.data(), contents.size()));
        }
    }
    return io::write_file_atomic((fs::path(out_dir) / "manifest.json").string(),
                                 format::serialize_pack_manifest(m));
}

}  // namespace sluice::convert
