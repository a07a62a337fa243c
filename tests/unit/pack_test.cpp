// The packed streaming layout end to end: pack every golden, load it with a tiny expert cache
// (smaller than one layer's experts), and compare with the unpacked model — bitwise for MLX
// sources and for float packs (--bits 16) of Hugging Face sources. Plus the fault cases: a
// truncated expert file, a flipped byte, a missing or wrong-version manifest, an interrupted pack
// resumed, a folder of the wrong architecture.
#include "format/pack.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "convert/packer.h"
#include "experts/expert_cache.h"
#include "format/safetensors.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "model/config.h"
#include "model/model.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using sluice::testing::TempDir;

std::string golden(const std::string& name) {
    return sluice::testing::test_data_dir() + "/goldens/" + name;
}

std::vector<int32_t> golden_ids(const std::string& name) {
    auto f = format::SafetensorsFile::open(golden(name) + "/golden.safetensors");
    const format::TensorInfo* t = (*f)->find("input_ids");
    std::vector<int32_t> ids(static_cast<size_t>(t->numel()));
    std::memcpy(ids.data(), t->data, t->size_bytes);
    return ids;
}

Expected<std::vector<float>> run_logits(const std::string& dir, const std::vector<int32_t>& ids,
                                        uint64_t cache_bytes, bool verify_reads = false,
                                        ExpertCacheStats* stats = nullptr) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = static_cast<int64_t>(ids.size());
    eo.memory_bytes = 4ull << 30;
    eo.expert_cache_bytes = cache_bytes;
    eo.verify_reads = verify_reads;
    SLUICE_ASSIGN_OR_RETURN(auto engine, Engine::load(eo));
    auto session = engine->new_session();
    // Prefill in chunks and then a few decode steps, so both paths stream experts.
    const size_t split = ids.size() - 4;
    SLUICE_ASSIGN_OR_RETURN(auto logits,
                            session->evaluate(std::span<const int32_t>(ids.data(), split), true, 64));
    for (size_t i = split; i < ids.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(auto step, session->evaluate(std::span<const int32_t>(&ids[i], 1), false));
        logits.insert(logits.end(), step.begin(), step.end());
    }
    if (stats) *stats = engine->expert_cache_stats();
    return logits;
}

struct PackCase {
    const char* golden;
    int bits;
};

class PackGolden : public ::testing::TestWithParam<PackCase> {};

