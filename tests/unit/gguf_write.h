// A GGUF written back from a parsed one, for tests that need a file the fixtures do not hold: the same
// metadata and tensors re-laid (a split set: NAME-0000i-of-0000N.gguf, as llama.cpp's gguf-split
// writes it — every key in the first file, split.no / split.count in each, split.tensors.count in the
// first), or one tensor's info changed. Values are re-encoded by type (gguf.h's GgufValue accessors), so
// what is written is what the parser read.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "gguf_bytes.h"

namespace sluice::testing {

// A value's bytes after its type tag.
inline std::string gguf_value_bytes(const format::GgufValue& v) {
    using T = format::GgufValueType;
    auto le = [](uint64_t bits, int bytes) {
        return std::string(reinterpret_cast<const char*>(&bits), bytes);
    };
    switch (v.type()) {
        case T::kU8: return le(*v.to_uint(), 1);
        case T::kU16: return le(*v.to_uint(), 2);
        case T::kU32: return le(*v.to_uint(), 4);
        case T::kU64: return le(*v.to_uint(), 8);
        case T::kI8: return le(static_cast<uint64_t>(*v.to_int()), 1);
        case T::kI16: return le(static_cast<uint64_t>(*v.to_int()), 2);
        case T::kI32: return le(static_cast<uint64_t>(*v.to_int()), 4);
        case T::kI64: return le(static_cast<uint64_t>(*v.to_int()), 8);
        case T::kBool: return std::string(1, *v.to_bool() ? '\1' : '\0');
        case T::kF32: {
            const auto f = static_cast<float>(*v.to_float());
            return std::string(reinterpret_cast<const char*>(&f), 4);
        }
        case T::kF64: {
            const double d = *v.to_float();
            return std::string(reinterpret_cast<const char*>(&d), 8);
        }
        case T::kString: return gstr(*v.to_string());
        case T::kArray: {
            std::string out = le32(static_cast<uint32_t>(v.element_type())) + le64(v.size());
            if (v.element_type() == T::kString) {
                for (const std::string& s : v.strings()) out += gstr(s);
            } else if (v.element_type() == T::kArray) {
                for (const format::GgufValue& a : v.arrays()) out += gguf_value_bytes(a);
            } else {
                for (uint64_t i = 0; i < v.size(); ++i) out += gguf_value_bytes(v.at(i));
            }
            return out;
        }
    }
    return {};
}

struct GgufTensorBytes {
    std::string name;
    uint32_t type = 0;          // ggml type number
    std::vector<int64_t> dims;  // GGUF order
    const uint8_t* data = nullptr;
    uint64_t size = 0;
};

// "GGUF", version 3, the pairs, the tensor infos, padding, the data (each tensor `alignment`-aligned).
inline std::string gguf_file_bytes(const std::vector<std::pair<std::string, format::GgufValue>>& kv,
                                   const std::vector<GgufTensorBytes>& tensors, uint64_t alignment) {
    std::string out = "GGUF" + le32(3) + le64(tensors.size()) + le64(kv.size());
    for (const auto& [key, value] : kv)
        out += gstr(key) + le32(static_cast<uint32_t>(value.type())) + gguf_value_bytes(value);
    uint64_t offset = 0;
    for (const GgufTensorBytes& t : tensors) {
        out += gstr(t.name) + le32(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) out += le64(static_cast<uint64_t>(d));
        out += le32(t.type) + le64(offset);
        offset = (offset + t.size + alignment - 1) / alignment * alignment;
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    for (const GgufTensorBytes& t : tensors) {
        out.append(reinterpret_cast<const char*>(t.data), t.size);
        out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    }
    return out;
}

inline std::vector<GgufTensorBytes> gguf_tensors_of(const format::GgufCheckpoint& ckpt) {
    std::vector<GgufTensorBytes> out;
    for (const format::GgufTensor* t : ckpt.tensors())
        out.push_back({t->name, static_cast<uint32_t>(t->type), t->dims, t->data, t->size_bytes});
    return out;
}

// `ckpt` as a split set of `n` files PREFIX-0000i-of-0000N.gguf, its tensors dealt out in order: the
// files' contents, first to last.
inline std::vector<std::string> gguf_split_bytes(const format::GgufCheckpoint& ckpt, int n) {
    using format::GgufValue;
    using format::GgufValueType;
    const auto tensors = gguf_tensors_of(ckpt);
    const uint64_t alignment = ckpt.files().front()->header().alignment;
    std::vector<std::string> files;
    size_t next = 0;
    for (int i = 0; i < n; ++i) {
        std::vector<std::pair<std::string, GgufValue>> kv;
        if (i == 0)
            for (const auto& e : ckpt.metadata().entries())
                if (!e.first.starts_with("split.")) kv.push_back(e);
        kv.emplace_back("split.no", GgufValue::scalar(GgufValueType::kU16, static_cast<uint64_t>(i)));
        kv.emplace_back("split.count", GgufValue::scalar(GgufValueType::kU16, static_cast<uint64_t>(n)));
        if (i == 0)
            kv.emplace_back("split.tensors.count", GgufValue::scalar(GgufValueType::kI32, tensors.size()));
        const size_t end = i + 1 == n ? tensors.size() : tensors.size() * static_cast<size_t>(i + 1) / n;
        std::vector<GgufTensorBytes> part(tensors.begin() + static_cast<std::ptrdiff_t>(next),
                                          tensors.begin() + static_cast<std::ptrdiff_t>(end));
        next = end;
        files.push_back(gguf_file_bytes(kv, part, alignment));
    }
    return files;
}

}  // namespace sluice::testing
