// Multi-head latent attention's GPU ops (kernels/cuda/latent_attention.h) against the CPU forward's
// arithmetic: the absorbed queries and the value products over kv_b in each weight format, the pair
// de-interleave, and attention over an f32 / f16 latent cache against kernels::reference::attention_kv
// with the one row as keys and values (model/latent_attention.cpp). The tiny goldens' shapes and
// DeepSeek-V3's (latent 512 + rope 64). Skipped without a device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/latent_attention.h"
#include "kernels/kv_format.h"

namespace sluice::cuda {
namespace {

MlaShape shape(int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, int64_t latent) {
    return MlaShape{heads, nope, rope, v_dim, latent, nope + rope, latent + rope};
}

// kv_b [heads·(nope + v), latent] dequantized row by row, as the CPU forward reads it.
std::vector<float> rows_of(const kernels::WeightView& w) {
    std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
    for (int64_t r = 0; r < w.rows; ++r) kernels::reference::dequantize_row(w, r, out.data() + r * w.cols);
    return out;
}

TEST(CudaLatent, AbsorbAndValueProductsMatchTheHostInEveryFormat) {
    REQUIRE_GPU();
    for (const MlaShape& s : {shape(4, 32, 16, 24, 48), shape(16, 128, 64, 128, 512)}) {
        for (kernels::WeightType type :
             {kernels::WeightType::kF32, kernels::WeightType::kBF16, kernels::WeightType::kQ4}) {
            if (type == kernels::WeightType::kQ4 && s.latent % 64 != 0) continue;
            const int64_t unit = s.nope + s.v_dim;
            auto kv_b = make_weight(type, s.heads * unit, s.latent, 64, 7);
            const std::vector<float> w = rows_of(kv_b->view);
            for (int64_t n : {1, 5, 19}) {
                const std::string what = "heads " + std::to_string(s.heads) + " latent " +
                                         std::to_string(s.latent) + " type " +
                                         kernels::weight_type_name(type) + " n " + std::to_string(n);
                const std::vector<float> q = randn(static_cast<size_t>(n * s.heads * s.q_dim), 11);
                const std::vector<float> olat = randn(static_cast<size_t>(n * s.heads * s.latent), 12);
                std::vector<float> want_abs(static_cast<size_t>(n * s.heads * s.cache_dim), 0.0f);
                std::vector<float> want_v(static_cast<size_t>(n * s.heads * s.v_dim), 0.0f);
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t h = 0; h < s.heads; ++h) {
                        float* dst = want_abs.data() + (t * s.heads + h) * s.cache_dim;
                        for (int64_t j = 0; j < s.nope; ++j) {
                            const float qj = q[static_cast<size_t>((t * s.heads + h) * s.q_dim + j)];
                            for (int64_t c = 0; c < s.latent; ++c)
                                dst[c] += qj * w[static_cast<size_t>((h * unit + j) * s.latent + c)];
                        }
                        for (int64_t r = 0; r < s.v_dim; ++r) {
                            double acc = 0;
                            for (int64_t c = 0; c < s.latent; ++c)
                                acc += static_cast<double>(
                                           w[static_cast<size_t>((h * unit + s.nope + r) * s.latent + c)]) *
                                       olat[static_cast<size_t>((t * s.heads + h) * s.latent + c)];
                            want_v[static_cast<size_t>((t * s.heads + h) * s.v_dim + r)] =
                                static_cast<float>(acc);
                        }
                    }
                Dev<float> dq(q), dabs(want_abs.size()), dolat(olat), dv(want_v.size());
                latent_absorb(dq.get(), s, kv_b->dev, false, n, dabs.get(), nullptr);
                latent_unabsorb(dolat.get(), s, kv_b->dev, false, n, dv.get(), nullptr);
                EXPECT_LT(rel_err(dabs.host(), want_abs), 1e-5) << what;
                EXPECT_LT(rel_err(dv.host(), want_v), 1e-5) << what;
            }
        }
    }
}

// mlx-lm's split of kv_b: embed_q [heads·latent, nope] (W_UKᵀ per head) and unembed_out [heads·v, latent].
TEST(CudaLatent, AbsorbAndValueProductsFromMlxSplitWeights) {
    REQUIRE_GPU();
    const MlaShape s = shape(8, 128, 64, 128, 512);
    for (kernels::WeightType type : {kernels::WeightType::kBF16, kernels::WeightType::kQ4}) {
        auto embed_q = make_weight(type, s.heads * s.latent, s.nope, 64, 5);
        auto unembed_out = make_weight(type, s.heads * s.v_dim, s.latent, 64, 6);
        const std::vector<float> wq = rows_of(embed_q->view), wv = rows_of(unembed_out->view);
        for (int64_t n : {1, 9}) {
            const std::vector<float> q = randn(static_cast<size_t>(n * s.heads * s.q_dim), 13);
            const std::vector<float> olat = randn(static_cast<size_t>(n * s.heads * s.latent), 14);
            std::vector<float> want_abs(static_cast<size_t>(n * s.heads * s.cache_dim), 0.0f);
            std::vector<float> want_v(static_cast<size_t>(n * s.heads * s.v_dim), 0.0f);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t h = 0; h < s.heads; ++h) {
                    for (int64_t c = 0; c < s.latent; ++c) {
                        double acc = 0;
                        for (int64_t j = 0; j < s.nope; ++j)
                            acc += static_cast<double>(
                                       wq[static_cast<size_t>((h * s.latent + c) * s.nope + j)]) *
                                   q[static_cast<size_t>((t * s.heads + h) * s.q_dim + j)];
                        want_abs[static_cast<size_t>((t * s.heads + h) * s.cache_dim + c)] =
                            static_cast<float>(acc);
                    }
                    for (int64_t r = 0; r < s.v_dim; ++r) {
                        double acc = 0;
                        for (int64_t c = 0; c < s.latent; ++c)
                            acc += static_cast<double>(
                                       wv[static_cast<size_t>((h * s.v_dim + r) * s.latent + c)]) *
                                   olat[static_cast<size_t>((t * s.heads + h) * s.latent + c)];
                        want_v[static_cast<size_t>((t * s.heads + h) * s.v_dim + r)] =
                            static_cast<float>(acc);
                    }
                }
            Dev<float> dq(q), dabs(want_abs.size()), dolat(olat), dv(want_v.size());
            latent_absorb(dq.get(), s, embed_q->dev, true, n, dabs.get(), nullptr);
            latent_unabsorb(dolat.get(), s, unembed_out->dev, true, n, dv.get(), nullptr);
            const std::string what = std::string(kernels::weight_type_name(type)) + " n " + std::to_string(n);
            EXPECT_LT(rel_err(dabs.host(), want_abs), 1e-5) << what;
            EXPECT_LT(rel_err(dv.host(), want_v), 1e-5) << what;
        }
    }
}