TEST_P(PackGolden, PackedLogitsEqualUnpacked) {
    const PackCase pc = GetParam();
    TempDir out;
    convert::PackOptions o;
    o.src_dir = golden(pc.golden);
    o.out_dir = out.file("packed");
    o.bits = pc.bits;
    auto packed = convert::pack_model(o);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();
    auto problems = convert::verify_packed(o.out_dir);
    ASSERT_TRUE(problems.has_value()) << problems.status().message();
    EXPECT_TRUE(problems->empty());

    const auto ids = golden_ids(pc.golden);
    auto want = run_logits(o.src_dir, ids, 0);
    ASSERT_TRUE(want.has_value()) << want.status().message();
    // Two slots: far smaller than one layer's experts, so every layer evicts and re-reads.
    ExpertCacheStats stats;
    auto got = run_logits(o.out_dir, ids, 1, /*verify_reads=*/true, &stats);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    ASSERT_EQ(got->size(), want->size());
    EXPECT_EQ(std::memcmp(got->data(), want->data(), got->size() * sizeof(float)), 0)
        << "packed logits differ from unpacked";
    auto config = model::load_model_config(o.src_dir);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    if (config->has_experts()) {
        EXPECT_GT(stats.misses, 0u);
        EXPECT_GT(stats.evictions, 0u);
        EXPECT_GT(stats.bytes_read, 0u);
    } else {  // a dense model: every weight in the dense file, nothing to stream
        EXPECT_TRUE(packed->expert_bytes == 0 && stats.bytes_read == 0 && stats.misses == 0);
    }

    // A cache that holds every expert serves the same logits.
    auto big = run_logits(o.out_dir, ids, 1ull << 30);
    ASSERT_TRUE(big.has_value()) << big.status().message();
    EXPECT_EQ(std::memcmp(big->data(), want->data(), big->size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, PackGolden,
    ::testing::Values(
        PackCase{"qwen3_moe_mlx_q4", 0}, PackCase{"qwen3_next_mlx_q4", 0}, PackCase{"qwen3_next_mlx_q8", 0},
        PackCase{"qwen3_5_moe_mlx_q4", 0}, PackCase{"qwen3_moe_hf_bf16", 16},
        PackCase{"qwen3_next_hf_bf16", 16}, PackCase{"qwen3_5_moe_hf_bf16", 16}, PackCase{"qwen3_mlx_q4", 0},
        PackCase{"qwen3_hf_bf16", 16}, PackCase{"qwen2_mlx_q4", 0}, PackCase{"qwen2_hf_bf16", 16},
        PackCase{"glm4_moe_mlx_q4", 0}, PackCase{"glm4_moe_hf_bf16", 16}, PackCase{"qwen2_moe_mlx_q4", 0},
        PackCase{"qwen2_moe_hf_bf16", 16}, PackCase{"mixtral_mlx_q4", 0}, PackCase{"mixtral_hf_bf16", 16},
        PackCase{"deepseek_v3_hf_bf16", 16}, PackCase{"deepseek_v3_nolora_hf_bf16", 16},
        PackCase{"deepseek_v3_mlx_q4", 0}, PackCase{"gpt_oss_hf_bf16", 16}, PackCase{"gpt_oss_hf_mxfp4", 16}),
    [](const auto& param_info) { return std::string(param_info.param.golden); });

// Relative RMS error between every quantized linear of a pack and its bf16 source.
double max_weight_error(const std::string& src_dir, const std::string& packed_dir, int* n_quantized) {
    auto src = format::Checkpoint::open(src_dir);
    auto dst = format::Checkpoint::open_files(packed_dir, {"dense.safetensors"});
    EXPECT_TRUE(src.has_value() && dst.has_value());
    double worst = 0;
    *n_quantized = 0;
    for (const auto& name : (*dst)->names()) {
        const std::string suffix = ".scales";
        if (name.size() < suffix.size() ||
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
            continue;
        const std::string module = name.substr(0, name.size() - suffix.size());
        const format::TensorInfo* w = (*dst)->find(module + ".weight");
        const format::TensorInfo* sc = (*dst)->find(module + ".scales");
        const format::TensorInfo* bi = (*dst)->find(module + ".biases");
        const format::TensorInfo* orig = (*src)->find(module + ".weight");
        if (!w || !sc || !bi || !orig) {
            ADD_FAILURE() << "incomplete quantized module " << module;
            continue;
        }
        kernels::WeightView q;
        q.cols = orig->shape[1];
        q.rows = orig->shape[0];
        q.type = w->shape[1] * 32 / q.cols == 4 ? kernels::WeightType::kQ4 : kernels::WeightType::kQ8;
        q.group_size = static_cast<int32_t>(q.cols / sc->shape[1]);
        q.data = w->data;
        q.scales = sc->data;
        q.biases = bi->data;
        kernels::WeightView f;
        f.type = kernels::WeightType::kBF16;
        f.rows = q.rows;
        f.cols = q.cols;
        f.data = orig->data;
        std::vector<float> a(static_cast<size_t>(q.cols)), b(static_cast<size_t>(q.cols));
        double err = 0, ref = 0;
        for (int64_t r = 0; r < q.rows; ++r) {
            kernels::reference::dequantize_row(q, r, a.data());
            kernels::reference::dequantize_row(f, r, b.data());
            for (int64_t i = 0; i < q.cols; ++i) {
                err += (a[i] - b[i]) * (a[i] - b[i]);
                ref += b[i] * b[i];
            }
        }
        worst = std::max(worst, std::sqrt(err / ref));
        ++*n_quantized;
    }
    return worst;
}

TEST(Pack, QuantizesHuggingFaceSourcesWithTheMlxAlgorithm) {
    for (const char* name :
         {"qwen3_next_hf_bf16", "qwen3_5_moe_hf_bf16", "qwen3_moe_hf_bf16", "qwen3_hf_bf16"}) {
        TempDir out;
        double end_to_end[2] = {0, 0};
        for (int bits : {8, 4}) {
            convert::PackOptions o;
            o.src_dir = golden(name);
            o.out_dir = out.file("q" + std::to_string(bits));
            o.bits = bits;
            auto r = convert::pack_model(o);
            ASSERT_TRUE(r.has_value()) << r.status().message();
            int n_quantized = 0;
            const double weight_err = max_weight_error(o.src_dir, o.out_dir, &n_quantized);
            EXPECT_GT(n_quantized, 5) << name;
            // Uniform-code quantization error of Gaussian-like rows: ~1/(2^bits) of the range.
            EXPECT_LT(weight_err, bits == 8 ? 0.01 : 0.15) << name << " at " << bits << " bits";

            const auto ids = golden_ids(name);
            auto want = run_logits(o.src_dir, ids, 0);
            auto got = run_logits(o.out_dir, ids, 0);
            ASSERT_TRUE(got.has_value()) << got.status().message();
            double err = 0, ref = 0;
            for (size_t i = 0; i < got->size(); ++i) {
                ASSERT_TRUE(std::isfinite((*got)[i]));
                err += ((*got)[i] - (*want)[i]) * ((*got)[i] - (*want)[i]);
                ref += (*want)[i] * (*want)[i];
            }
            end_to_end[bits == 8 ? 0 : 1] = std::sqrt(err / ref);
        }
        // Tiny random routers flip on small perturbations, so logits move more than weights do,
        // but 8-bit must stay closer to bf16 than 4-bit.
        EXPECT_LT(end_to_end[0], end_to_end[1]) << name;
    }
}

// The e4m3 code nearest to x (every finite code tried; test-only).
uint8_t nearest_e4m3(float x) {
    uint8_t best = 0;
    float err = INFINITY;
    for (int c = 0; c < 256; ++c) {
        const float v = kernels::f8e4m3_to_f32(static_cast<uint8_t>(c));
        if (std::isfinite(v) && std::fabs(v - x) < err) {
            err = std::fabs(v - x);
            best = static_cast<uint8_t>(c);
        }
    }
    return best;
}

TEST(Pack, Fp8E4m3DecodesAsTheOcpFormat) {
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x00), 0.0f);
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x38), 1.0f);    // exponent 7 = bias
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x7E), 448.0f);  // the largest finite
    EXPECT_EQ(kernels::f8e4m3_to_f32(0xFE), -448.0f);
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x07), 7.0f * std::ldexp(1.0f, -9));
    EXPECT_EQ(kernels::f8e4m3_to_f32(0x3C), 1.5f);
    EXPECT_TRUE(std::isnan(kernels::f8e4m3_to_f32(0x7F)) && std::isnan(kernels::f8e4m3_to_f32(0xFF)));
}

