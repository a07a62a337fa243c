// GGUF bytes built by hand for tests: little-endian integers and GGUF strings (u64 length, bytes), the
// pieces of a header the tests write without gguf-py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::testing {

inline std::string le32(uint32_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 4);
}
inline std::string le64(uint64_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 8);
}
inline std::string gstr(std::string_view s) {
    return le64(s.size()) + std::string(s);
}

}  // namespace sluice::testing
