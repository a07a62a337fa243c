#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace sluice::format {

namespace {

struct DTypeEntry {
    DType dtype;
    const char* name;
    size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},   {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI32, "I32", 4},        {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},   {DType::kF64, "F64", 8},        {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},   {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

Status corrupt(const std::string& file, const std::string& what) {
    return error(ErrorCode::kCorrupt, "[safetensors] " + file + ": " + what);
}

}  // namespace

const char* dtype_name(DType dtype) {
    for (const auto& e : kDTypes)
        if (e.dtype == dtype) return e.name;
    return "?";
}

size_t dtype_size(DType dtype) {
    for (const auto& e : kDTypes)
        if (e.dtype == dtype) return e.size;
    return 0;
}

bool parse_dtype(std::string_view name, DType* out) {
    for (const auto& e : kDTypes) {
        if (name == e.name) {
            *out = e.dtype;
            return true;
        }
    }
    return false;
}

std::string describe(DType dtype, const std::vector<int64_t>& shape) {
    std::string s = std::string(dtype_name(dtype)) + " [";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

Expected<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes,
                                                     const std::string& file_name) {
    return parse_safetensors_header(bytes, bytes.size(), file_name);
}

Expected<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                                     const std::string& file_name) {
    // `bytes` is the whole file (data pointers are set) or just its first bytes (header only).
    const bool whole_file = bytes.size() == file_size;
    if (bytes.size() > file_size) return corrupt(file_name, "more bytes than the file size");
    if (file_size < 8 || bytes.size() < 8) {
        return corrupt(file_name, "file is " + std::to_string(file_size) +
                                      " bytes, shorter than the 8-byte header length");
    }
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);  // little-endian on every target sluice supports
    if (header_len > kMaxSafetensorsHeaderBytes) {
        return corrupt(file_name, "header length " + std::to_string(header_len) + " exceeds the " +
                                      std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
    }
    if (header_len > file_size - 8) {
        return corrupt(file_name, "header length " + std::to_string(header_len) +
                                      " runs past the end of the " + std::to_string(file_size) +
                                      "-byte file");
    }
    if (header_len > bytes.size() - 8) {
        return corrupt(file_name, "header length " + std::to_string(header_len) + " but only " +
                                      std::to_string(bytes.size() - 8) + " header bytes given");
    }
    const char* json_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    nlohmann::json header = nlohmann::json::parse(json_begin, json_begin + header_len, nullptr, false);
    if (header.is_discarded()) return corrupt(file_name, "header is not valid JSON");
    if (!header.is_object()) return corrupt(file_name, "header is not a JSON object");

    SafetensorsHeader out;
    out.data_start = 8 + header_len;
    const uint64_t data_size = file_size - out.data_start;

    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& entry = it.value();
        if (name == "__metadata__") {
            if (entry.is_null()) continue;  // mlx writes `"__metadata__": null`
            if (!entry.is_object()) return corrupt(file_name, "__metadata__ is not an object");
            for (auto m = entry.begin(); m != entry.end(); ++m) {
                if (!m.value().is_string())
                    return corrupt(file_name, "__metadata__ value '" + m.key() + "' is not a string");
                out.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = "tensor '" + name + "'";
        if (!entry.is_object()) return corrupt(file_name, where + " entry is not an object");
        auto dt = entry.find("dtype");
        auto sh = entry.find("shape");
        auto off = entry.find("data_offsets");
        if (dt == entry.end() || !dt->is_string())
            return corrupt(file_name, where + " has no string 'dtype'");
        if (sh == entry.end() || !sh->is_array()) return corrupt(file_name, where + " has no array 'shape'");
        if (off == entry.end() || !off->is_array() || off->size() != 2)
            return corrupt(file_name, where + " has no 'data_offsets' [begin, end]");

        TensorInfo t;
        t.name = name;
        if (!parse_dtype(dt->get<std::string>(), &t.dtype))
            return corrupt(file_name, where + " has unknown dtype '" + dt->get<std::string>() + "'");
        // numel with overflow checks: any real tensor is far below 2^62 bytes.
        uint64_t numel = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned())
                return corrupt(file_name, where + " has a shape entry that is not a non-negative integer");
            uint64_t v = d.get<uint64_t>();
            if (v != 0 && numel > (uint64_t{1} << 62) / v)
                return corrupt(file_name, where + " shape overflows");
            numel *= v;
            t.shape.push_back(static_cast<int64_t>(v));
        }
        for (const auto& o : *off)
            if (!o.is_number_unsigned()) return corrupt(file_name, where + " has non-integer data_offsets");
        uint64_t begin = (*off)[0].get<uint64_t>();
        uint64_t end = (*off)[1].get<uint64_t>();
        if (end < begin) return corrupt(file_name, where + " has data_offsets end < begin");
        if (end > data_size) {
            return corrupt(file_name, where + " data_offsets [" + std::to_string(begin) + ", " +
                                          std::to_string(end) + ") run past the data section of " +
                                          std::to_string(data_size) + " bytes");
        }
        uint64_t expected = numel * dtype_size(t.dtype);
        if (end - begin != expected) {
            return corrupt(file_name, where + " " + describe(t.dtype, t.shape) + " needs " +
                                          std::to_string(expected) + " bytes, data_offsets span " +
                                          std::to_string(end - begin));
        }
        t.offset = begin;
        t.size_bytes = end - begin;
        t.data = whole_file ? bytes.data() + out.data_start + begin : nullptr;
        out.tensors.push_back(std::move(t));
    }

    std::sort(out.tensors.begin(), out.tensors.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < out.tensors.size(); ++i) {
        const TensorInfo& prev = out.tensors[i - 1];
        const TensorInfo& cur = out.tensors[i];
        if (prev.size_bytes > 0 && cur.size_bytes > 0 && cur.offset < prev.offset + prev.size_bytes) {
            return corrupt(file_name, "tensors '" + prev.name + "' and '" + cur.name + "' overlap");
        }
    }
    return out;
}