// DeepSeek-V3's FP8 checkpoints (e4m3 + an f32 weight_scale_inv per block) pack through the same rows as a
// float source: the FP8 form of a golden and its twin holding the dequantized values in F32 give the same
// packed bytes. Partial blocks at the edges (blocks of 24 × 32); linears whose inputs are no whole number
// of 64-groups stay BF16 (the pack keeps them float — an FP8 one would be refused).
TEST(Pack, Fp8SourcesPackAsTheirDequantizedValues) {
    const std::string name = "deepseek_v3_hf_bf16";
    auto ck = format::Checkpoint::open(golden(name));
    ASSERT_TRUE(ck.has_value()) << ck.status().message();
    const int64_t br = 24, bc = 32;
    std::vector<std::string> blobs;  // owns the bytes the TensorToWrite views point into
    blobs.reserve(4 * (*ck)->names().size());
    std::vector<format::TensorToWrite> fp8, twin;
    int converted = 0;
    for (const std::string& n : (*ck)->names()) {
        const format::TensorInfo* t = (*ck)->find(n);
        const std::string_view raw(reinterpret_cast<const char*>(t->data), t->size_bytes);
        // Every linear the pack quantizes (its inputs a whole number of 64-groups: not the q/kv
        // up-projections' 48 or the dense MLP's 96, which it keeps float); the embedding, LM head and router
        // stay BF16.
        const bool linear = t->shape.size() == 2 && n.ends_with(".weight") && t->shape[1] % 64 == 0 &&
                            n.find("embed_tokens") == std::string::npos &&
                            n.find("lm_head") == std::string::npos && !n.ends_with("mlp.gate.weight");
        if (!linear || t->dtype != format::DType::kBF16) {
            fp8.push_back({n, t->dtype, t->shape, raw});
            twin.push_back({n, t->dtype, t->shape, raw});
            continue;
        }
        ++converted;
        const int64_t rows = t->shape[0], cols = t->shape[1];
        const int64_t gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
        std::vector<float> w(static_cast<size_t>(rows * cols));
        for (int64_t i = 0; i < rows * cols; ++i) {
            uint16_t h;
            std::memcpy(&h, t->data + 2 * i, 2);
            w[static_cast<size_t>(i)] = kernels::bf16_to_f32(h);
        }
        std::string codes(static_cast<size_t>(rows * cols), '\0'),
            scales(static_cast<size_t>(gr * gc) * 4, '\0'), deq(static_cast<size_t>(rows * cols) * 4, '\0');
        for (int64_t a = 0; a < gr; ++a)
            for (int64_t b = 0; b < gc; ++b) {
                float amax = 0;
                for (int64_t r = a * br; r < std::min(rows, (a + 1) * br); ++r)
                    for (int64_t c = b * bc; c < std::min(cols, (b + 1) * bc); ++c)
                        amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
                const float scale = amax > 0 ? amax / 448.0f : 1.0f;
                std::memcpy(scales.data() + (a * gc + b) * 4, &scale, 4);
                for (int64_t r = a * br; r < std::min(rows, (a + 1) * br); ++r)
                    for (int64_t c = b * bc; c < std::min(cols, (b + 1) * bc); ++c) {
                        const uint8_t code = nearest_e4m3(w[static_cast<size_t>(r * cols + c)] / scale);
                        codes[static_cast<size_t>(r * cols + c)] = static_cast<char>(code);
                        const float v = kernels::f8e4m3_to_f32(code) * scale;
                        std::memcpy(deq.data() + (r * cols + c) * 4, &v, 4);
                    }
            }
        blobs.push_back(std::move(codes));
        fp8.push_back({n, format::DType::kF8E4M3, t->shape, blobs.back()});
        blobs.push_back(std::move(scales));
        fp8.push_back({n + "_scale_inv", format::DType::kF32, {gr, gc}, blobs.back()});
        blobs.push_back(std::move(deq));
        twin.push_back({n, format::DType::kF32, t->shape, blobs.back()});
    }
    EXPECT_GT(converted, 10);
    TempDir dir;
    auto config = io::read_text_file(golden(name) + "/config.json");
    ASSERT_TRUE(config.has_value());
    nlohmann::json fp8_config = nlohmann::json::parse(*config);
    fp8_config["quantization_config"] = {{"quant_method", "fp8"},
                                         {"fmt", "e4m3"},
                                         {"activation_scheme", "dynamic"},
                                         {"weight_block_size", {br, bc}}};
    for (const auto& [sub, tensors, cfg] :
         {std::tuple<std::string, const std::vector<format::TensorToWrite>*, std::string>{"fp8", &fp8,
                                                                                          fp8_config.dump()},
          {"twin", &twin, *config}}) {
        fs::create_directories(dir.file(sub));
        ASSERT_TRUE(io::write_file_atomic(dir.file(sub + "/config.json"), cfg).is_ok());
        ASSERT_TRUE(format::write_safetensors(dir.file(sub + "/model.safetensors"), *tensors).is_ok());
    }

    // As stored, the FP8 folder is refused by name; packed, it is its twin's pack byte for byte.
    EngineOptions eo;
    eo.model_dir = dir.file("fp8");
    auto direct = Engine::load(eo);
    ASSERT_FALSE(direct.has_value());
    EXPECT_NE(direct.status().message().find("FP8"), std::string::npos) << direct.status().message();
    EXPECT_NE(direct.status().message().find("sluice pack"), std::string::npos) << direct.status().message();
    for (const std::string& sub : {std::string("fp8"), std::string("twin")}) {
        convert::PackOptions o;
        o.src_dir = dir.file(sub);
        o.out_dir = dir.file(sub + "_packed");
        o.bits = 8;
        auto packed = convert::pack_model(o);
        ASSERT_TRUE(packed.has_value()) << sub << ": " << packed.status().message();
    }
    std::vector<std::string> files = {"dense.safetensors"};
    for (const auto& e : fs::directory_iterator(dir.file("twin_packed/experts")))
        files.push_back("experts/" + e.path().filename().string());
    EXPECT_EQ(files.size(), 4u);  // the dense file and layers 1 and 2's experts, and the MTP layer 3's
    for (const std::string& f : files) {
        auto a = io::read_text_file(dir.file("fp8_packed/" + f));
        auto b = io::read_text_file(dir.file("twin_packed/" + f));
        ASSERT_TRUE(a.has_value() && b.has_value()) << f;
        EXPECT_TRUE(*a == *b) << f << " differs between the FP8 source's pack and its dequantized twin's";
    }
    const auto ids = golden_ids(name);
    auto logits = run_logits(dir.file("fp8_packed"), ids, 1);
    ASSERT_TRUE(logits.has_value()) << logits.status().message();
    for (float v : *logits) ASSERT_TRUE(std::isfinite(v));

    // --bits 16 cannot keep e4m3 (nothing runs it as stored): refused, naming the tensor.
    convert::PackOptions o;
    o.src_dir = dir.file("fp8");
    o.out_dir = dir.file("fp8_16");
    o.bits = 16;
    auto refused = convert::pack_model(o);
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.status().message().find("is FP8 (e4m3)"), std::string::npos)
        << refused.status().message();
}

