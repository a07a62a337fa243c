// gpt-oss's routed experts, pinned independently of the end-to-end goldens: the Hub's MXFP4 rows repacked
// into ggml's MXFP4 (model/gpt_oss_experts.h) against a decode of the Hub's layout written here from its
// definition (transformers' integrations/mxfp4.py: e2m1 codes, byte j holding element 2j low and 2j + 1
// high, times 2^(scale − 127)), through the reference and the dispatched kernels; the experts the
// gpt_oss_hf_mxfp4 and gpt_oss_hf_bf16 goldens bind against a direct read of their model.safetensors
// (gate = the even rows / columns of gate_up, up = the odd ones, down); and damaged checkpoints refused by
// the tensor's name.
//
// What the decode here and ggml's differ in (asserted, not hidden): ggml's MXFP4 table holds the doubled
// e2m1 values as integers (kernels::kMxfp4Values), so code 8, the Hub's −0, dequantizes to +0. Every other
// element — every code at every scale 0..255, subnormal results at scales 0..1 and overflow to ±inf at the
// top included — is the same float bit for bit. Scale 255 is NaN in the OCP MX spec; neither ggml (2^127
// times the doubled value) nor transformers (torch.ldexp: ±inf, or NaN for a zero code) follows that, and
// std::ldexp here agrees with ggml.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "format/safetensors.h"
#include "io/mapped_file.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"
#include "model/gpt_oss_experts.h"
#include "model/model.h"
#include "sluice/engine.h"
#include "test_util.h"

namespace sluice {
namespace {

using format::DType;
using kernels::WeightType;
using kernels::WeightView;

// OCP MX FP4 (e2m1), as transformers' FP4_VALUES lists it.
constexpr float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// One row of `cols` elements in the Hub's layout (blocks: cols / 32 × 16 bytes; scales: cols / 32 e8m0),
// decoded from the definition.
std::vector<float> hub_decode(const uint8_t* blocks, const uint8_t* scales, int64_t cols) {
    std::vector<float> out(static_cast<size_t>(cols));
    for (int64_t b = 0; b < cols / 32; ++b) {
        const int exponent = static_cast<int>(scales[b]) - 127;
        for (int64_t j = 0; j < 16; ++j) {
            const uint8_t byte = blocks[b * 16 + j];
            out[static_cast<size_t>(b * 32 + 2 * j)] = std::ldexp(kFp4[byte & 0x0F], exponent);
            out[static_cast<size_t>(b * 32 + 2 * j + 1)] = std::ldexp(kFp4[byte >> 4], exponent);
        }
    }
    return out;
}

// What ggml's MXFP4 gives for the Hub's value `hub`: the same float, except −0 (code 8) comes out +0.
float ggml_expected(float hub) {
    return hub == 0.0f ? +0.0f : hub;
}

// Fails naming the first element whose bits differ from ggml_expected(hub); counts the Hub's −0s seen.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& hub, const std::string& what,
                      int64_t* negative_zeros = nullptr) {
    ASSERT_EQ(got.size(), hub.size()) << what;
    for (size_t i = 0; i < hub.size(); ++i) {
        if (negative_zeros != nullptr && hub[i] == 0.0f && std::signbit(hub[i])) ++*negative_zeros;
        const auto want = std::bit_cast<uint32_t>(ggml_expected(hub[i]));
        const auto have = std::bit_cast<uint32_t>(got[i]);
        ASSERT_EQ(have, want) << what << ": element " << i << " is " << got[i] << ", the Hub's decode "
                              << hub[i];
    }
}

// Random Hub-layout rows [rows, cols]: random codes, scales from `scale_of(row, block)`.
struct HubRows {
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> blocks, scales, ggml;  // ggml: the repacked rows, rows × cols / 32 × 17 bytes
    WeightView view() const {
        WeightView v;
        v.type = WeightType::kGgmlMXFP4;
        v.rows = rows;
        v.cols = cols;
        v.data = ggml.data();
        return v;
    }
    std::vector<float> decode(int64_t r) const {
        return hub_decode(blocks.data() + r * (cols / 32) * 16, scales.data() + r * (cols / 32), cols);
    }
};

HubRows random_hub_rows(std::mt19937& rng, int64_t rows, int64_t cols,
                        const std::function<uint8_t(int64_t, int64_t)>& scale_of) {
    HubRows h;
    h.rows = rows;
    h.cols = cols;
    const int64_t nb = cols / 32;
    h.blocks.resize(static_cast<size_t>(rows * nb * 16));
    h.scales.resize(static_cast<size_t>(rows * nb));
    h.ggml.resize(static_cast<size_t>(rows * nb * model::kMxfp4BlockBytes));
    for (auto& b : h.blocks) b = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < nb; ++b) h.scales[static_cast<size_t>(r * nb + b)] = scale_of(r, b);
    for (int64_t r = 0; r < rows; ++r)
        model::mxfp4_row_hub_to_ggml(h.blocks.data() + r * nb * 16, h.scales.data() + r * nb, cols,
                                     h.ggml.data() + r * nb * model::kMxfp4BlockBytes);
    return h;
}

