// The memory plan's scratch estimate against the forward's real scratch: a chunked prefill on each
// golden model (every family and weight format) and on the shipped default model must fit inside
// scratch_bytes_estimate, or the process would exceed its --memory budget; and the estimate must
// not be wasteful, because every byte of it is taken from the expert cache.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
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

// The sizes synth's dry run plans for `config` (4-bit g64) and those of the pack it then writes at `out`.
void synth_planned_and_written(const std::string& config, const std::string& out,
                               convert::PackResult* planned, convert::PackResult* written) {
    convert::SynthOptions so;
    so.config_path = config;
    so.bits = 4;
    so.group_size = 64;
    so.dry_run = true;
    auto sizes = convert::synth_model(so);
    ASSERT_TRUE(sizes.has_value()) << sizes.status().message();
    *planned = *sizes;
    so.dry_run = false;
    so.out_dir = out;
    auto made = convert::synth_model(so);
    ASSERT_TRUE(made.has_value()) << made.status().message();
    *written = *made;
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

    convert::PackResult planned_sizes, written_sizes;
    synth_planned_and_written(config, dir.file("packed"), &planned_sizes, &written_sizes);
    if (HasFatalFailure()) return;
    const convert::PackResult* sizes = &planned_sizes;
    EXPECT_EQ(sizes->expert_bytes, written_sizes.expert_bytes);

    EngineOptions eo;
    eo.model_dir = dir.file("packed");
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
    EXPECT_NE(short_of_context.status().message().find("raise --memory"), std::string::npos)
        << short_of_context.status().message();
    // Many sessions of a hybrid model: their DeltaNet state and snapshots alone exceed the budget, so the
    // error names that fixed state and asks for fewer sessions, not a shorter context.
    eo.max_sessions = 8;
    eo.memory_bytes = 8ull << 30;
    auto eight = plan_memory(config, w, eo);
    ASSERT_TRUE(eight.has_value()) << eight.status().message();
    eo.memory_bytes =
        eight->scratch_bytes + eight->runtime_bytes + eight->dense_bytes + w.record_bytes + 4096;
    auto short_of_sessions = plan_memory(config, w, eo);
    ASSERT_FALSE(short_of_sessions.has_value());
    const std::string m = short_of_sessions.status().message();
    for (const char* part : {"8 session(s)", "a session of recurrent state", "for the sessions' fixed state",
                             "run fewer sessions at once"})
        EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
    EXPECT_EQ(m.find("--kv-bits"), std::string::npos) << m;
}

// Resident bytes of this process's mappings of files named `suffix` (/proc/self/smaps).
uint64_t mapped_rss(const std::string& suffix) {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool ours = false;
    uint64_t kb = 0;
    while (std::getline(in, line)) {
        if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
            line.find('-') != std::string::npos && line.find(' ') > line.find('-')) {
            ours = line.size() >= suffix.size() &&
                   line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0;
        } else if (ours && line.rfind("Rss:", 0) == 0) {
            kb += std::stoull(line.substr(4));
        }
    }
    return kb << 10;
}