TEST(Pack, AffineQuantizerRepresentsTheLargerEdgeExactly) {
    std::vector<float> row(64);
    for (int i = 0; i < 64; ++i) row[i] = std::sin(0.37f * static_cast<float>(i)) * 0.05f - 0.01f;
    for (int bits : {4, 8}) {
        std::vector<uint32_t> words(64 * bits / 32);
        uint16_t scale, bias;
        kernels::quantize_row_affine(row.data(), 64, bits, 64, words.data(), &scale, &bias);
        kernels::WeightView v;
        v.type = bits == 4 ? kernels::WeightType::kQ4 : kernels::WeightType::kQ8;
        v.rows = 1;
        v.cols = 64;
        v.data = words.data();
        v.scales = &scale;
        v.biases = &bias;
        v.group_size = 64;
        std::vector<float> back(64);
        kernels::reference::dequantize_row(v, 0, back.data());
        const float step = std::fabs(kernels::bf16_to_f32(scale));
        for (int i = 0; i < 64; ++i)
            EXPECT_LE(std::fabs(back[i] - row[i]), 0.5f * step + 2e-3f * std::fabs(row[i]) + 1e-6f);
    }
}

class PackFaults : public ::testing::Test {
 protected:
    void SetUp() override {
        o_.src_dir = golden("qwen3_next_mlx_q4");
        o_.out_dir = dir_.file("packed");
        auto r = convert::pack_model(o_);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        ids_ = golden_ids("qwen3_next_mlx_q4");
    }
    std::string path(const std::string& rel) const { return o_.out_dir + "/" + rel; }
    TempDir dir_;
    convert::PackOptions o_;
    std::vector<int32_t> ids_;
};

TEST_F(PackFaults, TruncatedExpertFile) {
    fs::resize_file(path("experts/layer_001.bin"), 4096);
    auto r = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("experts/layer_001.bin"), std::string::npos) << r.status().message();
    auto problems = convert::verify_packed(o_.out_dir);
    EXPECT_FALSE(problems.has_value());  // the manifest's size check catches it before any read
}

TEST_F(PackFaults, FlippedByteIsCaughtByChecksums) {
    {
        std::fstream f(path("experts/layer_002.bin"), std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(100);
        char c;
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x10);
        f.seekp(100);
        f.write(&c, 1);
    }
    auto r = run_logits(o_.out_dir, ids_, 1, /*verify_reads=*/true);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("layer 2 expert 0"), std::string::npos) << r.status().message();
    auto problems = convert::verify_packed(o_.out_dir);
    ASSERT_TRUE(problems.has_value());
    ASSERT_EQ(problems->size(), 1u);
    EXPECT_NE((*problems)[0].find("expert 0 (layer 2): checksum mismatch"), std::string::npos)
        << (*problems)[0];
}