// Every scale 0..255 in every row (block b of row r: (b + 37r) mod 256), random codes.
TEST(GptOssMxfp4, HubRowsRepackToGgmlBitForBit) {
    std::mt19937 rng(120);
    const HubRows h = random_hub_rows(
        rng, 5, 32 * 256, [](int64_t r, int64_t b) { return static_cast<uint8_t>((b + 37 * r) % 256); });
    int64_t negative_zeros = 0;
    for (int64_t r = 0; r < h.rows; ++r) {
        std::vector<float> got(static_cast<size_t>(h.cols), NAN);
        kernels::reference::dequantize_row(h.view(), r, got.data());
        expect_same_bits(got, h.decode(r), "row " + std::to_string(r), &negative_zeros);
        if (HasFatalFailure()) return;
    }
    EXPECT_GT(negative_zeros, 0);  // the −0 case was exercised

    // The edges spelled out: the smallest scale (results subnormal, still exact), the largest finite
    // power, and the top scales where 6 · 2^127 and beyond overflow to inf on both sides.
    const uint8_t codes[16] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,
                               0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
    for (const int scale : {0, 1, 2, 126, 127, 128, 253, 254, 255}) {
        SCOPED_TRACE("scale " + std::to_string(scale));
        const auto s = static_cast<uint8_t>(scale);
        uint8_t block[model::kMxfp4BlockBytes];
        model::mxfp4_row_hub_to_ggml(codes, &s, 32, block);
        EXPECT_EQ(block[0], s);
        WeightView v;
        v.type = WeightType::kGgmlMXFP4;
        v.rows = 1;
        v.cols = 32;
        v.data = block;
        std::vector<float> got(32, NAN);
        kernels::reference::dequantize_row(v, 0, got.data());
        const std::vector<float> hub = hub_decode(codes, &s, 32);
        expect_same_bits(got, hub, "scale " + std::to_string(scale));
        // Element k holds code k (byte k / 2, its low nibble for even k, high for odd): the Hub's order.
        for (int j = 0; j < 16; ++j)
            EXPECT_EQ(std::bit_cast<uint32_t>(got[static_cast<size_t>(j)]),
                      std::bit_cast<uint32_t>(ggml_expected(std::ldexp(kFp4[j], scale - 127))))
                << j;
    }
    // The values named: 0.5 · 2^-127 = 2^-128 (subnormal), 6 · 2^127 = inf, 0.5 · 2^128 = 2^127.
    const uint8_t one_half = 0x11, six = 0x77;
    for (const auto& [code, scale, want] :
         {std::tuple<uint8_t, uint8_t, float>{one_half, 0, std::ldexp(1.0f, -128)},
          {six, 254, INFINITY},
          {one_half, 255, std::ldexp(1.0f, 127)}}) {
        uint8_t hub_codes[16];
        std::memset(hub_codes, code, 16);
        uint8_t block[model::kMxfp4BlockBytes];
        model::mxfp4_row_hub_to_ggml(hub_codes, &scale, 32, block);
        WeightView v;
        v.type = WeightType::kGgmlMXFP4;
        v.rows = 1;
        v.cols = 32;
        v.data = block;
        std::vector<float> got(32, NAN);
        kernels::reference::dequantize_row(v, 0, got.data());
        for (float g : got) EXPECT_EQ(g, want) << "scale " << int{scale};
    }
}