Expected<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(auto mapped, io::MappedFile::open(path));
    SLUICE_ASSIGN_OR_RETURN(auto header, parse_safetensors_header(mapped->bytes(), path));
    auto file = std::make_shared<SafetensorsFile>();
    file->file_ = std::move(mapped);
    file->name_ = std::filesystem::path(path).filename().string();
    file->header_ = std::move(header);
    for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->index_[file->header_.tensors[i].name] = i;
    return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Expected<std::shared_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
    namespace fs = std::filesystem;
    auto ckpt = std::make_shared<Checkpoint>();
    ckpt->dir_ = dir;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return error(ErrorCode::kNotFound, "[safetensors] not a directory: '" + dir + "'");

    std::vector<std::string> shard_names;
    const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;
    if (fs::exists(index_path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(index_path.string()));
        nlohmann::json index = nlohmann::json::parse(text, nullptr, false);
        if (index.is_discarded() || !index.is_object())
            return corrupt(index_path.string(), "is not a valid JSON object");
        auto wm = index.find("weight_map");
        if (wm == index.end() || !wm->is_object())
            return corrupt(index_path.string(), "has no 'weight_map' object");
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it.value().is_string())
                return corrupt(index_path.string(), "weight_map entry '" + it.key() + "' is not a file name");
            std::string shard = it.value().get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard.rfind("..", 0) == 0)
                return corrupt(index_path.string(),
                               "weight_map entry '" + it.key() + "' points outside the folder");
            weight_map[it.key()] = shard;
            if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end())
                shard_names.push_back(shard);
        }
    } else if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
        shard_names.push_back("model.safetensors");
    } else {
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            if (entry.path().extension() == ".safetensors")
                shard_names.push_back(entry.path().filename().string());
        }
        std::sort(shard_names.begin(), shard_names.end());
    }
    if (shard_names.empty())
        return error(ErrorCode::kNotFound, "[safetensors] no .safetensors files in '" + dir + "'");

    for (const auto& shard : shard_names) {
        SLUICE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open((fs::path(dir) / shard).string()));
        for (const auto& t : file->tensors()) {
            auto wm = weight_map.find(t.name);
            if (!weight_map.empty() && (wm == weight_map.end() || wm->second != shard)) {
                // A tensor present in a shard but mapped elsewhere (or not at all) is ambiguous.
                return corrupt(file->path(),
                               "tensor '" + t.name + "' is not mapped to this shard by the index");
            }
            if (!ckpt->tensors_.emplace(t.name, &t).second)
                return corrupt(file->path(), "tensor '" + t.name + "' appears in more than one shard");
        }
        ckpt->files_.push_back(std::move(file));
    }
    for (const auto& [name, shard] : weight_map) {
        if (!ckpt->tensors_.count(name))
            return corrupt(index_path.string(),
                           "tensor '" + name + "' is listed but missing from '" + shard + "'");
    }
    return ckpt;
}