TEST_F(PackFaults, MissingOrWrongVersionManifest) {
    fs::remove(path("manifest.json"));
    auto missing = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("no manifest.json"), std::string::npos)
        << missing.status().message();

    std::ofstream(path("manifest.json")) << R"({"format":"sluice-pack","version":99,"files":{}})";
    auto wrong = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(wrong.has_value());
    EXPECT_NE(wrong.status().message().find("format version 99"), std::string::npos)
        << wrong.status().message();
}

TEST_F(PackFaults, InterruptedPackResumes) {
    auto original = io::read_text_file(path("layout.json"));
    ASSERT_TRUE(original.has_value());
    // What a kill halfway through leaves: no manifest or layout yet, every output still under its
    // ".partial" name, and a progress record whose cursor stops in the middle of the shard.
    auto interrupt = [&](bool lose_an_expert_file) {
        fs::remove(path("manifest.json"));
        fs::remove(path("layout.json"));
        for (const char* f : {"dense.safetensors", "experts/layer_000.bin", "experts/layer_001.bin",
                              "experts/layer_002.bin", "experts/layer_003.bin"})
            if (fs::exists(path(f))) fs::rename(path(f), path(std::string(f) + ".partial"));
        if (lose_an_expert_file) fs::remove(path("experts/layer_002.bin.partial"));
        auto text = io::read_text_file(path(".pack-progress.json"));
        auto j = nlohmann::json::parse(*text);
        ASSERT_EQ(j["version"], 2);
        auto& shard = j["shards"][0];
        shard["cursor"] = shard["size"].get<uint64_t>() / 2;
        ASSERT_TRUE(io::write_file_atomic(path(".pack-progress.json"), j.dump()).is_ok());
    };
    interrupt(false);
    EXPECT_FALSE(run_logits(o_.out_dir, ids_, 1).has_value());  // an interrupted pack never loads

    auto r = convert::pack_model(o_);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_TRUE(r->resumed);
    EXPECT_EQ(*io::read_text_file(path("layout.json")), *original);
    auto problems = convert::verify_packed(o_.out_dir);
    ASSERT_TRUE(problems.has_value());
    EXPECT_TRUE(problems->empty());

    auto again = convert::pack_model(o_);
    ASSERT_TRUE(again.has_value());
    EXPECT_TRUE(again->already_complete);

    // A partial file gone missing: the pack starts over and still ends identical.
    interrupt(true);
    auto over = convert::pack_model(o_);
    ASSERT_TRUE(over.has_value()) << over.status().message();
    EXPECT_FALSE(over->resumed);
    EXPECT_EQ(*io::read_text_file(path("layout.json")), *original);
}

TEST_F(PackFaults, WrongArchitecture) {
    // A qwen3_moe config over a qwen3_next pack.
    fs::copy_file(golden("qwen3_moe_mlx_q4") + "/config.json", path("config.json"),
                  fs::copy_options::overwrite_existing);
    auto r = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(r.has_value());
    EXPECT_FALSE(r.status().message().empty());
}

// The description files are covered by the manifest's checksums: one byte of layout.json changed
// after packing ("bits": 4 → 2, which once passed `verify` and printed garbage) is refused by load
// and by verify, naming the file.
TEST_F(PackFaults, ChangedDescriptionFilesAreRefused) {
    auto layout_text = io::read_text_file(path("layout.json"));
    ASSERT_TRUE(layout_text.has_value());
    std::string changed = *layout_text;
    const size_t at = changed.find("\"bits\": 4");
    ASSERT_NE(at, std::string::npos);
    changed[at + 8] = '2';
    ASSERT_TRUE(io::write_file_atomic(path("layout.json"), changed).is_ok());
    auto r = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("'layout.json' does not match its checksum"), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(convert::verify_packed(o_.out_dir).has_value());
    ASSERT_TRUE(io::write_file_atomic(path("layout.json"), *layout_text).is_ok());

    auto config_text = io::read_text_file(path("config.json"));
    ASSERT_TRUE(config_text.has_value());
    std::string config_changed = *config_text;  // same size, still valid JSON: one space becomes a tab
    const size_t space = config_changed.find(": ");
    ASSERT_NE(space, std::string::npos);
    config_changed[space + 1] = '\t';
    ASSERT_TRUE(io::write_file_atomic(path("config.json"), config_changed).is_ok());
    auto c = run_logits(o_.out_dir, ids_, 1);
    ASSERT_FALSE(c.has_value());
    EXPECT_NE(c.status().message().find("'config.json' does not match its checksum"), std::string::npos)
        << c.status().message();
    ASSERT_TRUE(io::write_file_atomic(path("config.json"), *config_text).is_ok());

    // Format version 2: the checksums are required. A manifest without them (a version-1 pack, or
    // one whose xxh3 block was deleted with layout.json edited to match) is refused by load and by
    // verify — it once passed `verify` as "OK".
    const std::string manifest_text = *io::read_text_file(path("manifest.json"));
    auto manifest = nlohmann::json::parse(manifest_text);
    ASSERT_TRUE(manifest.contains("xxh3"));
    EXPECT_EQ(manifest["version"], 2);
    EXPECT_TRUE(manifest["xxh3"].contains("layout.json"));
    EXPECT_TRUE(manifest["xxh3"].contains("config.json"));
    EXPECT_FALSE(manifest["xxh3"].contains("dense.safetensors"));  // checksummed per tensor in layout.json
    auto refused = [&](const nlohmann::json& m, const std::string& expect) {
        ASSERT_TRUE(io::write_file_atomic(path("manifest.json"), m.dump(1)).is_ok());
        auto loaded = run_logits(o_.out_dir, ids_, 1);
        ASSERT_FALSE(loaded.has_value()) << expect;
        EXPECT_NE(loaded.status().message().find(expect), std::string::npos) << loaded.status().message();
        auto v = convert::verify_packed(o_.out_dir);
        ASSERT_FALSE(v.has_value()) << expect;
        EXPECT_NE(v.status().message().find(expect), std::string::npos) << v.status().message();
    };
    nlohmann::json no_sums = manifest;
    no_sums.erase("xxh3");
    refused(no_sums, "manifest.json: 'xxh3' missing");
    nlohmann::json one_missing = manifest;
    one_missing["xxh3"].erase("config.json");
    refused(one_missing, "xxh3: no checksum for 'config.json'");
    nlohmann::json v1 = manifest;
    v1["version"] = 1;
    refused(v1, "format version 1, this sluice reads version 2 (an older pack");
    refused(v1, "re-pack the model");
    // A tokenizer dropped in after packing would be believed unchecked.
    fs::copy_file(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next/tokenizer.json",
                  path("tokenizer.json"));
    refused(manifest, "'tokenizer.json' is not listed in manifest.json (added after packing?)");
    fs::remove(path("tokenizer.json"));
    nlohmann::json bad_size = manifest;
    bad_size["files"]["config.json"] = "12";
    refused(bad_size, "files.config.json: expected a non-negative integer, got a string");
    ASSERT_TRUE(io::write_file_atomic(path("manifest.json"), manifest_text).is_ok());
    EXPECT_TRUE(run_logits(o_.out_dir, ids_, 1).has_value());
}

