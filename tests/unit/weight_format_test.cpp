// The weight-format registry (kernels/weight_format.h): every entry is consistent with itself and
// with the views that use it; every format with CPU kernels dequantises, on the fast path, exactly
// what its reference definition says; storage that names no registered format is refused where
// checkpoints and packs are bound (the tensor map, the expert store's check of layout.json).
#include "kernels/weight_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "convert/packer.h"
#include "experts/expert_store.h"
#include "format/pack.h"
#include "kernels/kernels.h"
#include "model/tensor_map.h"
#include "test_util.h"

namespace sluice {
namespace {

using kernels::WeightFormat;
using kernels::WeightType;

TEST(WeightFormat, EntriesAreConsistent) {
    std::set<std::string> names;
    for (const WeightFormat& f : kernels::weight_formats()) {
        EXPECT_EQ(&kernels::weight_format(f.type), &f);
        EXPECT_TRUE(names.insert(f.name).second) << f.name << " registered twice";
        EXPECT_STREQ(kernels::weight_type_name(f.type), f.name);
        EXPECT_NE(f.reference_element, nullptr) << f.name;
        EXPECT_FALSE(f.quantized() && f.ggml_blocks()) << f.name;
        EXPECT_TRUE(f.quantized()     ? f.element_bytes == 0 && 32 % f.code_bits == 0
                    : f.ggml_blocks() ? f.element_bytes == 0 && f.code_bits == 0
                                      : f.element_bytes > 0)
            << f.name;
        if (f.ggml_blocks()) {
            // ggml's own numbers for the type (ggml_quants.h), and nothing beside the blocks.
            const kernels::GgmlFormat& g = kernels::ggml_format(f.ggml);
            EXPECT_EQ(f.block_elems, g.block_elems) << f.name;
            EXPECT_EQ(f.block_bytes, g.block_bytes) << f.name;
            // A GGUF type binds its natural layout; row tiles are written at load (ggml_tiles.h).
            const WeightFormat* natural = kernels::ggml_weight_format(static_cast<uint32_t>(f.ggml));
            ASSERT_NE(natural, nullptr) << f.name;
            EXPECT_EQ(natural == &f, !f.row_tiles()) << f.name;
            EXPECT_FALSE(natural->row_tiles()) << f.name;
            EXPECT_EQ(f.data_row_bytes(512), static_cast<size_t>(512 / g.block_elems * g.block_bytes));
            EXPECT_EQ(f.aux_row_bytes(512, 0, kernels::ScaleType::kBF16), 0u);
            EXPECT_EQ(f.shape_error(512, 0), nullptr);
            EXPECT_NE(f.shape_error(512 + 16, 0), nullptr);
            EXPECT_FALSE(f.packable) << f.name;
            EXPECT_TRUE(f.int8_kernels) << f.name << ": every ggml block type has its integer products";
        } else if (f.quantized()) {
            EXPECT_EQ(kernels::quantized_format(f.code_bits), &f);
            EXPECT_EQ(f.data_row_bytes(256), static_cast<size_t>(256 * f.code_bits / 8));
            EXPECT_EQ(f.aux_row_bytes(256, 64, kernels::ScaleType::kBF16), 2u * 4 * 2);
            EXPECT_EQ(f.shape_error(256, 64), nullptr);
            EXPECT_NE(f.shape_error(100, 64), nullptr);
            EXPECT_NE(f.shape_error(256, 0), nullptr);
        } else {
            EXPECT_EQ(f.aux_row_bytes(256, 64, kernels::ScaleType::kBF16), 0u);
            EXPECT_EQ(f.shape_error(100, 0), nullptr);
        }
        kernels::WeightView v;
        v.type = f.type;
        v.cols = 512;
        EXPECT_EQ(v.row_bytes(), f.data_row_bytes(512));
        EXPECT_EQ(v.quantized(), f.quantized());
        EXPECT_EQ(v.bits(), f.code_bits);
        // int8 activations: only where the format says it has the products, and only as asked.
        EXPECT_TRUE(!f.int8_kernels || ((f.quantized() || f.ggml_blocks()) && f.cpu_kernels)) << f.name;
        v.group_size = f.ggml_blocks() ? 0 : 64;
        EXPECT_FALSE(v.int8_activations()) << f.name << ": f32 activations unless asked";
        v.activations = kernels::Activations::kInt8;
        EXPECT_EQ(v.int8_activations(), f.int8_kernels) << f.name;
        if (!f.ggml_blocks()) {  // a ggml block holds its own scales: no group
            v.group_size = 48;
            EXPECT_FALSE(v.int8_activations()) << f.name << ": a group that is not a power of two >= 32";
        }
    }
    EXPECT_EQ(kernels::quantized_format(3), nullptr);
    EXPECT_EQ(kernels::packable_bits(), "4 or 8");
    // GGUF's float types are the float formats; a type without kernels (Q2_K = 10) has none.
    EXPECT_EQ(kernels::ggml_weight_format(0)->type, WeightType::kF32);
    EXPECT_EQ(kernels::ggml_weight_format(1)->type, WeightType::kF16);
    EXPECT_EQ(kernels::ggml_weight_format(30)->type, WeightType::kBF16);
    EXPECT_EQ(kernels::ggml_weight_format(10), nullptr);
    EXPECT_EQ(kernels::ggml_weight_format(15), nullptr);  // Q8_K: ggml's activation type, no weight
}

// Random storage of each format: the fast path's dequantize_row (every ISA this machine has picks
// one) against the reference row and the format's element definition, bit for bit. (ggml's block
// formats: GgufLinear.EveryOpOverEveryBlockFormatOnEveryIsa, over valid random blocks.)
TEST(WeightFormat, FastDequantizationIsTheReferenceDefinition) {
    std::mt19937 rng(7);
    const int64_t rows = 3, cols = 256, group = 64;
    for (const WeightFormat& f : kernels::weight_formats()) {
        if (!f.cpu_kernels || f.ggml_blocks()) continue;
        std::vector<uint8_t> data(rows * f.data_row_bytes(cols));
        std::vector<uint16_t> scales(rows * cols / group), biases(rows * cols / group);
        kernels::WeightView v;
        v.type = f.type;
        v.rows = rows;
        v.cols = cols;
        if (f.quantized()) {
            for (auto& b : data) b = static_cast<uint8_t>(rng());
            std::normal_distribution<float> n(0.0f, 0.05f);
            for (size_t i = 0; i < scales.size(); ++i) {
                scales[i] = kernels::f32_to_bf16(n(rng));
                biases[i] = kernels::f32_to_bf16(n(rng));
            }
            v.scales = scales.data();
            v.biases = biases.data();
            v.group_size = static_cast<int32_t>(group);
            v.scale_type = kernels::ScaleType::kBF16;
        } else {
            std::normal_distribution<float> n(0.0f, 1.0f);
            for (int64_t i = 0; i < rows * cols; ++i) {
                const float x = n(rng);
                if (f.type == WeightType::kF32) std::memcpy(&data[i * 4], &x, 4);
                const uint16_t h =
                    f.type == WeightType::kF16 ? kernels::f32_to_f16(x) : kernels::f32_to_bf16(x);
                if (f.type != WeightType::kF32) std::memcpy(&data[i * 2], &h, 2);
            }
        }
        v.data = data.data();
        std::vector<float> fast(cols), ref(cols);
        for (int64_t r = 0; r < rows; ++r) {
            kernels::dequantize_row(v, r, fast.data());
            kernels::reference::dequantize_row(v, r, ref.data());
            for (int64_t i = 0; i < cols; ++i) {
                ASSERT_EQ(fast[i], ref[i]) << f.name << " row " << r << " col " << i;
                ASSERT_EQ(ref[i], f.reference_element(v, r, i)) << f.name;
            }
        }
    }
}

TEST(WeightFormat, BindingRefusesUnregisteredStorage) {
    EXPECT_EQ(*model::weight_type_of(format::DType::kBF16, 0), WeightType::kBF16);
    EXPECT_EQ(*model::weight_type_of(format::DType::kU32, 4), WeightType::kQ4);
    EXPECT_EQ(*model::weight_type_of(format::DType::kU32, 8), WeightType::kQ8);
    auto three = model::weight_type_of(format::DType::kU32, 3);
    ASSERT_FALSE(three.has_value());
    EXPECT_NE(three.status().message().find("3-bit"), std::string::npos) << three.status().message();
    EXPECT_FALSE(model::weight_type_of(format::DType::kU32, 0).has_value());  // words without codes
    EXPECT_FALSE(model::weight_type_of(format::DType::kBF16, 4).has_value());
}

// A layout.json whose projection names no registered format, or whose sections cannot hold the
// rows they describe, is refused when the expert store opens — before any record is viewed.
TEST(WeightFormat, ExpertStoreRefusesProjectionsTheRegistryCannotBind) {
    testing::TempDir dir;
    convert::PackOptions o;
    o.src_dir = testing::test_data_dir() + "/goldens/qwen3_next_mlx_q4";
    o.out_dir = dir.file("packed");
    ASSERT_TRUE(convert::pack_model(o).has_value());
    auto layout = format::open_packed_dir(o.out_dir);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    experts::ExpertStoreOptions so;
    so.cache_bytes = 1 << 20;
    ASSERT_TRUE(experts::ExpertStore::open(o.out_dir, *layout, so).has_value());

    format::PackLayout bad_bits = *layout;
    bad_bits.expert_files[1].up.bits = 3;
    auto a = experts::ExpertStore::open(o.out_dir, bad_bits, so);
    ASSERT_FALSE(a.has_value());
    EXPECT_NE(a.status().message().find("up"), std::string::npos) << a.status().message();
    EXPECT_NE(a.status().message().find("3-bit"), std::string::npos) << a.status().message();

    format::PackLayout short_section = *layout;
    short_section.expert_files[0].down.weight.size /= 2;
    auto b = experts::ExpertStore::open(o.out_dir, short_section, so);
    ASSERT_FALSE(b.has_value());
    EXPECT_NE(b.status().message().find("does not hold its rows"), std::string::npos) << b.status().message();

    format::PackLayout bad_group = *layout;
    bad_group.expert_files[0].gate.group_size = 48;
    EXPECT_FALSE(experts::ExpertStore::open(o.out_dir, bad_group, so).has_value());
}

}  // namespace
}  // namespace sluice