Expected<std::shared_ptr<Checkpoint>> Checkpoint::from_headers(
    const std::string& dir, std::vector<std::pair<std::string, SafetensorsHeader>> headers) {
    auto ckpt = std::make_shared<Checkpoint>();
    ckpt->dir_ = dir;
    for (auto& [name, header] : headers) {
        auto file = std::make_shared<SafetensorsFile>();
        file->name_ = name;
        file->header_ = std::move(header);
        for (size_t i = 0; i < file->header_.tensors.size(); ++i)
            file->index_[file->header_.tensors[i].name] = i;
        for (const auto& t : file->tensors()) {
            if (!ckpt->tensors_.emplace(t.name, &t).second)
                return corrupt(name, "tensor '" + t.name + "' appears in more than one shard");
        }
        ckpt->files_.push_back(std::move(file));
    }
    return ckpt;
}

Expected<std::shared_ptr<Checkpoint>> Checkpoint::open_files(const std::string& dir,
                                                             const std::vector<std::string>& files) {
    auto ckpt = std::make_shared<Checkpoint>();
    ckpt->dir_ = dir;
    for (const auto& name : files) {
        SLUICE_ASSIGN_OR_RETURN(auto file,
                                SafetensorsFile::open((std::filesystem::path(dir) / name).string()));
        for (const auto& t : file->tensors()) {
            if (!ckpt->tensors_.emplace(t.name, &t).second)
                return corrupt(file->path(), "tensor '" + t.name + "' appears in more than one file");
        }
        ckpt->files_.push_back(std::move(file));
    }
    return ckpt;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, info] : tensors_) out.push_back(name);
    return out;
}

uint64_t Checkpoint::total_bytes() const {
    uint64_t total = 0;
    for (const auto& [name, info] : tensors_) total += info->size_bytes;
    return total;
}

Expected<std::string> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        uint64_t numel = 1;
        for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
        if (numel * dtype_size(t.dtype) != t.bytes.size()) {
            return error(ErrorCode::kInvalidArgument, "[safetensors] tensor '" + t.name + "' " +
                                                          describe(t.dtype, t.shape) + " needs " +
                                                          std::to_string(numel * dtype_size(t.dtype)) +
                                                          " bytes, got " + std::to_string(t.bytes.size()));
        }
        header[t.name] = {{"dtype", dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');
    std::string out;
    out.reserve(8 + text.size() + offset);
    uint64_t n = text.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out += text;
    for (const auto& t : tensors) out.append(t.bytes.data(), t.bytes.size());
    return out;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
    SLUICE_ASSIGN_OR_RETURN(std::string bytes, serialize_safetensors(tensors, metadata));
    return io::write_file_atomic(path, bytes);
}

}  // namespace sluice::format
