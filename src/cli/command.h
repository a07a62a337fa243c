// The CLI's command table. Each command lives in its own file (cmd_<name>.cpp) and registers
// itself with SLUICE_COMMAND, so adding a command never touches main.cpp:
//
//   static int run_tokenize(const TokenizeOptions&);
//   SLUICE_COMMAND(tokenize, 20, [](CLI::App& app) { ... app.add_subcommand(...) ... });
//
// A command's setup function adds one CLI11 subcommand and sets its callback. Callbacks report
// failure by throwing CliError (caught in main, printed as one line, exit code 1); the library
// itself never exits. Commands use only the public API in include/sluice/.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::cli {

struct CliError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws CliError with the Status message when `status` is an error.
inline void check(const Status& status) {
    if (!status.is_ok()) throw CliError(status.message());
}
template <typename T>
T check(Expected<T> value) {
    if (!value.has_value()) throw CliError(value.status().message());
    return std::move(value).value();
}

using CommandSetup = std::function<void(CLI::App&)>;

struct CommandEntry {
    const char* name;
    int order;  // position in `sluice --help`
    CommandSetup setup;
};

std::vector<CommandEntry>& command_table();

struct CommandRegistrar {
    CommandRegistrar(const char* name, int order, CommandSetup setup) {
        command_table().push_back({name, order, std::move(setup)});
    }
};

}  // namespace sluice::cli

#define SLUICE_COMMAND(name, order, setup) \
    static ::sluice::cli::CommandRegistrar sluice_command_##name(#name, order, setup)
