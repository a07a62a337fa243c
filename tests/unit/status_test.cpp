#include "sluice/status.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

Expected<int> parse_positive(int v) {
    if (v <= 0) return error(ErrorCode::kInvalidArgument, "[test] expected > 0, got " + std::to_string(v));
    return v;
}

Expected<int> doubled(int v) {
    SLUICE_ASSIGN_OR_RETURN(int x, parse_positive(v));
    return 2 * x;
}

TEST(Status, PropagatesErrorsWithContext) {
    auto ok = doubled(3);
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(*ok, 6);
    auto bad = doubled(-1);
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(bad.status().with_context("file.json").message(), "file.json: [test] expected > 0, got -1");
}

}  // namespace
}  // namespace sluice
