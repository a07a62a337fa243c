// Scalar conversions between f32 and the 16-bit float formats (the WeightView helpers are the
// format registry's, weight_format.cpp). These are shared by the reference and the fast path (there is only
// one definition of each). bf16 rounding is round-to-nearest-even with NaN kept quiet; f16 conversion is the
// exact IEEE half <-> single mapping including subnormals, infinities and NaN (no F16C dependency here, so it
// works in the portable build; the vectorised paths use F16C/AVX-512 instead).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels {

float f8e4m3_to_f32(uint8_t v) {
    const float sign = (v & 0x80u) != 0 ? -1.0f : 1.0f;
    const int exp = (v >> 3) & 0xf, mant = v & 0x7;
    if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant · 2^-6 / 8
    return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
}

float bf16_to_f32(uint16_t v) {
    uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_bf16(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t v) {
    uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
    uint32_t exp = (v >> 10) & 0x1fu;
    uint32_t mant = v & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    uint32_t sign = (bits >> 16) & 0x8000u;
    uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow (rounds to inf)
    if (abs < 0x38800000u) {                                               // f16 subnormal or zero
        if (abs < 0x33000000u) return static_cast<uint16_t>(sign);         // below half the smallest
        uint32_t e = abs >> 23;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        // value = mant * 2^(e-150); the f16 subnormal unit is 2^-24, so q = mant >> (126 - e), RNE.
        uint32_t shift = 126 - e;
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // RNE on the 13 dropped bits
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

}  // namespace sluice::kernels