template <typename Body>
void for_each_isa(Body body) {
    for (const std::string& isa : kernels::testing::supported_isas()) {
        SCOPED_TRACE("isa=" + isa);
        ASSERT_TRUE(kernels::testing::force_isa(isa));
        body();
    }
    kernels::testing::force_isa("");
}

// The dispatched dequantize_row of repacked rows is the Hub's decode bit for bit (every scale), and
// matvec over them (f32 and int8 activations, with and without a pool) is the product with the Hub's
// decode, summed here in double, within the kernels' bounds: 2e-6 of Σ|w·x| for f32 rounding, plus
// Σ_b max|x_b| / 254 · Σ_{i∈b} |w_i| for the int8 activations (kernels.h, Activations::kInt8).
TEST(GptOssMxfp4, DispatchedKernelsOverRepackedRowsAreTheHubDecode) {
    std::mt19937 rng(20);
    const HubRows all = random_hub_rows(
        rng, 3, 32 * 256, [](int64_t r, int64_t b) { return static_cast<uint8_t>((b + 91 * r) % 256); });
    // Scales 2^-27 .. 2^12, as trained weights have them (no overflow in the products).
    std::uniform_int_distribution<int> scale(100, 139);
    const HubRows h =
        random_hub_rows(rng, 19, 2048, [&](int64_t, int64_t) { return static_cast<uint8_t>(scale(rng)); });
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(h.cols));
    for (auto& v : x) v = normal(rng);
    std::vector<double> want(static_cast<size_t>(h.rows)), f32_bound(want.size()), int8_bound(want.size());
    for (int64_t r = 0; r < h.rows; ++r) {
        const std::vector<float> w = h.decode(r);
        double sum = 0, abs_sum = 0, int8 = 0;
        for (int64_t b = 0; b < h.cols / 32; ++b) {
            double max_x = 0, abs_w = 0;
            for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
                const auto k = static_cast<size_t>(i);
                sum += static_cast<double>(w[k]) * x[k];
                abs_sum += std::fabs(static_cast<double>(w[k]) * x[k]);
                max_x = std::max(max_x, std::fabs(static_cast<double>(x[k])));
                abs_w += std::fabs(static_cast<double>(w[k]));
            }
            int8 += max_x / 254.0 * abs_w;
        }
        want[static_cast<size_t>(r)] = sum;
        f32_bound[static_cast<size_t>(r)] = 2e-6 * abs_sum;
        int8_bound[static_cast<size_t>(r)] = 2e-6 * abs_sum + 1.01 * int8;
    }
    ThreadPool two(2);
    for_each_isa([&] {
        for (int64_t r = 0; r < all.rows; ++r) {
            std::vector<float> got(static_cast<size_t>(all.cols), NAN);
            kernels::dequantize_row(all.view(), r, got.data());
            expect_same_bits(got, all.decode(r), "dequantize_row " + std::to_string(r));
            if (HasFatalFailure()) return;
        }
        for (const auto activations : {kernels::Activations::kF32, kernels::Activations::kInt8}) {
            WeightView v = h.view();
            v.activations = activations;
            const bool int8 = activations == kernels::Activations::kInt8;
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                std::vector<float> fast(static_cast<size_t>(h.rows), NAN), ref(fast);
                kernels::matvec(v, x.data(), fast.data(), pool);
                kernels::reference::matvec(v, x.data(), ref.data(), nullptr);
                for (int64_t r = 0; r < h.rows; ++r) {
                    const auto k = static_cast<size_t>(r);
                    const double bound = int8 ? int8_bound[k] : f32_bound[k];
                    EXPECT_NEAR(fast[k], want[k], bound) << (int8 ? "int8" : "f32") << " row " << r;
                    EXPECT_NEAR(ref[k], want[k], bound) << (int8 ? "int8" : "f32") << " reference row " << r;
                }
            }
        }
    });
}

