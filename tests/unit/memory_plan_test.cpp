// The memory plan's scratch estimate against the forward's real scratch: a chunked prefill on each
// golden model (every family and weight format) and on the shipped default model must fit inside
// scratch_bytes_estimate, or the process would exceed its --memory budget; and the estimate must
// not be wasteful, because every byte of it is taken from the expert cache.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "model/model.h"
#include "test_util.h"

namespace sluice::runtime {
namespace {

void check_estimate(const std::string& dir, int64_t chunk) {
    auto model = model::Model::load(dir);
    ASSERT_TRUE(model.has_value()) << model.status().message();
    const model::ModelConfig& c = (*model)->config();
    std::mt19937 rng(7);
    std::vector<int32_t> ids(static_cast<size_t>(chunk));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab));
    model::ModelState state = (*model)->new_state(2 * chunk + 1);
    model::Workspace ws;
    std::vector<float> logits(static_cast<size_t>(c.vocab));
    ASSERT_TRUE((*model)->forward(state, ids, logits.data(), false, ws, nullptr).is_ok());
    ASSERT_TRUE(
        (*model)
            ->forward(state, std::span<const int32_t>(ids.data(), 1), logits.data(), false, ws, nullptr)
            .is_ok());
    const uint64_t used = ws.bytes() + logits.size() * sizeof(float);
    const uint64_t estimate = scratch_bytes_estimate(c, chunk);
    EXPECT_LE(used, estimate) << dir << ": the forward's scratch outgrew the plan";
    EXPECT_LE(estimate, 3 * used) << dir << ": the estimate wastes budget (" << estimate << " vs " << used
                                  << ")";
}

TEST(MemoryPlan, ScratchEstimateCoversGoldens) {
    for (const char* name : {"qwen3_moe_hf_bf16", "qwen3_next_hf_bf16", "qwen3_5_moe_mlx_q4",
                             "qwen3_next_mlx_q8", "qwen3_hf_bf16"})
        check_estimate(testing::test_data_dir() + "/goldens/" + name, 24);
}

TEST(MemoryPlan, ScratchEstimateCoversDefaultModel) {
    check_estimate(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next", 256);
}

}  // namespace
}  // namespace sluice::runtime
