// The memory plan's scratch estimate against the forward's real scratch: a chunked prefill on each
// golden model (every family and weight format) and on the shipped default model must fit inside
// scratch_bytes_estimate, or the process would exceed its --memory budget; and the estimate must
// not be wasteful, because every byte of it is taken from the expert cache.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "convert/packer.h"
#include "io/mapped_file.h"
#include "model/model.h"
#include "sluice/engine.h"
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

// `sluice info CONFIG.json` plans before the weights exist: the dry run of synth must give the sizes
// the packed model really has, and plan_memory the plan Engine::load then makes — the same dense,
// state, slot and cache numbers, the same longest context — and the same refusals.
TEST(MemoryPlan, AConfigIsPlannedAsItsPackedModelLoads) {
    testing::TempDir dir;
    // The default model's shapes without its MLX quantization block (synth quantizes itself).
    auto text = io::read_text_file(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next/config.json");
    ASSERT_TRUE(text.has_value());
    nlohmann::json cfg = nlohmann::json::parse(*text);
    cfg.erase("quantization");
    cfg.erase("quantization_config");
    const std::string config = dir.file("config.json");
    ASSERT_TRUE(io::write_file_atomic(config, cfg.dump()).is_ok());

    convert::SynthOptions so;
    so.config_path = config;
    so.bits = 4;
    so.group_size = 64;
    so.dry_run = true;
    auto sizes = convert::synth_model(so);
    ASSERT_TRUE(sizes.has_value()) << sizes.status().message();
    so.dry_run = false;
    so.out_dir = dir.file("packed");
    auto written = convert::synth_model(so);
    ASSERT_TRUE(written.has_value()) << written.status().message();
    EXPECT_EQ(sizes->expert_bytes, written->expert_bytes);

    EngineOptions eo;
    eo.model_dir = so.out_dir;
    eo.memory_bytes = 160ull << 20;
    eo.context_tokens = 2048;
    eo.kv_bits = 3;
    eo.kv_window = 64;
    PlannedWeights w{sizes->dense_bytes, sizes->expert_bytes, sizes->record_bytes, sizes->expert_records};
    auto planned = plan_memory(config, w, eo);
    ASSERT_TRUE(planned.has_value()) << planned.status().message();
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    const MemoryPlan& loaded = (*engine)->memory_plan();
    EXPECT_TRUE(planned->streaming && loaded.streaming);
    EXPECT_EQ(planned->dense_bytes, loaded.dense_bytes);
    EXPECT_EQ(planned->state_bytes, loaded.state_bytes);
    EXPECT_EQ(planned->slot_bytes, loaded.slot_bytes);
    EXPECT_EQ(planned->cache_slots, loaded.cache_slots);
    EXPECT_EQ(planned->kv_bytes_per_token, loaded.kv_bytes_per_token);
    EXPECT_EQ(planned->context_tokens, 2048);
    EXPECT_EQ(planned->max_context_tokens, loaded.max_context_tokens);
    EXPECT_EQ(planned->describe(), loaded.describe());
    // The default model (max_position_embeddings 4096): 4096 tokens fit in 160 MB, so the longest
    // context is the model's.
    EXPECT_EQ(planned->max_context_tokens, 4096);

    eo.context_tokens = 8192;
    auto too_long = plan_memory(config, w, eo);
    ASSERT_FALSE(too_long.has_value());
    EXPECT_NE(too_long.status().message().find("more than this model's 4096"), std::string::npos);
    eo.context_tokens = 4096;
    eo.memory_bytes = 40ull << 20;
    auto tiny = plan_memory(config, w, eo);
    ASSERT_FALSE(tiny.has_value());
    EXPECT_NE(tiny.status().message().find("the dense core (5.0 MB"), std::string::npos)
        << tiny.status().message();
    // Room for the dense core but not for the context's state: that is what the error names.
    eo.memory_bytes =
        planned->scratch_bytes + planned->runtime_bytes + planned->dense_bytes + w.record_bytes + 4096;
    auto short_of_context = plan_memory(config, w, eo);
    ASSERT_FALSE(short_of_context.has_value());
    EXPECT_NE(short_of_context.status().message().find("holds about"), std::string::npos)
        << short_of_context.status().message();
}

}  // namespace
}  // namespace sluice::runtime