// ---- checkpoints ---------------------------------------------------------------------------------

std::string golden(const std::string& name) {
    return testing::test_data_dir() + "/goldens/" + name;
}

// A golden's tensors, editable, written with a config into a fresh folder.
struct EditableCheckpoint {
    std::shared_ptr<format::Checkpoint> source;
    std::vector<format::TensorToWrite> tensors;
    std::deque<std::string> blobs;  // bytes of replaced tensors
    nlohmann::json config;

    explicit EditableCheckpoint(const std::string& dir) {
        auto ck = format::Checkpoint::open(dir);
        EXPECT_TRUE(ck.has_value()) << ck.status().message();
        if (!ck.has_value()) return;
        source = *ck;
        for (const std::string& n : source->names()) {
            const format::TensorInfo* t = source->find(n);
            tensors.push_back({n, t->dtype, t->shape,
                               std::string_view(reinterpret_cast<const char*>(t->data), t->size_bytes)});
        }
        auto text = io::read_text_file(dir + "/config.json");
        EXPECT_TRUE(text.has_value());
        if (text.has_value()) config = nlohmann::json::parse(*text);
    }
    format::TensorToWrite* find(const std::string& name) {
        for (auto& t : tensors)
            if (t.name == name) return &t;
        ADD_FAILURE() << "no tensor " << name;
        return nullptr;
    }
    void remove(const std::string& name) {
        const auto before = tensors.size();
        std::erase_if(tensors, [&](const format::TensorToWrite& t) { return t.name == name; });
        EXPECT_EQ(tensors.size() + 1, before) << name;
    }
    // Replaces (or adds) `name` with zero bytes of dtype and shape.
    void put(const std::string& name, DType dtype, std::vector<int64_t> shape) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        const std::string_view bytes =
            blobs.emplace_back(static_cast<size_t>(n) * format::dtype_size(dtype), '\0');
        for (auto& t : tensors)
            if (t.name == name) {
                t = {name, dtype, std::move(shape), bytes};
                return;
            }
        tensors.push_back({name, dtype, std::move(shape), bytes});
    }
    ::testing::AssertionResult write(const std::string& dir) const {
        std::filesystem::create_directories(dir);
        if (!io::write_file_atomic(dir + "/config.json", config.dump(2)).is_ok())
            return ::testing::AssertionFailure() << "config.json";
        Status s = format::write_safetensors(dir + "/model.safetensors", tensors);
        if (!s.is_ok()) return ::testing::AssertionFailure() << s.message();
        return ::testing::AssertionSuccess();
    }
};

// Engine::load of `dir` fails, and its message holds every one of `expect`.
void expect_refused(const std::string& dir, const std::vector<std::string>& expect) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 1;
    eo.context_tokens = 64;
    eo.memory_bytes = 1ull << 30;
    auto engine = Engine::load(eo);
    ASSERT_FALSE(engine.has_value()) << dir << " loaded";
    for (const std::string& e : expect)
        EXPECT_NE(engine.status().message().find(e), std::string::npos)
            << "'" << e << "' not in: " << engine.status().message();
}

