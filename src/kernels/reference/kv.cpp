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

void attention_kv(KvType type, const float* q, const void* k, const void* v, int64_t n_q, int64_t start_pos,
                  int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
                  ThreadPool* pool) {
    // The oracle may decode the whole cache: attention over what kv_load reads.
    const int64_t rows = start_pos + n_q;
    std::vector<float> kf(static_cast<size_t>(rows * n_kv_heads * head_dim));
    std::vector<float> vf(kf.size());
    reference::kv_load(type, k, rows, n_kv_heads, head_dim, kf.data());
    reference::kv_load(type, v, rows, n_kv_heads, head_dim, vf.data());
    reference::attention(q, kf.data(), vf.data(), n_q, start_pos, n_heads, n_kv_heads, head_dim, scale, out,
                         pool);
}

}  // namespace sluice::kernels::reference
