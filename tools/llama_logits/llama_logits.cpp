// llama_logits: llama.cpp's logits at every position of a token-id prompt, as a float32 .npy
// [n_ids, vocab] — the oracle sluice's GGUF runs are compared with (tests/unit/gguf_weights_test.cpp,
// tools/gpu_run.sh step `llamalogits`). Built inside llama.cpp's tree against its public API (llama.h)
// only: tools/gpu_run.sh copies this folder to llama.cpp/tools/sluice-logits and adds it to the build.
//
// Usage: llama-sluice-logits MODEL.gguf IDS OUT.npy [N_GPU_LAYERS] [stepwise]
//   IDS: comma-separated token ids. All ids go through one llama_decode with every position's logits
//   kept (as sluice's prefill), or, with "stepwise", one id per llama_decode (as a decode).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void quiet(ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN && level != GGML_LOG_LEVEL_CONT) std::fputs(text, stderr);
}

bool write_npy(const char* path, const std::vector<float>& data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    FILE* f = std::fopen(path, "wb");
    if (f == nullptr) return false;
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const uint16_t len = static_cast<uint16_t>(header.size());
    bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&len, 2, 1, f) == 1 &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
    return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf IDS OUT.npy [N_GPU_LAYERS] [stepwise]\n", argv[0]);
        return 2;
    }
    std::vector<llama_token> ids;
    for (const char* p = argv[2]; *p;) {
        ids.push_back(static_cast<llama_token>(std::strtol(p, const_cast<char**>(&p), 10)));
        if (*p == ',') ++p;
    }
    const int n_gpu = argc > 4 ? std::atoi(argv[4]) : 0;
    const bool stepwise = argc > 5 && std::strcmp(argv[5], "stepwise") == 0;
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = n_gpu;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const int n = static_cast<int>(ids.size());
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n + 16);
    cp.n_batch = static_cast<uint32_t>(n);
    cp.n_ubatch = static_cast<uint32_t>(n);
    llama_context* ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        std::fprintf(stderr, "cannot make a context\n");
        return 1;
    }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<float> out(static_cast<size_t>(n) * static_cast<size_t>(V));
    llama_batch batch = llama_batch_init(n, 0, 1);
    const int step = stepwise ? 1 : n;
    for (int first = 0; first < n; first += step) {
        batch.n_tokens = 0;
        for (int i = first; i < first + step && i < n; ++i) {
            const int b = batch.n_tokens++;
            batch.token[b] = ids[static_cast<size_t>(i)];
            batch.pos[b] = i;
            batch.n_seq_id[b] = 1;
            batch.seq_id[b][0] = 0;
            batch.logits[b] = 1;
        }
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "llama_decode failed at position %d\n", first);
            return 1;
        }
        for (int b = 0; b < batch.n_tokens; ++b) {
            const float* row = llama_get_logits_ith(ctx, b);
            std::memcpy(out.data() + static_cast<size_t>(first + b) * V, row, sizeof(float) * V);
        }
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    if (!write_npy(argv[3], out, static_cast<size_t>(n), static_cast<size_t>(V))) {
        std::fprintf(stderr, "cannot write %s\n", argv[3]);
        return 1;
    }
    return 0;
}
