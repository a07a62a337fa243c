// Row tiles (kernels/ggml_tiles.h): Q4_0, Q6_K, Q8_0 and MXFP4 with 16 rows interleaved, the CPU's decode
// layouts.
//
// - The layout: tiling (copying and in place) is a bijection that ggml_untile_row undoes row by row, and
//   the tiled format's element definition is its natural type's on the natural row.
// - The int8 products (kernels.h, Activations::kInt8) have one arithmetic on every ISA (ggml_int8_isa.h):
//   the AVX-2 and AVX-512 VNNI loops give the portable twin's bits, for matvec, matvec_batch,
//   matvec_jobs and matmul (blocked or not), with and without a pool; and all of it lies within the fast
//   bound of the definition, 2e-6 · S8 (gguf_test.cpp says why), of the same rows untiled, and so does the
//   natural layout's own kernel on the same rows (so the two lie within twice that of each other).
// - MXFP4's e8m0 scales over their whole range (subnormal 2^(e − 128) for e < 2 included) give the twin's
//   bits on every ISA.
// - With f32 activations a tiled view gives its natural view's bits (its rows are read back untiled).
// - Weights whose rows do not fill whole tiles keep their natural layout.
#include "kernels/ggml_tiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf_bytes.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"
#include "kernels/weight_format.h"

