// A program an app would write against the installed sluice (include/sluice/ and libsluice only):
// load a model, greedy-generate a few tokens from a prompt, print the text. tests/install/run.sh
// builds it against libsluice.so (find_package's sluice::sluice, pkg-config) and libsluice.a
// (sluice::sluice_static) and compares each with `sluice generate`.
#include <sluice/engine.h>
#include <sluice/session.h>
#include <sluice/tokenizer.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: consumer MODEL_DIR PROMPT\n");
        return 2;
    }
    sluice::EngineOptions eo;
    eo.threads = 2;
    // An error crosses the library's boundary as a Status naming the problem.
    eo.model_dir = std::string(argv[1]) + "/no-such-model";
    auto missing = sluice::Engine::load(eo);
    if (missing.has_value() || missing.status().message().find("no-such-model") == std::string::npos) {
        std::fprintf(stderr, "consumer: loading a missing model did not fail naming it\n");
        return 1;
    }
    eo.model_dir = argv[1];
    auto engine = sluice::Engine::load(eo);
    if (!engine.has_value()) {
        std::fprintf(stderr, "consumer: %s\n", engine.status().message().c_str());
        return 1;
    }
    auto tokenizer = (*engine)->tokenizer();
    if (!tokenizer) {
        std::fprintf(stderr, "consumer: the model has no tokenizer\n");
        return 1;
    }
    const std::vector<int32_t> prompt = tokenizer->encode(argv[2]);
    auto session = (*engine)->new_session();
    sluice::GenerateOptions go;
    go.max_tokens = 8;
    go.sampling.temperature = 0.0f;
    auto result = session->generate(prompt, go, [](const sluice::TokenEvent&) { return true; });
    if (!result.has_value()) {
        std::fprintf(stderr, "consumer: %s\n", result.status().message().c_str());
        return 1;
    }
    std::printf("%s", result->text.c_str());
    return 0;
}
