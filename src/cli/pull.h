// `sluice pull`'s work, shared with MODEL arguments that fetch what is not installed (--pull):
// the Hub's environment ($HF_ENDPOINT, the token from $HF_TOKEN or `hf auth login`'s file), a
// progress bar on stderr, and a one-line summary.
#pragma once

#include "convert/puller.h"

namespace sluice::cli {

// Pulls `o.repo` at `o.revision` into `o.out_dir` (default: the models folder) and returns that
// folder. Throws CliError on failure.
std::string pull_with_progress(convert::PullOptions o);

}  // namespace sluice::cli
