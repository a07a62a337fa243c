#include "format/npy.h"

#include <gtest/gtest.h>

#include <cstring>

namespace sluice::format {
namespace {

TEST(Npy, HeaderIsCanonicalAndAligned) {
    std::vector<float> v = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    std::string b = npy_f32(v, {2, 3});
    ASSERT_EQ(b.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)), 0);
    uint16_t len = static_cast<uint16_t>(static_cast<uint8_t>(b[8]) | (static_cast<uint8_t>(b[9]) << 8));
    EXPECT_EQ((10 + len) % 64, 0u);
    std::string header = b.substr(10, len);
    EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u) << header;
    EXPECT_EQ(header.back(), '\n');
    float last;
    std::memcpy(&last, b.data() + b.size() - 4, 4);
    EXPECT_EQ(last, 6.0f);
    EXPECT_NE(npy_f32(v, {6}).find("'shape': (6,)"), std::string::npos);
}

}  // namespace
}  // namespace sluice::format
