// A read-only memory map of a whole file. Used for safetensors shards and the dense weights of a
// model: the OS pages bytes in on demand and may drop them under pressure, so mapping a 40 GB
// checkpoint costs address space, not RAM.
//
// Lifetime: the mapping lives as long as the MappedFile; spans handed out point into it.
// Thread safety: immutable after open; safe to read from any thread.
// Rejected alternative: reading whole files into heap buffers (doubles peak memory at load).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "sluice/status.h"

namespace sluice::io {

class MappedFile {
 public:
    static Expected<std::shared_ptr<MappedFile>> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
    MappedFile(std::string path, const uint8_t* data, size_t size)
        : path_(std::move(path)), data_(data), size_(size) {}
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Reads a whole (small) file: configs, tokenizer files, templates.
Expected<std::string> read_text_file(const std::string& path);

// Writes `contents` to `path` atomically: a temporary file in the same folder, fsync, rename.
// A crash leaves either the old file or the new one, never a half-written file.
Status write_file_atomic(const std::string& path, std::string_view contents);

}  // namespace sluice::io
