// EngineOptions::device as a list of GPUs (runtime::parse_devices) and how an expert-parallel group
// deals out the routed experts and shared experts (runtime/expert_shard.h).
#include <gtest/gtest.h>

#include "runtime/backend.h"
#include "runtime/expert_shard.h"

namespace sluice::runtime {
namespace {

TEST(Devices, OneDeviceOrAListOfGpus) {
    EXPECT_EQ(*parse_devices("cpu"), std::vector<int>{});
    EXPECT_EQ(*parse_devices(""), std::vector<int>{});
    EXPECT_EQ(*parse_devices("cuda"), std::vector<int>{0});
    EXPECT_EQ(*parse_devices("cuda:3"), std::vector<int>{3});
    EXPECT_EQ(*parse_devices("cuda:0,cuda:1"), (std::vector<int>{0, 1}));
    EXPECT_EQ(*parse_devices("cuda:2,cuda,cuda:1"), (std::vector<int>{2, 0, 1}));
    EXPECT_EQ(*parse_devices("cuda:0,cuda:0"), (std::vector<int>{0, 0}));  // ranks sharing one GPU
}

TEST(Devices, BadListsNameTheProblem) {
    auto e = parse_devices("cuda:0,cpu");
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("'cpu' is not a GPU"), std::string::npos) << e.status().message();
    e = parse_devices("cuda:0,");
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("'' is not a GPU"), std::string::npos) << e.status().message();
    e = parse_devices("cuda:0,cuda:x");
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("'cuda:x'"), std::string::npos) << e.status().message();
    e = parse_devices("cuda:0,cuda:0,cuda:1");
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("repeats a GPU"), std::string::npos) << e.status().message();
    EXPECT_FALSE(parse_devices("gpu").has_value());
}

TEST(ExpertShards, EveryExpertAndSharedExpertOnExactlyOneRank) {
    for (int ranks : {1, 2, 3, 4, 8}) {
        for (int64_t experts : {8, 60, 128, 256, 512}) {
            if (experts < ranks) continue;
            int64_t held = 0;
            for (int r = 0; r < ranks; ++r) {
                const ExpertShard s{r, ranks};
                int64_t mine = 0;
                for (int64_t e = 0; e < experts; ++e) mine += s.owns_expert(e);
                EXPECT_EQ(mine, s.owned_experts(experts)) << r << " of " << ranks << ", " << experts;
                // Balanced: no rank holds more than one expert beyond another.
                EXPECT_LE(mine, experts / ranks + 1);
                EXPECT_GE(mine, experts / ranks);
                held += mine;
            }
            EXPECT_EQ(held, experts);
            for (int64_t e = 0; e < experts; ++e) {
                int owners = 0;
                for (int r = 0; r < ranks; ++r) owners += ExpertShard(r, ranks).owns_expert(e);
                EXPECT_EQ(owners, 1) << "expert " << e;
            }
        }
        for (int64_t layer = 0; layer < 10; ++layer) {
            int owners = 0;
            for (int r = 0; r < ranks; ++r) owners += ExpertShard(r, ranks).owns_shared(layer);
            EXPECT_EQ(owners, 1) << "layer " << layer;
        }
    }
    // Neighbouring ids (what group-limited routing picks together) go to different ranks.
    const ExpertShard first{0, 2};
    EXPECT_NE(first.owns_expert(4), first.owns_expert(5));
}

}  // namespace
}  // namespace sluice::runtime
