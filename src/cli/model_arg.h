// The MODEL argument of every command that loads a model: a path, or a Hugging Face id
// ORG/NAME[@REV] found in sluice's models folder or the Hugging Face cache
// (convert/model_store.h). One that is not installed is pulled into the models folder with
// --pull, or after a yes when stdin and stderr are a terminal; otherwise the error says where it
// looked and the command that fetches it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace sluice::cli {

// Adds the positional `model` and --pull to `cmd`; once parsing is complete (before the command's
// callback) `*model` holds the resolved folder.
void add_model_arg(CLI::App* cmd, std::string* model, const std::string& help);

// A path stays as given; an id becomes its folder (pulled when `pull`); a checkpoint found in the
// Hugging Face cache becomes its packed layout, made once (convert::hf_packed_dir) unless !pack.
// Throws CliError.
std::string resolve_model_arg(const std::string& arg, bool pull, bool pack = true);

}  // namespace sluice::cli
