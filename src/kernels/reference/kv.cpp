// Scalar reference of the KV cache types (kv_format.h): the definitions of storing a row, reading
// it back, and attention over a stored cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels::reference {

namespace {

constexpr float kMaxHalf = 65504.0f;

uint16_t scale_f16(float d) {
    return f32_to_f16(std::min(d, kMaxHalf));  // a scale past f16's range saturates the codes instead
}

// In place: x ← H·x (Sylvester order, unnormalised), the butterflies of the fast Walsh–Hadamard
// transform in a fixed order (every kernel adds in this order, so rotations agree bit for bit).
void hadamard(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

// The q3 code of y/σ: the nearest Lloyd–Max level (ties to the upper one).
int q3_code(float t) {
    int c = 0;
    for (int i = 0; i < 7; ++i)
        if (t >= 0.5f * (kKvQ3Levels[i] + kKvQ3Levels[i + 1])) c = i + 1;
    return c;
}

void store_q3(const float* x, int64_t hd, uint8_t* dst) {
    std::vector<float> y(static_cast<size_t>(hd));
    for (int64_t i = 0; i < hd; ++i) y[i] = x[i] * kv_rotation_sign(i);
    hadamard(y.data(), hd);
    const float norm = 1.0f / std::sqrt(static_cast<float>(hd));
    double sum_sq = 0.0;
    for (int64_t i = 0; i < hd; ++i) {
        y[i] *= norm;
        sum_sq += static_cast<double>(y[i]) * y[i];
    }
    const float sigma = static_cast<float>(std::sqrt(sum_sq / static_cast<double>(hd)));
    const float inv_sigma = sigma > 0.0f ? 1.0f / sigma : 0.0f;
    double yl = 0.0, ll = 0.0;
    std::memset(dst, 0, static_cast<size_t>(hd * 3 / 8));
    for (int64_t i = 0; i < hd; ++i) {
        const int c = q3_code(y[i] * inv_sigma);
        yl += static_cast<double>(y[i]) * kKvQ3Levels[c];
        ll += static_cast<double>(kKvQ3Levels[c]) * kKvQ3Levels[c];
        const int64_t bit = 3 * i;  // within its group of 8 codes in 3 bytes: 24·(i/8) + 3·(i%8)
        dst[bit / 8] = static_cast<uint8_t>(dst[bit / 8] | (c << (bit % 8)));
        if (bit % 8 > 5) dst[bit / 8 + 1] = static_cast<uint8_t>(dst[bit / 8 + 1] | (c >> (8 - bit % 8)));
    }
    const float s = sigma > 0.0f ? static_cast<float>(yl / ll) : 0.0f;
    const uint16_t h = scale_f16(s);
    std::memcpy(dst + hd * 3 / 8, &h, 2);
}

void load_q3(const uint8_t* src, int64_t hd, float* x) {
    uint16_t h;
    std::memcpy(&h, src + hd * 3 / 8, 2);
    const float s = f16_to_f32(h);
    for (int64_t i = 0; i < hd; ++i) {
        const int64_t bit = 3 * i;
        const int word = src[bit / 8] | (bit % 8 > 5 ? src[bit / 8 + 1] << 8 : 0);
        x[i] = s * kKvQ3Levels[(word >> (bit % 8)) & 7];  // ŷ, the rotated head
    }
    hadamard(x, hd);
    const float norm = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t i = 0; i < hd; ++i) x[i] = x[i] * norm * kv_rotation_sign(i);
}

void store_head(KvType type, const float* x, int64_t hd, uint8_t* dst) {
    switch (type) {
        case KvType::kF32: std::memcpy(dst, x, sizeof(float) * static_cast<size_t>(hd)); return;
        case KvType::kF16:
            for (int64_t i = 0; i < hd; ++i) {
                const uint16_t h = f32_to_f16(x[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case KvType::kQ8: {
            uint8_t* scales = dst + hd;
            for (int64_t g = 0; g < hd / kKvGroup; ++g) {
                const float* xg = x + g * kKvGroup;
                float amax = 0.0f;
                for (int64_t j = 0; j < kKvGroup; ++j) amax = std::max(amax, std::fabs(xg[j]));
                const float d = amax / 127.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                for (int64_t j = 0; j < kKvGroup; ++j) {
                    const float c = std::clamp(std::nearbyint(xg[j] * id), -127.0f, 127.0f);
                    dst[g * kKvGroup + j] = static_cast<uint8_t>(static_cast<int8_t>(c));
                }
                const uint16_t h = scale_f16(d);
                std::memcpy(scales + 2 * g, &h, 2);
            }
            return;
        }
        case KvType::kQ4: {
            uint8_t* scales = dst + hd / 2;
            for (int64_t g = 0; g < hd / kKvGroup; ++g) {
                const float* xg = x + g * kKvGroup;
                float m = 0.0f;  // the element of largest magnitude (the first of equals)
                for (int64_t j = 0; j < kKvGroup; ++j)
                    if (std::fabs(xg[j]) > std::fabs(m)) m = xg[j];
                const float d = m / -8.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                auto code = [&](int64_t j) {
                    return static_cast<uint8_t>(std::clamp(std::nearbyint(xg[j] * id) + 8.0f, 0.0f, 15.0f));
                };
                for (int64_t j = 0; j < kKvGroup / 2; ++j)
                    dst[g * kKvGroup / 2 + j] = static_cast<uint8_t>(code(j) | (code(j + kKvGroup / 2) << 4));
                const uint16_t h = f32_to_f16(std::clamp(d, -kMaxHalf, kMaxHalf));
                std::memcpy(scales + 2 * g, &h, 2);
            }
            return;
        }
        case KvType::kQ3: store_q3(x, hd, dst); return;
    }
}

void load_head(KvType type, const uint8_t* src, int64_t hd, float* x) {
    auto half = [](const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return f16_to_f32(h);
    };
    switch (type) {
        case KvType::kF32: std::memcpy(x, src, sizeof(float) * static_cast<size_t>(hd)); return;
        case KvType::kF16:
            for (int64_t i = 0; i < hd; ++i) x[i] = half(src + 2 * i);
            return;
        case KvType::kQ8:
            for (int64_t i = 0; i < hd; ++i)
                x[i] = half(src + hd + 2 * (i / kKvGroup)) * static_cast<float>(static_cast<int8_t>(src[i]));
            return;
        case KvType::kQ4:
            for (int64_t i = 0; i < hd; ++i) {
                const int64_t g = i / kKvGroup, j = i % kKvGroup;
                const uint8_t byte = src[g * kKvGroup / 2 + j % (kKvGroup / 2)];
                const int c = j < kKvGroup / 2 ? (byte & 15) : (byte >> 4);
                x[i] = half(src + hd / 2 + 2 * g) * static_cast<float>(c - 8);
            }
            return;
        case KvType::kQ3: load_q3(src, hd, x); return;
    }
}

}  // namespace

void kv_store(KvType type, const float* x, int64_t n, int64_t n_kv_heads, int64_t head_dim, void* dst) {
    SLUICE_ASSERT(kv_shape_error(type, head_dim) == nullptr);
    const int64_t hb = kv_head_bytes(type, head_dim);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n * n_kv_heads; ++r) store_head(type, x + r * head_dim, head_dim, out + r * hb);
}

void kv_load(KvType type, const void* src, int64_t n, int64_t n_kv_heads, int64_t head_dim, float* x) {
    SLUICE_ASSERT(kv_shape_error(type, head_dim) == nullptr);
    const int64_t hb = kv_head_bytes(type, head_dim);
    const auto* in = static_cast<const uint8_t*>(src);
    for (int64_t r = 0; r < n * n_kv_heads; ++r) load_head(type, in + r * hb, head_dim, x + r * head_dim);
}

void attention_kv(KvType type, const float* q, const void* k, const void* v, const KvRing* ring, int64_t n_q,
                  int64_t start_pos, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                  float* out, ThreadPool* pool, const AttentionExtras& extras) {
    const int64_t rows = start_pos + n_q;
    std::vector<float> kf(static_cast<size_t>(rows * n_kv_heads * head_dim));
    std::vector<float> vf(kf.size());
    reference::kv_load(type, k, rows, n_kv_heads, head_dim, kf.data());
    reference::kv_load(type, v, rows, n_kv_heads, head_dim, vf.data());
    if (ring == nullptr || ring->window <= 0) {
        // The oracle may decode the whole cache: attention over what kv_load reads.
        reference::attention(q, kf.data(), vf.data(), n_q, start_pos, n_heads, n_kv_heads, head_dim, scale,
                             out, pool, extras);
        return;
    }
    // Each query row over the keys as it reads them: the ring's f16 rows inside its window. The
    // ring's window and extras.window are unrelated; the row's own attention applies the latter.
    const int64_t row = n_kv_heads * head_dim;
    const int64_t ring_row = n_kv_heads * kv_head_bytes(KvType::kF16, head_dim);
    std::vector<float> kt(kf.size()), vt(vf.size());
    for (int64_t t = 0; t < n_q; ++t) {
        const int64_t P = start_pos + t;
        kt = kf;
        vt = vf;
        for (int64_t s = std::max<int64_t>(0, P - ring->window + 1); s <= P; ++s) {
            const int64_t slot = s % ring->slots;
            if (ring->tags[slot] != s) continue;
            reference::kv_load(KvType::kF16, static_cast<const uint8_t*>(ring->k) + slot * ring_row, 1,
                               n_kv_heads, head_dim, kt.data() + s * row);
            reference::kv_load(KvType::kF16, static_cast<const uint8_t*>(ring->v) + slot * ring_row, 1,
                               n_kv_heads, head_dim, vt.data() + s * row);
        }
        reference::attention(q + t * n_heads * head_dim, kt.data(), vt.data(), 1, P, n_heads, n_kv_heads,
                             head_dim, scale, out + t * n_heads * head_dim, pool, extras);
    }
}

}  // namespace sluice::kernels::reference
