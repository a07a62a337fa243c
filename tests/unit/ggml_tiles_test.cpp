// Row tiles (kernels/ggml_tiles.h): Q4_0 with 16 rows interleaved, the CPU's decode layout.
//
// - The layout: tiling (copying and in place) is a permutation that ggml_untile_row undoes row by row, and
//   the tiled format's element definition is Q4_0's on the natural row.
// - The int8 products (kernels.h, Activations::kInt8) have one arithmetic on every ISA (ggml_int8_isa.h):
//   the AVX-2 and AVX-512 VNNI loops give the portable twin's bits, for matvec, matvec_batch,
//   matvec_jobs and matmul (blocked or not), with and without a pool; and all of it lies within the fast
//   bound of the definition, 2e-6 · S8 (gguf_test.cpp says why), of the same rows untiled.
// - With f32 activations a tiled view gives its natural view's bits (its rows are read back untiled).
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

std::vector<uint8_t> random_q4_0(int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> out;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = testing::random_ggml_row(GgmlType::kQ4_0, cols, rng);
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

// S8 of the int8 fast bound for Q4_0 row `row`: Σ_b |d_w| · d_x · Σ|code · q|.
double s8_q4_0(const uint8_t* row, const float* x, int64_t cols) {
    double s = 0.0;
    for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
        const double dx = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        uint16_t h;
        std::memcpy(&h, row + b * 18, 2);
        const double dw = std::fabs(kernels::f16_to_f32(h));
        for (int64_t i = 0; i < 32; ++i) {
            const uint8_t c = row[b * 18 + 2 + i % 16];
            const int code = (i < 16 ? c & 0x0F : c >> 4) - 8;
            const double q = std::nearbyint(static_cast<float>(x[b * 32 + i] * static_cast<float>(id)));
            s += dw * dx * std::abs(code) * std::fabs(q);
        }
    }
    return s;
}

TEST(GgmlTiles, TilingIsAPermutationUndoneRowByRow) {
    std::mt19937 rng(19);
    for (int64_t cols : {32, 96, 768, 2048}) {
        SCOPED_TRACE("cols " + std::to_string(cols));
        const int64_t rows = 48;
        const auto natural = random_q4_0(rows, cols, rng);
        const WeightView nv =
            view(WeightType::kGgmlQ4_0, rows, cols, natural.data(), kernels::Activations::kF32);
        EXPECT_EQ(kernels::tiled_type(nv), WeightType::kGgmlQ4_0x16);
        std::vector<uint8_t> tiled(natural.size()), in_place = natural;
        kernels::ggml_tile_rows(WeightType::kGgmlQ4_0, natural.data(), rows, cols, tiled.data());
        std::vector<uint8_t> scratch(kernels::ggml_tile_scratch_bytes(WeightType::kGgmlQ4_0, cols));
        kernels::ggml_tile_in_place(WeightType::kGgmlQ4_0, in_place.data(), rows, cols, scratch.data());
        ASSERT_EQ(in_place, tiled);
        ASSERT_NE(tiled, natural);
        const WeightView tv =
            view(WeightType::kGgmlQ4_0x16, rows, cols, tiled.data(), kernels::Activations::kF32);
        EXPECT_EQ(tv.row_bytes(), nv.row_bytes());
        std::vector<uint8_t> row(nv.row_bytes());
        std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
        const kernels::WeightFormat& tf = kernels::weight_format(WeightType::kGgmlQ4_0x16);
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
    // Only Q4_0 whose rows fill whole tiles has the tiled form.
    std::vector<uint8_t> none;
    EXPECT_EQ(
        kernels::tiled_type(view(WeightType::kGgmlQ4_0, 40, 64, none.data(), kernels::Activations::kF32)),
        WeightType::kGgmlQ4_0);
    EXPECT_EQ(
        kernels::tiled_type(view(WeightType::kGgmlQ8_0, 32, 64, none.data(), kernels::Activations::kF32)),
        WeightType::kGgmlQ8_0);
    EXPECT_EQ(kernels::ggml_weight_format(static_cast<uint32_t>(GgmlType::kQ4_0))->type,
              WeightType::kGgmlQ4_0);
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
    double worst = 0.0;
    for (int64_t cols : {32, 96, 768, 2048}) {
        const int64_t rows = 64, n = 11, many = 70;  // many: matmul's blocked rows, 9 passes of vectors
        SCOPED_TRACE("cols " + std::to_string(cols));
        const auto natural = random_q4_0(rows, cols, rng);
        std::vector<uint8_t> tiled(natural.size());
        kernels::ggml_tile_rows(WeightType::kGgmlQ4_0, natural.data(), rows, cols, tiled.data());
        const WeightView nv =
            view(WeightType::kGgmlQ4_0, rows, cols, natural.data(), kernels::Activations::kInt8);
        const WeightView tv =
            view(WeightType::kGgmlQ4_0x16, rows, cols, tiled.data(), kernels::Activations::kInt8);
        ASSERT_TRUE(tv.int8_activations());
        std::vector<float> x(static_cast<size_t>(many * cols));
        for (auto& v : x) v = normal(rng);
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
                // A natural Q4_0 job on the same x shares its preparation.
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
            }
        });
        for (int64_t t = 0; t < many; ++t)
            for (int64_t r = 0; r < rows; ++r) {
                const double s8 = s8_q4_0(natural.data() + r * nv.row_bytes(), x.data() + t * cols, cols);
                const size_t at = static_cast<size_t>(t * rows + r);
                const double err = std::fabs(static_cast<double>(twin[at]) - def[at]);
                ASSERT_LE(err, 2e-6 * s8) << "row " << r << " vector " << t;
                worst = std::max(worst, err / s8);
            }
    }
    std::cout << "[ tiles ] Q4_0x16 int8: worst |twin - definition| / S8 = " << worst << " (bound 2e-6)\n";
}

// f32 activations: a tiled view reads its rows back untiled, so every op gives the natural view's bits.
TEST(GgmlTiles, F32ProductsAreTheNaturalLayoutsBits) {
    std::mt19937 rng(20);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool two{2};
    const int64_t rows = 32, cols = 256, n = 5;
    const auto natural = random_q4_0(rows, cols, rng);
    std::vector<uint8_t> tiled(natural.size());
    kernels::ggml_tile_rows(WeightType::kGgmlQ4_0, natural.data(), rows, cols, tiled.data());
    const WeightView nv = view(WeightType::kGgmlQ4_0, rows, cols, natural.data(), kernels::Activations::kF32);
    const WeightView tv =
        view(WeightType::kGgmlQ4_0x16, rows, cols, tiled.data(), kernels::Activations::kF32);
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

}  // namespace
}  // namespace sluice
