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

}  // namespace sluice::cli