// A dense core the budget cannot hold streams layer by layer (EngineOptions::dense_streaming): the
// config's dry run plans it as the loaded pack does; the logits are those of the held core bit for bit
// (the same bytes, read later); and after a forward the dense file's resident pages are the window's,
// not the whole core's.
TEST(MemoryPlan, ADenseCoreTooBigForTheBudgetStreamsLayerByLayer) {
    testing::TempDir dir;
    // Qwen3-MoE shapes with a dense core of many layers and few, small experts.
    const nlohmann::json cfg = {{"model_type", "qwen3_moe"},
                                {"architectures", {"Qwen3MoeForCausalLM"}},
                                {"hidden_size", 512},
                                {"intermediate_size", 1024},
                                {"moe_intermediate_size", 64},
                                {"num_hidden_layers", 12},
                                {"num_attention_heads", 8},
                                {"num_key_value_heads", 2},
                                {"head_dim", 64},
                                {"num_experts", 4},
                                {"num_experts_per_tok", 2},
                                {"norm_topk_prob", true},
                                {"vocab_size", 512},
                                {"max_position_embeddings", 1024},
                                {"rms_norm_eps", 1e-6},
                                {"rope_theta", 1000000.0},
                                {"tie_word_embeddings", false},
                                {"eos_token_id", 1}};
    const std::string config = dir.file("config.json");
    ASSERT_TRUE(io::write_file_atomic(config, cfg.dump()).is_ok());
    convert::PackResult planned_sizes, written_sizes;
    synth_planned_and_written(config, dir.file("packed"), &planned_sizes, &written_sizes);
    if (HasFatalFailure()) return;
    const convert::PackResult* sizes = &planned_sizes;
    ASSERT_GT(sizes->layers_dense_bytes, sizes->dense_bytes / 2);  // the layers are most of the core

    EngineOptions eo;
    eo.model_dir = dir.file("packed");
    eo.context_tokens = 256;
    eo.threads = 2;
    eo.prefix_cache_bytes = 0;
    PlannedWeights w{sizes->dense_bytes,    sizes->expert_bytes,       sizes->record_bytes,
                     sizes->expert_records, sizes->layers_dense_bytes, sizes->max_layer_dense_bytes};
    auto held = plan_memory(config, w, eo);
    ASSERT_TRUE(held.has_value()) << held.status().message();
    EXPECT_EQ(held->dense_streamed_bytes, 0u);  // an ample budget holds it
    // Four layers short of holding the core with the rest.
    eo.memory_bytes = held->dense_bytes + held->state_bytes + held->scratch_bytes + held->runtime_bytes -
                      4 * sizes->max_layer_dense_bytes;
    auto planned = plan_memory(config, w, eo);
    ASSERT_TRUE(planned.has_value()) << planned.status().message();
    EXPECT_EQ(planned->dense_streamed_bytes, sizes->layers_dense_bytes);
    EXPECT_EQ(planned->dense_window_layers, 3);
    EXPECT_LT(planned->dense_bytes, held->dense_bytes);
    EXPECT_GT(planned->cache_slots, 2);  // what the streamed layers left goes to the expert cache
    auto streamed = Engine::load(eo);
    ASSERT_TRUE(streamed.has_value()) << streamed.status().message();
    const MemoryPlan& loaded = (*streamed)->memory_plan();
    EXPECT_EQ(loaded.dense_streamed_bytes, planned->dense_streamed_bytes);
    EXPECT_EQ(loaded.dense_bytes, planned->dense_bytes);
    EXPECT_EQ(loaded.cache_slots, planned->cache_slots);
    EXPECT_EQ(loaded.describe(), planned->describe());

    // Told to hold the core in a budget that cannot, it is refused by name; and a GPU never streams it.
    eo.dense_streaming = EngineOptions::DenseStreaming::kOff;
    auto refused = plan_memory(config, w, eo);
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.status().message().find("raise --memory"), std::string::npos)
        << refused.status().message();
    eo.dense_streaming = EngineOptions::DenseStreaming::kAuto;

    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 40; ++i) prompt.push_back((7 + 31 * i) % 512);
    Expected<std::vector<float>> a = std::vector<float>{};
    uint64_t held_rss = 0;
    {
        EngineOptions ho = eo;
        ho.memory_bytes = 0;  // the whole core held
        ho.dense_streaming = EngineOptions::DenseStreaming::kOff;
        auto holding = Engine::load(ho);
        ASSERT_TRUE(holding.has_value()) << holding.status().message();
        a = (*holding)->new_session()->evaluate(prompt, true);
        held_rss = mapped_rss("/dense.safetensors");
    }  // its mapping gone, what stays resident is the streamed engine's
    auto s = (*streamed)->new_session();
    auto b = s->evaluate(prompt, true);
    ASSERT_TRUE(a.has_value() && b.has_value());
    EXPECT_EQ(*a, *b) << "streaming the dense core changed the logits";
    auto c = s->evaluate(std::span<const int32_t>(prompt.data(), 1), false);  // one decode step
    ASSERT_TRUE(c.has_value());
    // The window (3 of 12 layers) and what stays (lm_head, the embedding rows touched), not the core.
    const uint64_t streamed_rss = mapped_rss("/dense.safetensors");
    EXPECT_GT(held_rss, sizes->layers_dense_bytes * 9 / 10) << "the held core is not resident?";
    EXPECT_LT(streamed_rss, sizes->dense_bytes - sizes->layers_dense_bytes + 5 * sizes->max_layer_dense_bytes)
        << "held " << held_rss << ", streamed " << streamed_rss;
}

}  // namespace
}  // namespace sluice::runtime
