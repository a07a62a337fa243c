#include "format/npy.h"

#include "io/mapped_file.h"

namespace sluice::format {

std::string npy_f32(std::span<const float> data, const std::vector<int64_t>& shape) {
    std::string dims;
    for (int64_t d : shape) dims += std::to_string(d) + ", ";
    // "(3,)" keeps its comma, "(2, 3)" does not.
    if (!dims.empty()) dims.resize(dims.size() - (shape.size() == 1 ? 1 : 2));
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    // magic(6) + version(2) + header_len(2) + header, padded with spaces and ending in '\n' to 64 bytes.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header.push_back('\n');
    std::string out("\x93NUMPY\x01\x00", 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out.push_back(static_cast<char>(len & 0xff));
    out.push_back(static_cast<char>(len >> 8));
    out += header;
    out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
    return out;
}

Status write_npy_f32(const std::string& path, std::span<const float> data,
                     const std::vector<int64_t>& shape) {
    return io::write_file_atomic(path, npy_f32(data, shape));
}

}  // namespace sluice::format
