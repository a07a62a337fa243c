// `sluice synth` of a gpt-oss config: the pack it writes is what a pack of the Hub's MXFP4 checkpoint
// holds (q/k/v/o biases, sinks, the router `mlp.router` with its bias, the expert biases with the dense
// core, routed experts as ggml MXFP4 records, the Hub's quantization_config in config.json), so it loads,
// runs a prefill and decode steps to finite, non-degenerate logits; and the dry run `sluice info
// CONFIG.json` plans the sizes the written pack has (its dense bytes counting the biases and sinks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/packer.h"
#include "format/pack.h"
#include "io/mapped_file.h"
#include "kernels/ggml_quants.h"
#include "sluice/engine.h"
#include "test_util.h"

namespace sluice {
namespace {

// The gpt_oss_hf_mxfp4 golden's shapes (hidden 64, 8 experts, top-4, sliding window 6 on even layers).
nlohmann::json tiny_gpt_oss_config(bool with_hub_block) {
    auto text = io::read_text_file(testing::test_data_dir() + "/goldens/gpt_oss_hf_mxfp4/config.json");
    EXPECT_TRUE(text.has_value());
    nlohmann::json cfg = nlohmann::json::parse(text.has_value() ? *text : std::string("{}"));
    if (!with_hub_block) cfg.erase("quantization_config");
    return cfg;
}

void expect_sane(const std::vector<float>& logits, const char* what) {
    ASSERT_FALSE(logits.empty()) << what;
    double sum = 0, sq = 0;
    for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v)) << what;
        sum += v;
        sq += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(logits.size());
    const double sd = std::sqrt(std::max(0.0, sq / static_cast<double>(logits.size()) - mean * mean));
    EXPECT_GT(sd, 1e-3) << what << ": logits all alike";
    EXPECT_LT(sd, 1e3) << what << ": logits blew up";
}

TEST(SynthGptOss, PackLoadsAndRunsAndIsPlannedAsWritten) {
    for (const bool hub_block : {false, true}) {
        testing::TempDir dir;
        const std::string config = dir.file("config.json");
        ASSERT_TRUE(io::write_file_atomic(config, tiny_gpt_oss_config(hub_block).dump()).is_ok());

        convert::SynthOptions so;
        so.config_path = config;
        so.bits = 4;
        so.group_size = 64;
        so.dry_run = true;
        auto planned = convert::synth_model(so);
        ASSERT_TRUE(planned.has_value()) << planned.status().message();
        so.dry_run = false;
        so.out_dir = dir.file("packed");
        auto written = convert::synth_model(so);
        ASSERT_TRUE(written.has_value()) << written.status().message();
        EXPECT_EQ(planned->expert_bytes, written->expert_bytes);
        EXPECT_EQ(planned->record_bytes, written->record_bytes);
        EXPECT_EQ(planned->expert_records, 4 * 8);

        // The packed config: the MLX block of the dense weights beside the Hub's mxfp4 one.
        auto packed_text = io::read_text_file(dir.file("packed/config.json"));
        ASSERT_TRUE(packed_text.has_value());
        const nlohmann::json packed = nlohmann::json::parse(*packed_text);
        EXPECT_EQ(packed["quantization"]["bits"], 4);
        EXPECT_EQ(packed["quantization"]["model.layers.0.mlp.router"]["bits"], 8);
        EXPECT_EQ(packed["quantization_config"]["quant_method"], "mxfp4");
        // Every expert projection is ggml MXFP4: 64 columns are 2 blocks of 17 bytes a row.
        auto layout_text = io::read_text_file(dir.file("packed/layout.json"));
        ASSERT_TRUE(layout_text.has_value());
        auto layout = format::parse_pack_layout(*layout_text, "layout.json");
        ASSERT_TRUE(layout.has_value()) << layout.status().message();
        ASSERT_EQ(layout->expert_files.size(), 4u);
        for (const auto& f : layout->expert_files)
            for (const format::PackProjection* p : {&f.gate, &f.up, &f.down}) {
                ASSERT_TRUE(p->ggml_type.has_value());
                EXPECT_EQ(*p->ggml_type, format::GgmlType::kMXFP4);
                EXPECT_EQ(p->weight.size, static_cast<uint64_t>(p->rows) * 2 * 17);
            }
        // The random blocks decode to weights like the affine synth's: zero-centred, rms about 0.018.
        {
            const format::PackExpertFile& f = layout->expert_files[0];
            std::ifstream in(dir.file("packed/" + f.file), std::ios::binary);
            std::vector<uint8_t> record(f.record_stride);
            ASSERT_TRUE(
                in.read(reinterpret_cast<char*>(record.data()), static_cast<std::streamsize>(record.size())));
            double sum = 0, sq = 0;
            int64_t n = 0;
            for (const format::PackProjection* p : {&f.gate, &f.up, &f.down})
                for (uint64_t b = 0; b < p->weight.size; b += 17) {
                    const uint8_t* block = record.data() + p->weight.offset + b;
                    for (int j = 0; j < 32; ++j) {
                        const uint8_t byte = block[1 + j % 16];
                        const int code = j < 16 ? byte & 0x0F : byte >> 4;
                        const double v = std::ldexp(kernels::kMxfp4Values[code], block[0] - 128);
                        sum += v;
                        sq += v * v;
                        ++n;
                    }
                }
            const double rms = std::sqrt(sq / static_cast<double>(n));
            EXPECT_GT(rms, 0.012);
            EXPECT_LT(rms, 0.025);
            EXPECT_LT(std::abs(sum / static_cast<double>(n)), 0.1 * rms);
        }

        EngineOptions eo;
        eo.model_dir = dir.file("packed");
        eo.context_tokens = 64;
        eo.threads = 2;
        auto engine = Engine::load(eo);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        // The dry run counts what the loaded model holds: biases, sinks and expert biases as f32.
        PlannedWeights w{planned->dense_bytes, planned->expert_bytes, planned->record_bytes,
                         planned->expert_records};
        auto plan = plan_memory(config, w, eo);
        ASSERT_TRUE(plan.has_value()) << plan.status().message();
        EXPECT_EQ(plan->dense_bytes, (*engine)->memory_plan().dense_bytes);
        const uint64_t biases = 4 * sizeof(float) * (64 + 2 * 32 + 64 + 4 + 8 + 8 * (2 * 64 + 64));
        EXPECT_GT(planned->dense_bytes, biases);

        auto session = (*engine)->new_session();
        std::vector<int32_t> prompt;
        for (int32_t i = 0; i < 20; ++i) prompt.push_back((3 + 37 * i) % 256);  // past the window of 6
        auto prefill = session->evaluate(prompt, true);
        ASSERT_TRUE(prefill.has_value()) << prefill.status().message();
        expect_sane(*prefill, "prefill");
        for (int32_t t : {5, 77}) {
            auto step = session->evaluate(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(step.has_value()) << step.status().message();
            expect_sane(*step, "decode");
        }
    }
}

}  // namespace
}  // namespace sluice