TEST(CudaLatent, DeinterleaveMatchesTheHost) {
    REQUIRE_GPU();
    const int64_t rows = 9, stride = 80, offset = 48, dim = 16;
    std::vector<float> x = randn(static_cast<size_t>(rows * stride), 3);
    std::vector<float> want = x;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim / 2; ++i) {
            want[static_cast<size_t>(r * stride + offset + i)] =
                x[static_cast<size_t>(r * stride + offset + 2 * i)];
            want[static_cast<size_t>(r * stride + offset + dim / 2 + i)] =
                x[static_cast<size_t>(r * stride + offset + 2 * i + 1)];
        }
    Dev<float> dx(x);
    deinterleave_pairs(dx.get() + offset, rows, stride, dim, nullptr);
    EXPECT_EQ(dx.host(), want);
}

TEST(CudaLatent, AttentionOverTheLatentCacheMatchesTheReference) {
    REQUIRE_GPU();
    for (const MlaShape& s : {shape(4, 32, 16, 24, 48), shape(6, 128, 64, 128, 512)}) {
        for (kernels::KvType type : {kernels::KvType::kF32, kernels::KvType::kF16}) {
            for (const auto& [pos0, n] :
                 {std::pair<int64_t, int64_t>{0, 1}, {0, 23}, {130, 1}, {57, 6}, {1300, 1}}) {
                const std::string what = "latent " + std::to_string(s.latent) + " " +
                                         kernels::kv_type_name(type) + " pos0 " + std::to_string(pos0) +
                                         " n " + std::to_string(n);
                const int64_t keys = pos0 + n, cd = s.cache_dim;
                const std::vector<float> rows = randn(static_cast<size_t>(keys * cd), 21, 0.7f);
                const std::vector<float> q = randn(static_cast<size_t>(n * s.heads * cd), 22, 0.2f);
                std::vector<uint8_t> cache(static_cast<size_t>(keys * kernels::kv_head_bytes(type, cd)));
                kernels::reference::kv_store(type, rows.data(), keys, 1, cd, cache.data());
                const float scale = 0.05f;
                std::vector<float> full(static_cast<size_t>(n * s.heads * cd));
                kernels::reference::attention_kv(type, q.data(), cache.data(), cache.data(), nullptr, n, pos0,
                                                 s.heads, 1, cd, scale, full.data(), nullptr);
                std::vector<float> want(static_cast<size_t>(n * s.heads * s.latent));
                for (int64_t r = 0; r < n * s.heads; ++r)
                    for (int64_t d = 0; d < s.latent; ++d)
                        want[static_cast<size_t>(r * s.latent + d)] = full[static_cast<size_t>(r * cd + d)];
                Dev<uint8_t> dc(cache);
                Dev<float> dq(q), dout(want.size());
                Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
                latent_attention(dq.get(), dc.get(), type, s, n, 0, dpos.get(), scale, dout.get(), nullptr);
                EXPECT_LT(rel_err(dout.host(), want), 2e-5) << what;
                if (n == 1) {  // decode: the keys split over blocks (a capacity of several chunks)
                    for (int64_t capacity : {keys, keys + 700, int64_t{40000}}) {
                        Dev<float> scratch(static_cast<size_t>(latent_split_scratch_floats(s, capacity)));
                        Dev<float> dsplit(want.size());
                        latent_attention(dq.get(), dc.get(), type, s, n, 0, dpos.get(), scale, dsplit.get(),
                                         nullptr, scratch.get(), capacity);
                        EXPECT_LT(rel_err(dsplit.host(), want), 2e-5)
                            << what << " split, capacity " << capacity;
                    }
                }
            }
        }
    }
}

TEST(CudaLatent, ShapesBeyondTheKernelsAreNamed) {
    EXPECT_EQ(latent_attention_shape_error(shape(128, 128, 64, 128, 512)), nullptr);  // DeepSeek-V3
    EXPECT_NE(latent_attention_shape_error(shape(8, 64, 64, 64, 1024)), nullptr);
}

}  // namespace
}  // namespace sluice::cuda