namespace sluice {
namespace {

using kernels::GgmlType;
using kernels::WeightType;
using kernels::WeightView;

// The natural types with a tiled form, and the row lengths each is tested at.
struct TiledCase {
    WeightType natural, tiled;
    GgmlType ggml;
    std::vector<int64_t> cols;
};
const std::vector<TiledCase>& tiled_cases() {
    static const std::vector<TiledCase> cases = {
        {WeightType::kGgmlQ4_0, WeightType::kGgmlQ4_0x16, GgmlType::kQ4_0, {32, 96, 768, 2048}},
        {WeightType::kGgmlQ6_K, WeightType::kGgmlQ6_Kx16, GgmlType::kQ6_K, {256, 768, 2048}},
        {WeightType::kGgmlQ8_0, WeightType::kGgmlQ8_0x16, GgmlType::kQ8_0, {32, 96, 768, 2048}},
        {WeightType::kGgmlMXFP4, WeightType::kGgmlMXFP4x16, GgmlType::kMXFP4, {32, 96, 768, 2880}},
    };
    return cases;
}

std::vector<uint8_t> random_rows(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> out;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = testing::random_ggml_row(type, cols, rng);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

WeightView view(WeightType type, int64_t rows, int64_t cols, const void* data, kernels::Activations a) {
    WeightView w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.activations = a;
    return w;
}

// S8 of the int8 fast bound (gguf_test.cpp) for one row: Σ_s |scale_s| · d_x · Σ|code · q| over its
// sub-blocks (the tiled types have no bias).
double s8_of(GgmlType type, const uint8_t* row, const float* x, int64_t cols) {
    const kernels::GgmlFormat& f = kernels::ggml_format(type);
    const int sub = kernels::ggml_int8_sub_elems(type);
    int8_t codes[256];
    float scales[16], biases[16];
    double s = 0.0;
    for (int64_t b = 0; b < cols / f.block_elems; ++b) {
        kernels::reference::ggml_block_codes(type, row + b * f.block_bytes, codes, scales, biases);
        for (int e = 0; e < f.block_elems; ++e) {
            const int64_t at = b * f.block_elems + e, xb = at / 32;
            float amax = 0.0f;
            for (int64_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[xb * 32 + i]));
            const double dx = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
            const double q = std::nearbyint(static_cast<float>(x[at] * static_cast<float>(id)));
            s += std::fabs(scales[e / sub]) * dx * std::abs(codes[e]) * std::fabs(q);
        }
    }
    return s;
}

TEST(GgmlTiles, TilingIsABijectionUndoneRowByRow) {
    std::mt19937 rng(19);
    for (const TiledCase& c : tiled_cases())
        for (int64_t cols : c.cols) {
            SCOPED_TRACE(std::string(kernels::weight_type_name(c.tiled)) + " cols " + std::to_string(cols));
            const int64_t rows = 48;
            const auto natural = random_rows(c.ggml, rows, cols, rng);
            const WeightView nv = view(c.natural, rows, cols, natural.data(), kernels::Activations::kF32);
            EXPECT_EQ(kernels::tiled_type(nv), c.tiled);
            EXPECT_EQ(kernels::untiled_type(c.tiled), c.natural);
            std::vector<uint8_t> tiled(natural.size()), in_place = natural;
            kernels::ggml_tile_rows(c.natural, natural.data(), rows, cols, tiled.data());
            std::vector<uint8_t> scratch(kernels::ggml_tile_scratch_bytes(c.natural, cols));
            kernels::ggml_tile_in_place(c.natural, in_place.data(), rows, cols, scratch.data());
            ASSERT_EQ(in_place, tiled);
            ASSERT_NE(tiled, natural);
            const WeightView tv = view(c.tiled, rows, cols, tiled.data(), kernels::Activations::kF32);
            EXPECT_EQ(tv.row_bytes(), nv.row_bytes());
            std::vector<uint8_t> row(nv.row_bytes());
            std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
            const kernels::WeightFormat& tf = kernels::weight_format(c.tiled);
            for (int64_t r = 0; r < rows; ++r) {
                kernels::ggml_untile_row(tv, r, row.data());
                ASSERT_EQ(0, std::memcmp(row.data(), natural.data() + r * nv.row_bytes(), row.size()))
                    << "row " << r;
                kernels::reference::dequantize_row(nv, r, a.data());
                kernels::reference::dequantize_row(tv, r, b.data());
                ASSERT_EQ(a, b) << "row " << r;
                kernels::dequantize_row(tv, r, b.data());
                ASSERT_EQ(a, b) << "row " << r;
                for (int64_t i = 0; i < cols; i += 7) ASSERT_EQ(tf.reference_element(tv, r, i), a[i]);
            }
        }
}

// Only the tiled types' natural forms whose rows fill whole tiles take the tiled form; others keep
// their natural layout (and their own kernels: gguf_test.cpp).
TEST(GgmlTiles, OnlyWholeTilesOfTiledTypesAreTiled) {
    std::vector<uint8_t> none;
    for (const TiledCase& c : tiled_cases()) {
        for (int64_t rows : {1, 8, 15, 17, 40, 151937})
            EXPECT_EQ(
                kernels::tiled_type(view(c.natural, rows, 256, none.data(), kernels::Activations::kF32)),
                c.natural)
                << rows << " rows";
        EXPECT_EQ(kernels::tiled_type(view(c.natural, 151936, 256, none.data(), kernels::Activations::kF32)),
                  c.tiled);
        EXPECT_EQ(kernels::ggml_weight_format(static_cast<uint32_t>(c.ggml))->type, c.natural);
    }
    for (WeightType t : {WeightType::kGgmlQ4_1, WeightType::kGgmlQ4_K, WeightType::kGgmlQ5_K,
                         WeightType::kGgmlIQ4_XS, WeightType::kQ4, WeightType::kBF16})
        EXPECT_EQ(kernels::tiled_type(view(t, 32, 256, none.data(), kernels::Activations::kF32)), t);
}

template <typename Body>
void for_each_isa(Body body) {
    for (const std::string& isa : kernels::testing::supported_isas()) {
        SCOPED_TRACE("isa=" + isa);
        ASSERT_TRUE(kernels::testing::force_isa(isa));
        body(isa);
    }
    kernels::testing::force_isa("");
}

// Every int8 op over a tiled view, on every ISA with and without a pool: the portable twin's bits
// everywhere, matvec_batch / matvec_jobs / matmul equal to matvec, all within the definition's bound.
TEST(GgmlTiles, Int8ProductsAreTheTwinsBitsOnEveryIsa) {
    std::mt19937 rng(1919);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool two{2};
    for (const TiledCase& c : tiled_cases()) {
        double worst = 0.0;
        for (int64_t cols : c.cols) {
            const int64_t rows = 64, n = 11, many = 70;  // many: matmul's blocked rows, 9 passes of vectors
            SCOPED_TRACE(std::string(kernels::weight_type_name(c.tiled)) + " cols " + std::to_string(cols));
            const auto natural = random_rows(c.ggml, rows, cols, rng);
            std::vector<uint8_t> tiled(natural.size());
            kernels::ggml_tile_rows(c.natural, natural.data(), rows, cols, tiled.data());
            const WeightView nv = view(c.natural, rows, cols, natural.data(), kernels::Activations::kInt8);
            const WeightView tv = view(c.tiled, rows, cols, tiled.data(), kernels::Activations::kInt8);
            ASSERT_TRUE(tv.int8_activations());
            std::vector<float> x(static_cast<size_t>(many * cols));
            for (auto& v : x) v = normal(rng);
            for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(3 * cols + i)] = 0.0f;  // a zero vector
            std::vector<float> def(static_cast<size_t>(many * rows));
            kernels::reference::matmul(nv, x.data(), many, def.data(), nullptr);
            std::vector<float> tdef(static_cast<size_t>(many * rows));
            kernels::reference::matmul(tv, x.data(), many, tdef.data(), nullptr);
            ASSERT_EQ(tdef, def) << "the reference reads tiles as their rows";
            std::vector<float> twin;  // the portable ISA's matvec of every vector
            for_each_isa([&](const std::string& isa) {
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                    std::vector<float> one(static_cast<size_t>(many * rows)),
                        batch(static_cast<size_t>(n * rows)), jobs_y(static_cast<size_t>(n * rows)),
                        nat_y(static_cast<size_t>(n * rows)), mm(static_cast<size_t>(many * rows)),
                        mm_small(static_cast<size_t>(n * rows));
                    for (int64_t t = 0; t < many; ++t)
                        kernels::matvec(tv, x.data() + t * cols, one.data() + t * rows, pool);
                    kernels::matvec_batch(tv, x.data(), n, batch.data(), pool);
                    // A natural job of the same type on the same x shares its preparation.
                    const kernels::MatvecJob jobs[2] = {{&nv, x.data(), n, nat_y.data()},
                                                        {&tv, x.data(), n, jobs_y.data()}};
                    kernels::matvec_jobs(jobs, 2, pool);
                    kernels::matmul(tv, x.data(), many, mm.data(), pool);
                    kernels::matmul(tv, x.data(), n, mm_small.data(), pool);
                    if (isa == "portable" && pool == nullptr) twin = one;
                    ASSERT_EQ(one, twin) << "matvec differs from the portable twin";
                    ASSERT_EQ(mm, one) << "matmul of " << many;
                    for (int64_t i = 0; i < n * rows; ++i) {
                        ASSERT_EQ(batch[i], one[i]) << "matvec_batch at " << i;
                        ASSERT_EQ(jobs_y[i], one[i]) << "matvec_jobs at " << i;
                        ASSERT_EQ(mm_small[i], one[i]) << "matmul of " << n << " at " << i;
                    }
                    std::vector<float> nat_one(static_cast<size_t>(rows));
                    kernels::matvec(nv, x.data(), nat_one.data(), pool);
                    ASSERT_EQ(std::vector<float>(nat_y.begin(), nat_y.begin() + rows), nat_one);
                    // The natural layout's kernel on this ISA, within the same bound of the definition.
                    for (int64_t r = 0; r < rows; ++r) {
                        const double s8 = s8_of(c.ggml, natural.data() + r * nv.row_bytes(), x.data(), cols);
                        ASSERT_LE(std::fabs(static_cast<double>(nat_one[r]) - def[r]), 2e-6 * s8)
                            << "natural row " << r;
                    }
                }
            });
            for (int64_t t = 0; t < many; ++t)
                for (int64_t r = 0; r < rows; ++r) {
                    const double s8 =
                        s8_of(c.ggml, natural.data() + r * nv.row_bytes(), x.data() + t * cols, cols);
                    const size_t at = static_cast<size_t>(t * rows + r);
                    const double err = std::fabs(static_cast<double>(twin[at]) - def[at]);
                    ASSERT_LE(err, 2e-6 * s8) << "row " << r << " vector " << t;
                    if (s8 > 0.0) worst = std::max(worst, err / s8);
                }
        }
        std::cout << "[ tiles ] " << kernels::weight_type_name(c.tiled)
                  << " int8: worst |twin - definition| / S8 = " << worst << " (bound 2e-6)\n";
    }
}