// layout.json itself, whatever the manifest says: every section's size is its shape × dtype, a
// quantized projection's sections are exactly [rows, cols·bits/32] U32 and [rows, cols/group], the
// sections of a record are aligned and disjoint, and every value has its type — each failure names
// the key (a string "bits" once threw nlohmann's type_error out as "internal error").
TEST_F(PackFaults, LayoutSectionsAreCheckedAgainstTheirShapes) {
    const auto text = io::read_text_file(path("layout.json"));
    ASSERT_TRUE(text.has_value());
    const nlohmann::json good = nlohmann::json::parse(*text);
    ASSERT_TRUE(format::parse_pack_layout(good.dump(), "L.json").has_value());
    struct Case {
        std::function<void(nlohmann::json&)> change;
        std::string expect;
    };
    const std::vector<Case> cases = {
        {[](nlohmann::json& j) { j["expert_files"][0]["gate"]["weight"]["bits"] = 2; },
         "expert_files[0].gate.weight: bits 2 group 32, but the projection says 4 group 32"},
        {[](nlohmann::json& j) { j["expert_files"][0]["up"]["bits"] = 8; },
         "expert_files[0].up.weight: bits 4 group 32, but the projection says 8 group 32"},
        {[](nlohmann::json& j) {
             auto& w = j["expert_files"][1]["down"]["weight"];
             w["shape"][1] = w["shape"][1].get<int64_t>() / 2;
             w["size"] = w["size"].get<uint64_t>() / 2;
         },
         "expert_files[1].down.weight: shape ["},
        {[](nlohmann::json& j) { j["expert_files"][0]["gate"]["scales"]["size"] = 2; },
         "expert_files[0].gate.scales: 'gate.scales' is BF16 ["},
        {[](nlohmann::json& j) { j["expert_files"][0]["gate"]["bits"] = "4"; },
         "expert_files[0].gate.bits: expected an integer in 0..16, got a string \"4\""},
        {[](nlohmann::json& j) { j["expert_files"][0]["layer"] = 4294967296.0; },
         "expert_files[0].layer: expected an integer in 0..65536, got a number"},
        {[](nlohmann::json& j) { j["expert_files"][0]["up"]["weight"]["offset"] = 0; },
         "expert_files[0].up.weight: overlaps expert_files[0].gate.weight"},
        {[](nlohmann::json& j) { j["expert_files"][0]["up"]["weight"]["offset"] = 100; },
         "expert_files[0].up.weight: offset 100 is not 64-byte aligned"},
        {[](nlohmann::json& j) { j["expert_files"][1]["layer"] = j["expert_files"][0]["layer"]; },
         "is listed twice"},
        {[](nlohmann::json& j) {
             j["dense"][0]["shape"] = {1, 2};
         },
         "dense[0]: '"},
        {[](nlohmann::json& j) { j["n_experts"] = -1; },
         "n_experts: expected an integer in 0..1048576, got -1"},
        {[](nlohmann::json& j) { j["source_layout"] = 7; },
         "source_layout: expected a string, got an integer"},
    };
    for (const Case& c : cases) {
        nlohmann::json bad = good;
        c.change(bad);
        auto r = format::parse_pack_layout(bad.dump(), "L.json");
        ASSERT_FALSE(r.has_value()) << c.expect;
        EXPECT_NE(r.status().message().find("L.json"), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    }
    std::string overflow = good.dump();
    const size_t at = overflow.find("\"n_experts\":") + 12;
    overflow.replace(at, overflow.find(',', at) - at, "1e999");
    auto r = format::parse_pack_layout(overflow, "L.json");
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("L.json: n_experts: [json.exception.out_of_range.406]"),
              std::string::npos)
        << r.status().message();
}

