// libFuzzer target for the expert pack's description files: any text is parsed as a layout.json
// and as a manifest.json. Each must give a value or a Status (kCorrupt) — never a crash, an
// uncaught exception or a sanitizer report — and whatever parses must serialize to a text that
// parses back to the same serialization (the writer and the reader agree).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/pack.h"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace sluice::format;
    const std::string text(reinterpret_cast<const char*>(data), size);
    if (auto layout = parse_pack_layout(text, "fuzz/layout.json"); layout.has_value()) {
        const std::string written = serialize_pack_layout(*layout);
        auto again = parse_pack_layout(written, "fuzz/layout.json (rewritten)");
        check(again.has_value() && serialize_pack_layout(*again) == written);
        (void)layout->expert_record_bytes_total();
    }
    if (auto manifest = parse_pack_manifest(text, "fuzz/manifest.json"); manifest.has_value()) {
        const std::string written = serialize_pack_manifest(*manifest);
        auto again = parse_pack_manifest(written, "fuzz/manifest.json (rewritten)");
        check(again.has_value() && serialize_pack_manifest(*again) == written);
    }
    return 0;
}
