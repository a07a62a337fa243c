// Small parsers shared by CLI commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::cli {

// "1,2,3" or "1 2 3" → ids; a non-integer entry is an error naming it.
Expected<std::vector<int32_t>> parse_ids(const std::string& text);

// "3G", "512M", "1.5GiB", "1000000" → bytes.
Expected<uint64_t> parse_size(const std::string& text);

// The whole of a file, or of standard input when `path` is "-". `what` names it in the error.
std::string read_input(const std::string& path, const std::string& what);

// `text` into a file, or onto standard output when `path` is "-". Throws CliError naming `what`
// when the file cannot be written.
void write_output(const std::string& path, const std::string& text, const std::string& what);

}  // namespace sluice::cli