// layout.json's dense list and the dense file's own header must describe the same tensors.
TEST_F(PackFaults, DenseLayoutAgreesWithTheDenseHeader) {
    auto layout = format::open_packed_dir(o_.out_dir);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    auto dense = format::Checkpoint::open_files(o_.out_dir, {layout->dense_file});
    ASSERT_TRUE(dense.has_value()) << dense.status().message();
    ASSERT_TRUE(model::check_pack_dense(*layout, **dense, "p").is_ok());
    format::PackLayout moved = *layout;
    moved.dense[1].offset += 64;
    const Status st = model::check_pack_dense(moved, **dense, "p");
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("layout.json dense tensor '" + moved.dense[1].name + "'"), std::string::npos)
        << st.message();
    format::PackLayout renamed = *layout;
    renamed.dense[0].name = "model.nothing";
    EXPECT_NE(model::check_pack_dense(renamed, **dense, "p").message().find("'model.nothing' is not in"),
              std::string::npos);
}

// A layout.json that is intact but does not describe the model of config.json (a consistent but
// wrong pack) is refused at load by model::check_pack_layout, naming the layer and what differs.
TEST_F(PackFaults, LayoutIsCrossCheckedAgainstTheConfig) {
    auto cfg = model::load_model_config(o_.out_dir);
    auto layout = format::open_packed_dir(o_.out_dir);
    ASSERT_TRUE(cfg.has_value() && layout.has_value());
    ASSERT_TRUE(model::check_pack_layout(*cfg, *layout, "p").is_ok());
    struct Case {
        std::function<void(format::PackLayout&)> change;
        std::string expect;
    };
    const std::vector<Case> cases = {
        {[](format::PackLayout& l) { l.expert_files[0].up.bits = 8; },
         "up_proj is 8-bit group 32, config.json's quantization 4-bit group 32"},
        {[](format::PackLayout& l) { l.expert_files[0].down.cols += 64; }, "down_proj is ["},
        {[](format::PackLayout& l) { l.expert_files[0].gate.group_size = 64; },
         "gate_proj is 4-bit group 64"},
        {[](format::PackLayout& l) { l.expert_files.pop_back(); }, "has no expert file for MoE layer"},
        {[](format::PackLayout& l) { l.expert_files.push_back(l.expert_files[0]); }, "twice"},
        {[&](format::PackLayout& l) { l.expert_files[0].layer = cfg->n_layers; }, "-layer model"},
    };
    for (const Case& c : cases) {
        format::PackLayout bad = *layout;
        c.change(bad);
        const Status st = model::check_pack_layout(*cfg, bad, "p");
        ASSERT_FALSE(st.is_ok()) << c.expect;
        EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("layout.json"), std::string::npos) << st.message();
    }
}

// A config.json naming fewer layers than the checkpoint holds is refused, not run truncated.
TEST(Weights, FewerLayersInTheConfigThanInTheCheckpointAreRefused) {
    TempDir dir;
    const std::string src = golden("qwen3_moe_hf_bf16");
    for (const auto& e : fs::directory_iterator(src))
        if (e.path().filename() != "config.json")
            fs::create_symlink(e.path(), dir.file(e.path().filename().string()));
    auto config = nlohmann::json::parse(*io::read_text_file(src + "/config.json"));
    const int64_t layers = config["num_hidden_layers"].get<int64_t>();
    config["num_hidden_layers"] = layers - 1;
    ASSERT_TRUE(io::write_file_atomic(dir.file("config.json"), config.dump()).is_ok());
    auto m = model::Model::load(dir.path());
    ASSERT_FALSE(m.has_value());
    EXPECT_NE(m.status().message().find("num_hidden_layers = " + std::to_string(layers - 1)),
              std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find("of layer " + std::to_string(layers - 1)), std::string::npos)
        << m.status().message();
}

TEST_F(PackFaults, RefusesToPackIntoAnUnrelatedFolder) {
    convert::PackOptions other = o_;
    other.src_dir = golden("qwen3_moe_mlx_q4");
    auto r = convert::pack_model(other);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("already holds a complete pack"), std::string::npos)
        << r.status().message();
}

