// sluice's command-line entry point: builds the CLI11 app from the command table, runs the
// chosen command, and turns a failure into one line on stderr. Exit codes: 0 success, 1 the
// command failed (a model that does not load, a file that cannot be read, ...), 2 a usage error
// (an unknown flag, a value out of range, a missing argument), 3 an internal error.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/command.h"
#include "core/log.h"
#include "sluice/version.h"

namespace sluice::cli {

std::vector<CommandEntry>& command_table() {
    static std::vector<CommandEntry> table;
    return table;
}

}  // namespace sluice::cli

namespace {

// Flags people type from llama.cpp's tools, with what sluice takes instead. CLI11 would read
// "-ngl 99" as "-n gl" and complain about converting "gl".
const char* habit_hint(std::string_view arg) {
    struct Hint {
        std::string_view flag;
        const char* hint;
    };
    static constexpr Hint kHints[] = {
        {"-ngl",
         "sluice has no -ngl: --device cuda runs every layer on the GPU (--gpu-memory SIZE bounds it; "
         "routed experts that do not fit are cached and streamed)"},
        {"--n-gpu-layers",
         "sluice has no --n-gpu-layers: --device cuda runs every layer on the GPU (--gpu-memory "
         "SIZE bounds it)"},
        {"--gpu-layers", "sluice has no --gpu-layers: use --device cuda (and --gpu-memory SIZE)"},
        {"-fa", "sluice has no -fa: attention is always fused"},
        {"--flash-attn", "sluice has no --flash-attn: attention is always fused"},
        {"--ctx", "the context flag is -c/--ctx-size"},
        {"-ctk", "sluice has no -ctk: --kv-bits 16|8|4|3 compresses the KV cache"},
        {"--cache-type-k", "sluice has no --cache-type-k: --kv-bits 16|8|4|3 compresses the KV cache"},
        {"-np", "sluice has no -np: serve --parallel N"},
        {"-hf",
         "sluice has no -hf: give the Hugging Face id as the model (ORG/NAME[@REV]), with --pull to fetch "
         "it"},
    };
    for (const Hint& h : kHints)
        if (arg == h.flag ||
            (arg.starts_with(h.flag) && arg.size() > h.flag.size() && arg[h.flag.size()] == '='))
            return h.hint;
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace sluice;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) break;
        if (const char* hint = habit_hint(argv[i])) {
            std::fprintf(stderr, "sluice: error: %s\n", hint);
            return 2;
        }
    }
    CLI::App app{"sluice: runs giant Mixture-of-Experts models by streaming experts from SSD", "sluice"};
    app.set_version_flag("--version", version_line());
    app.require_subcommand(1);
    app.get_formatter()->column_width(36);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Print detail (debug logging)");
    app.parse_complete_callback([&] {
        if (verbose) log::set_level(log::Level::kDebug);
    });

    auto& table = cli::command_table();
    std::sort(table.begin(), table.end(),
              [](const cli::CommandEntry& a, const cli::CommandEntry& b) { return a.order < b.order; });
    for (auto& entry : table) entry.setup(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version are "errors" with code 0; every other is a usage error.
        return app.exit(e) == 0 ? 0 : 2;
    } catch (const cli::CliError& e) {
        std::fprintf(stderr, "sluice: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice: internal error: %s\n", e.what());
        return 3;
    }
    return 0;
}
