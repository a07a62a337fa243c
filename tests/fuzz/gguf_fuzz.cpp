// libFuzzer target for the GGUF header parser: any byte string must give either a header whose
// tensors all lie inside the input and whose metadata reads back through every accessor (and, through
// format/tokenizer_gguf.h, a tokenizer spec whose ids are inside its tokens or an error), or an error —
// never a crash, an overread or an allocation beyond a small multiple of the input.
// Seeds: tests/fuzz/seeds/gguf_fuzz (tools/make_gguf_fixtures.py). Run with `make fuzz`.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "format/gguf.h"
#include "format/tokenizer_gguf.h"

namespace {

void touch(const sluice::format::GgufValue& v, int depth) {
    (void)v.describe();
    (void)v.to_uint();
    (void)v.to_int();
    (void)v.to_float();
    (void)v.to_bool();
    (void)v.to_string();
    if (!v.is_array()) return;
    (void)v.to_ints();
    (void)v.to_floats();
    (void)v.to_bools();
    if (v.size() > 0) touch(v.at(v.size() - 1), depth + 1);
    for (const auto& a : v.arrays()) touch(a, depth + 1);
    if (depth > sluice::format::kMaxGgufArrayDepth + 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto header = sluice::format::parse_gguf_header(std::span<const uint8_t>(data, size), "fuzz");
    if (!header.has_value()) return 0;
    if (header->data_start % header->alignment != 0) std::abort();
    for (const auto& [key, value] : header->metadata.entries()) touch(value, 0);
    // The tokenizer and chat template read from the metadata: a spec or an error, never a crash.
    if (auto spec = sluice::format::parse_gguf_tokenizer(header->metadata, "fuzz"); spec.has_value()) {
        for (const auto& a : spec->tokenizer.added_tokens)
            if (a.id < 0 || a.id >= spec->n_tokens) std::abort();
        for (const auto& [text, id] : spec->tokenizer.vocab)
            if (id < 0 || id >= spec->n_tokens) std::abort();
    }
    (void)sluice::format::parse_gguf_chat_template(header->metadata, "fuzz");
    for (const auto& t : header->tensors) {
        if (t.size_bytes > 0 && (t.data < data + header->data_start || t.data + t.size_bytes > data + size))
            std::abort();
        if (t.offset % header->alignment != 0) std::abort();
        if (t.size_bytes != static_cast<uint64_t>(t.rows()) * t.row_bytes()) std::abort();
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < t.size_bytes; ++i) sink = sink ^ t.data[i];  // touch every byte
        (void)sink;
    }
    return 0;
}
