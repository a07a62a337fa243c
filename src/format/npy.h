// NumPy .npy (format 1.0) writer for float32 arrays: what `sluice logits` emits so references
// in Python can np.load() it directly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::format {

// The bytes of a little-endian float32 C-order .npy file of the given shape.
std::string npy_f32(std::span<const float> data, const std::vector<int64_t>& shape);
Status write_npy_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape);

}  // namespace sluice::format