// manifest.json parsed from text (what the fuzz target pack_fuzz drives): the writer's output reads
// back, and every malformed field is a kCorrupt naming the source.
TEST(PackManifest, ParsesFromTextAndRoundTrips) {
    format::PackManifest m;
    m.format = format::kPackFormatMagic;
    m.version = format::kPackFormatVersion;
    m.files = {{"config.json", 10}, {"dense.safetensors", 4096}, {"layout.json", 20}};
    m.xxh3 = {{"config.json", 0x0123456789abcdefULL}, {"layout.json", 1}};
    const std::string text = format::serialize_pack_manifest(m);
    auto back = format::parse_pack_manifest(text, "m.json");
    ASSERT_TRUE(back.has_value()) << back.status().message();
    EXPECT_EQ(back->files, m.files);
    EXPECT_EQ(back->xxh3, m.xxh3);
    EXPECT_EQ(format::serialize_pack_manifest(*back), text);

    auto refused = [](const std::string& bad, const std::string& expect) {
        auto r = format::parse_pack_manifest(bad, "m.json");
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << bad;
        EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
    };
    const std::string head = R"({"format":"sluice-pack","version":2,)";
    refused("[]", "m.json: expected a JSON object");
    refused(R"({"format":"x","version":2})", "format is not 'sluice-pack'");
    refused(head + R"("files":{"../x":1,"config.json":1,"layout.json":1},"xxh3":{}})",
            "bad file name '../x'");
    refused(head + R"("files":{"config.json":-1},"xxh3":{}})", "files.config.json");
    refused(head + R"("files":{"config.json":1,"layout.json":1},"xxh3":{"config.json":"0"}})",
            "no checksum for 'layout.json'");
    refused(
        head + R"("files":{"config.json":1,"layout.json":1},"xxh3":{"config.json":"zz","layout.json":"1"}})",
        "xxh3.config.json: expected 16 hex digits");
    refused(
        head +
            R"("files":{"config.json":1,"layout.json":1},"xxh3":{"config.json":"1","layout.json":"2","a":"3"}})",
        "xxh3: 'a' is not in 'files'");
    refused(head + R"("files":{"config.json":1},"xxh3":{"config.json":"1"}})", "'layout.json' is not listed");
}

TEST(ExpertCache, LfuKeepsFrequentExpertsAndPoliciesCompareOnOneTrace) {
    // Expert 0 of layer 0 is used every step; others cycle. LFU keeps the hot one, LRU loses it
    // when the cycle is longer than the cache.
    std::vector<experts::ExpertKey> trace;
    for (int step = 0; step < 200; ++step) {
        trace.push_back({0, 0});
        for (int j = 0; j < 4; ++j) trace.push_back({0, 1 + (step * 4 + j) % 12});
    }
    const double lfu = experts::simulate_policy(CachePolicy::kLfu, 4, trace);
    const double lru = experts::simulate_policy(CachePolicy::kLru, 4, trace);
    EXPECT_GT(lfu, 0.19);  // the hot expert hits every step: ≥ 1/5 of accesses
    EXPECT_LT(lru, 0.05);
    EXPECT_EQ(experts::simulate_policy(CachePolicy::kLfu, 0, trace), 0.0);
}

// --memory that holds every expert: preload_experts reads them all in the background at load, so the
// forward finds every expert resident (no miss) and computes what it computes without preloading; a
// cache that cannot hold them all queues nothing.
TEST(Pack, PreloadMakesAModelThatFitsResident) {
    TempDir out;
    convert::PackOptions o;
    o.src_dir = golden("qwen3_moe_mlx_q4");
    o.out_dir = out.file("packed");
    ASSERT_TRUE(convert::pack_model(o).has_value());
    const auto ids = golden_ids("qwen3_moe_mlx_q4");
    auto want = run_logits(o.out_dir, ids, 0);
    ASSERT_TRUE(want.has_value()) << want.status().message();

    EngineOptions eo;
    eo.model_dir = o.out_dir;
    eo.threads = 2;
    eo.context_tokens = static_cast<int64_t>(ids.size());
    eo.memory_bytes = 4ull << 30;
    eo.preload_experts = true;
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    const ModelInfo& info = (*engine)->info();
    int64_t moe_layers = 0;
    {
        auto layout = format::open_packed_dir(o.out_dir);
        ASSERT_TRUE(layout.has_value()) << layout.status().message();
        moe_layers = static_cast<int64_t>(layout->expert_files.size());
    }
    const auto records = static_cast<uint64_t>(moe_layers * info.n_experts);
    ASSERT_GT(records, 0u);
    for (int i = 0; i < 2000 && (*engine)->expert_cache_stats().reads < records; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ((*engine)->expert_cache_stats().reads, records);
    (*engine)->reset_expert_cache_stats();
    auto session = (*engine)->new_session();
    const size_t split = ids.size() - 4;
    auto got = session->evaluate(std::span<const int32_t>(ids.data(), split), true, 64);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    for (size_t i = split; i < ids.size(); ++i) {
        auto step = session->evaluate(std::span<const int32_t>(&ids[i], 1), false);
        ASSERT_TRUE(step.has_value());
        got->insert(got->end(), step->begin(), step->end());
    }
    const ExpertCacheStats st = (*engine)->expert_cache_stats();
    EXPECT_EQ(st.misses, 0u);
    EXPECT_EQ(st.reads, 0u);
    EXPECT_GT(st.hits, 0u);
    ASSERT_EQ(got->size(), want->size());
    EXPECT_EQ(std::memcmp(got->data(), want->data(), got->size() * sizeof(float)), 0);

    // A cache of a few slots: nothing to preload.
    eo.expert_cache_bytes = 4 * (*engine)->memory_plan().slot_bytes;
    engine->reset();
    auto small = Engine::load(eo);
    ASSERT_TRUE(small.has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ((*small)->expert_cache_stats().reads, 0u);
}

}  // namespace
}  // namespace sluice