// MXFP4's scales over the e8m0 range: every ISA's tile kernel converts e to 2^(e − 128) (subnormal for e < 2)
// as the twin's e8m0_to_f32_half does, so their bits agree wherever the products stay finite. Rows 0 and 1
// hold only e = 0 and e = 1 (the subnormal scales): their results are the definition's, not zero.
TEST(GgmlTiles, Mxfp4ScalesOverTheWholeRangeAreTheTwinsBits) {
    std::mt19937 rng(2880);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t rows = 32, cols = 256, n = 3, blocks = cols / 32;
    auto natural = random_rows(GgmlType::kMXFP4, rows, cols, rng);
    const uint8_t scales[] = {0, 1, 2, 3, 17, 100, 126, 127, 128, 129, 150, 180, 200};
    for (int64_t b = 0; b < rows * blocks; ++b)
        natural[static_cast<size_t>(17 * b)] =
            b < 2 * blocks ? static_cast<uint8_t>(b / blocks) : scales[(b * 5 + b / 7) % sizeof scales];
    std::vector<uint8_t> tiled(natural.size());
    kernels::ggml_tile_rows(WeightType::kGgmlMXFP4, natural.data(), rows, cols, tiled.data());
    const WeightView tv =
        view(WeightType::kGgmlMXFP4x16, rows, cols, tiled.data(), kernels::Activations::kInt8);
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (auto& v : x) v = normal(rng);
    std::vector<float> twin;
    for_each_isa([&](const std::string& isa) {
        std::vector<float> y(static_cast<size_t>(n * rows));
        kernels::matvec_batch(tv, x.data(), n, y.data(), nullptr);
        for (float v : y) ASSERT_TRUE(std::isfinite(v));
        if (isa == "portable") twin = y;
        ASSERT_EQ(y, twin);
    });
    std::vector<float> def(static_cast<size_t>(n * rows));
    kernels::reference::matmul(tv, x.data(), n, def.data(), nullptr);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < 2; ++r) {
            const float got = twin[static_cast<size_t>(t * rows + r)],
                        want = def[static_cast<size_t>(t * rows + r)];
            const double s8 =
                s8_of(GgmlType::kMXFP4, natural.data() + r * tv.row_bytes(), x.data() + t * cols, cols);
            ASSERT_GT(s8, 0.0);
            ASSERT_NE(got, 0.0f);
            // scale · d_x is subnormal in f32 (the definition's is in double): each block's product off by
            // up to 2^-150 / (2^-128 · d_x) of itself, ~2e-5 at this x's d_x ≈ 0.02.
            EXPECT_NEAR(got, want, 1e-4 * s8) << "row " << r << " vector " << t;
        }
}

