// sluice's command-line entry point: builds the CLI11 app from the command table, runs the
// chosen command, and turns a failure into one line on stderr and exit code 1.
#include <algorithm>
#include <cstdio>

#include "cli/command.h"
#include "core/log.h"

namespace sluice::cli {

std::vector<CommandEntry>& command_table() {
    static std::vector<CommandEntry> table;
    return table;
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
    using namespace sluice;
    CLI::App app{"sluice: runs giant Mixture-of-Experts models by streaming experts from SSD", "sluice"};
    app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);
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
        return app.exit(e);
    } catch (const cli::CliError& e) {
        std::fprintf(stderr, "sluice: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice: internal error: %s\n", e.what());
        return 2;
    }
    return 0;
}