// Damaged copies of the MXFP4 golden are refused at load with the tensor (or the dimension) named.
TEST(GptOssCheckpoint, DamagedCheckpointsAreRefusedByName) {
    const std::string src = golden("gpt_oss_hf_mxfp4");
    testing::TempDir tmp;
    {  // The intact copy loads: the edits below are the only cause.
        EditableCheckpoint ck(src);
        ASSERT_TRUE(ck.write(tmp.file("intact")));
        EngineOptions eo;
        eo.model_dir = tmp.file("intact");
        eo.threads = 1;
        eo.context_tokens = 64;
        auto engine = Engine::load(eo);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
    }
    const std::string ex = "model.layers.1.mlp.experts.";
    struct Case {
        std::string name;
        std::function<void(EditableCheckpoint&)> edit;
        std::vector<std::string> expect;
    };
    const std::vector<Case> cases = {
        {"no_sinks",
         [](EditableCheckpoint& c) { c.remove("model.layers.2.self_attn.sinks"); },
         {"model.layers.2.self_attn.sinks"}},
        {"gate_up_blocks_shape",
         [&](EditableCheckpoint& c) {
             c.put(ex + "gate_up_proj_blocks", DType::kU8, {8, 64, 4, 16});
         },
         {ex + "gate_up_proj_blocks", "[8,128,2,16]", "[8,64,4,16]"}},
        {"gate_up_scales_dtype",
         [&](EditableCheckpoint& c) {
             c.put(ex + "gate_up_proj_scales", DType::kI8, {8, 128, 2});
         },
         {ex + "gate_up_proj_scales", "U8", "I8"}},
        {"down_scales_shape",
         [&](EditableCheckpoint& c) {
             c.put(ex + "down_proj_scales", DType::kU8, {8, 64, 1});
         },
         {ex + "down_proj_scales", "[8,64,2]"}},
        {"no_down_bias",
         [&](EditableCheckpoint& c) { c.remove(ex + "down_proj_bias"); },
         {ex + "down_proj_bias"}},
        {"no_down_blocks",
         [&](EditableCheckpoint& c) { c.remove(ex + "down_proj_blocks"); },
         {ex + "down_proj_blocks"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        EditableCheckpoint ck(src);
        c.edit(ck);
        if (HasFailure()) return;
        ASSERT_TRUE(ck.write(tmp.file(c.name)));
        expect_refused(tmp.file(c.name), c.expect);
    }

    // hidden_size 48 (not a multiple of 32) with MXFP4 experts: a consistent one-layer checkpoint whose
    // only fault is that; the blocks' trailing shape cannot even be written, so the dimension is named.
    EditableCheckpoint ck(src);
    const int64_t H = 48, I = 64, E = 8, V = 256, nh = 4, nkv = 2, hd = 16;
    ck.config["hidden_size"] = H;
    ck.config["num_hidden_layers"] = 1;
    ck.config["layer_types"] = {"sliding_attention"};
    ck.tensors.clear();
    const std::string l0 = "model.layers.0.";
    ck.put("model.embed_tokens.weight", DType::kBF16, {V, H});
    ck.put("lm_head.weight", DType::kBF16, {V, H});
    ck.put("model.norm.weight", DType::kBF16, {H});
    ck.put(l0 + "input_layernorm.weight", DType::kBF16, {H});
    ck.put(l0 + "post_attention_layernorm.weight", DType::kBF16, {H});
    for (const auto& [proj, rows] :
         {std::pair<std::string, int64_t>{"q_proj", nh * hd}, {"k_proj", nkv * hd}, {"v_proj", nkv * hd}}) {
        ck.put(l0 + "self_attn." + proj + ".weight", DType::kBF16, {rows, H});
        ck.put(l0 + "self_attn." + proj + ".bias", DType::kBF16, {rows});
    }
    ck.put(l0 + "self_attn.o_proj.weight", DType::kBF16, {H, nh * hd});
    ck.put(l0 + "self_attn.o_proj.bias", DType::kBF16, {H});
    ck.put(l0 + "self_attn.sinks", DType::kBF16, {nh});
    ck.put(l0 + "mlp.router.weight", DType::kBF16, {E, H});
    ck.put(l0 + "mlp.router.bias", DType::kBF16, {E});
    ck.put(l0 + "mlp.experts.gate_up_proj_bias", DType::kBF16, {E, 2 * I});
    ck.put(l0 + "mlp.experts.down_proj_bias", DType::kBF16, {E, H});
    ck.put(l0 + "mlp.experts.gate_up_proj_blocks", DType::kU8, {E, 2 * I, 2, 16});
    ck.put(l0 + "mlp.experts.gate_up_proj_scales", DType::kU8, {E, 2 * I, 2});
    ck.put(l0 + "mlp.experts.down_proj_blocks", DType::kU8, {E, H, I / 32, 16});
    ck.put(l0 + "mlp.experts.down_proj_scales", DType::kU8, {E, H, I / 32});
    ASSERT_TRUE(ck.write(tmp.file("hidden48")));
    expect_refused(tmp.file("hidden48"), {l0 + "mlp.experts.gate_up_proj_blocks", "hidden_size (48)", "32"});
}

// ---- what the goldens bind -----------------------------------------------------------------------

// The MXFP4 golden's experts as Model::load binds them, dequantized, are the Hub decode of its
// model.safetensors bit for bit (but −0): gate row j from gate_up row 2j, up row j from row 2j + 1, down
// row r from down row r; and the expert biases de-interleaved the same way.
TEST(GptOssCheckpoint, BoundMxfp4ExpertsAreTheHubDecodeOfTheGolden) {
    const std::string dir = golden("gpt_oss_hf_mxfp4");
    auto model = model::Model::load(dir);
    ASSERT_TRUE(model.has_value()) << model.status().message();
    auto ck = format::Checkpoint::open(dir);
    ASSERT_TRUE(ck.has_value()) << ck.status().message();
    const model::ModelConfig& c = (*model)->config();
    const int64_t E = c.n_experts, I = c.expert_ffn, H = c.hidden;
    ASSERT_TRUE(c.mxfp4_experts);
    int64_t rows_checked = 0;
    for (const int64_t l : {int64_t{0}, c.n_layers - 1}) {
        const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
        const format::TensorInfo* gu = (*ck)->find(p + "gate_up_proj_blocks");
        const format::TensorInfo* gus = (*ck)->find(p + "gate_up_proj_scales");
        const format::TensorInfo* dn = (*ck)->find(p + "down_proj_blocks");
        const format::TensorInfo* dns = (*ck)->find(p + "down_proj_scales");
        const format::TensorInfo* gub = (*ck)->find(p + "gate_up_proj_bias");
        const format::TensorInfo* dnb = (*ck)->find(p + "down_proj_bias");
        ASSERT_TRUE(gu && gus && dn && dns && gub && dnb);
        ASSERT_EQ(gub->dtype, DType::kBF16);
        const model::MoeWeights& m = (*model)->weights().layers[static_cast<size_t>(l)].moe_w;
        ASSERT_EQ(static_cast<int64_t>(m.experts.size()), E);
        for (const int64_t e : {int64_t{0}, int64_t{3}, E - 1}) {
            SCOPED_TRACE("layer " + std::to_string(l) + " expert " + std::to_string(e));
            const model::ExpertWeights& x = m.experts[static_cast<size_t>(e)];
            for (const WeightView* v : {&x.gate, &x.up, &x.down}) ASSERT_EQ(v->type, WeightType::kGgmlMXFP4);
            ASSERT_EQ(x.gate.rows, I);
            ASSERT_EQ(x.gate.cols, H);
            ASSERT_EQ(x.down.rows, H);
            ASSERT_EQ(x.down.cols, I);
            const int64_t hb = H / 32, ib = I / 32;
            for (const int64_t j : {int64_t{0}, int64_t{1}, I / 2, I - 1}) {
                for (const int half : {0, 1}) {  // 0: gate, 1: up
                    const int64_t src_row = e * 2 * I + 2 * j + half;
                    const std::vector<float> hub =
                        hub_decode(gu->data + src_row * hb * 16, gus->data + src_row * hb, H);
                    std::vector<float> got(static_cast<size_t>(H), NAN);
                    kernels::reference::dequantize_row(half == 0 ? x.gate : x.up, j, got.data());
                    expect_same_bits(got, hub,
                                     std::string(half == 0 ? "gate" : "up") + " row " + std::to_string(j));
                    uint16_t bias;
                    std::memcpy(&bias, gub->data + 2 * (e * 2 * I + 2 * j + half), 2);
                    const std::vector<float>& bound = half == 0 ? m.expert_gate_bias : m.expert_up_bias;
                    EXPECT_EQ(bound[static_cast<size_t>(e * I + j)], kernels::bf16_to_f32(bias)) << j;
                    ++rows_checked;
                }
            }
            for (const int64_t r : {int64_t{0}, int64_t{1}, H / 2, H - 1}) {
                const int64_t src_row = e * H + r;
                const std::vector<float> hub =
                    hub_decode(dn->data + src_row * ib * 16, dns->data + src_row * ib, I);
                std::vector<float> got(static_cast<size_t>(I), NAN);
                kernels::reference::dequantize_row(x.down, r, got.data());
                expect_same_bits(got, hub, "down row " + std::to_string(r));
                uint16_t bias;
                std::memcpy(&bias, dnb->data + 2 * (e * H + r), 2);
                EXPECT_EQ(m.expert_down_bias[static_cast<size_t>(e * H + r)], kernels::bf16_to_f32(bias))
                    << r;
                ++rows_checked;
            }
            if (HasFatalFailure()) return;
        }
    }
    EXPECT_EQ(rows_checked, 2 * 3 * 12);
}

// The BF16 golden's experts (transformers' input-major gate_up_proj [E, H, 2I], down_proj [E, I, H]) as
// bound: gate[j][c] = gate_up_proj[e, c, 2j], up[j][c] = gate_up_proj[e, c, 2j + 1], down[r][c] =
// down_proj[e, c, r], the same bf16 values.
TEST(GptOssCheckpoint, BoundFloatExpertsAreTheInterleavedColumnsOfTheGolden) {
    const std::string dir = golden("gpt_oss_hf_bf16");
    auto model = model::Model::load(dir);
    ASSERT_TRUE(model.has_value()) << model.status().message();
    auto ck = format::Checkpoint::open(dir);
    ASSERT_TRUE(ck.has_value()) << ck.status().message();
    const model::ModelConfig& c = (*model)->config();
    const int64_t E = c.n_experts, I = c.expert_ffn, H = c.hidden;
    const int64_t l = c.n_layers - 1;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    const format::TensorInfo* gu = (*ck)->find(p + "gate_up_proj");
    const format::TensorInfo* dn = (*ck)->find(p + "down_proj");
    ASSERT_TRUE(gu && dn);
    ASSERT_EQ(gu->dtype, DType::kBF16);
    ASSERT_EQ(gu->shape, (std::vector<int64_t>{E, H, 2 * I}));
    ASSERT_EQ(dn->shape, (std::vector<int64_t>{E, I, H}));
    auto at = [](const format::TensorInfo* t, int64_t i) {
        uint16_t v;
        std::memcpy(&v, t->data + 2 * i, 2);
        return kernels::bf16_to_f32(v);
    };
    const model::MoeWeights& m = (*model)->weights().layers[static_cast<size_t>(l)].moe_w;
    for (const int64_t e : {int64_t{0}, E - 1}) {
        const model::ExpertWeights& x = m.experts[static_cast<size_t>(e)];
        ASSERT_EQ(x.gate.type, WeightType::kBF16);
        std::vector<float> row(static_cast<size_t>(std::max(H, I)));
        for (const int64_t j : {int64_t{0}, int64_t{1}, I - 1}) {
            for (const int half : {0, 1}) {
                kernels::reference::dequantize_row(half == 0 ? x.gate : x.up, j, row.data());
                for (int64_t col = 0; col < H; ++col)
                    ASSERT_EQ(row[static_cast<size_t>(col)], at(gu, (e * H + col) * 2 * I + 2 * j + half))
                        << "expert " << e << (half == 0 ? " gate" : " up") << " row " << j << " col " << col;
            }
        }
        for (const int64_t r : {int64_t{0}, int64_t{1}, H - 1}) {
            kernels::reference::dequantize_row(x.down, r, row.data());
            for (int64_t col = 0; col < I; ++col)
                ASSERT_EQ(row[static_cast<size_t>(col)], at(dn, (e * I + col) * H + r))
                    << "expert " << e << " down row " << r << " col " << col;
        }
    }
}

}  // namespace
}  // namespace sluice