// f32 activations: a tiled view reads its rows back untiled, so every op gives the natural view's bits.
TEST(GgmlTiles, F32ProductsAreTheNaturalLayoutsBits) {
    std::mt19937 rng(20);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool two{2};
    for (const TiledCase& c : tiled_cases()) {
        SCOPED_TRACE(kernels::weight_type_name(c.tiled));
        const int64_t rows = 32, cols = 256, n = 5;
        const auto natural = random_rows(c.ggml, rows, cols, rng);
        std::vector<uint8_t> tiled(natural.size());
        kernels::ggml_tile_rows(c.natural, natural.data(), rows, cols, tiled.data());
        const WeightView nv = view(c.natural, rows, cols, natural.data(), kernels::Activations::kF32);
        const WeightView tv = view(c.tiled, rows, cols, tiled.data(), kernels::Activations::kF32);
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (auto& v : x) v = normal(rng);
        for_each_isa([&](const std::string&) {
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                std::vector<float> a(static_cast<size_t>(n * rows)), b(static_cast<size_t>(n * rows));
                kernels::matvec_batch(nv, x.data(), n, a.data(), pool);
                kernels::matvec_batch(tv, x.data(), n, b.data(), pool);
                ASSERT_EQ(a, b) << "matvec_batch";
                kernels::matmul(nv, x.data(), n, a.data(), pool);
                kernels::matmul(tv, x.data(), n, b.data(), pool);
                ASSERT_EQ(a, b) << "matmul";
            }
        });
    }
}

}  // namespace
}  // namespace sluice
