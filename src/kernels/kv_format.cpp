// KV cache element types (kv_format.h): names and sizes.
#include "kernels/kv_format.h"

namespace sluice::kernels {

const char* kv_type_name(KvType type) {
    switch (type) {
        case KvType::kF32: return "f32";
        case KvType::kF16: return "f16";
        case KvType::kQ8: return "q8";
        case KvType::kQ4: return "q4";
        case KvType::kQ3: return "q3";
    }
    return "?";
}

double kv_type_bits(KvType type, int64_t head_dim) {
    switch (type) {
        case KvType::kF32: return 32.0;
        case KvType::kF16: return 16.0;
        case KvType::kQ8: return 8.0 + 16.0 / kKvGroup;
        case KvType::kQ4: return 4.0 + 16.0 / kKvGroup;
        case KvType::kQ3: return 3.0 + 16.0 / static_cast<double>(head_dim);
    }
    return 0.0;
}

int64_t kv_head_bytes(KvType type, int64_t head_dim) {
    switch (type) {
        case KvType::kF32: return 4 * head_dim;
        case KvType::kF16: return 2 * head_dim;
        case KvType::kQ8: return head_dim + 2 * (head_dim / kKvGroup);
        case KvType::kQ4: return head_dim / 2 + 2 * (head_dim / kKvGroup);
        case KvType::kQ3: return head_dim * 3 / 8 + 2;
    }
    return 0;
}

const char* kv_shape_error(KvType type, int64_t head_dim) {
    if (head_dim <= 0) return "an empty head";
    if ((type == KvType::kQ8 || type == KvType::kQ4) && head_dim % kKvGroup != 0)
        return "a head_dim that is not a multiple of 32 (the quantized KV group)";
    if (type == KvType::kQ3 &&
        (head_dim < 8 || head_dim > kKvMaxRotatedDim || (head_dim & (head_dim - 1)) != 0))
        return "a head_dim that is not a power of two from 8 to 1024 (the 3-bit KV type's Hadamard rotation)";
    return nullptr;
}

bool kv_type_for_bits(int bits, KvType* type) {
    switch (bits) {
        case 32: *type = KvType::kF32; return true;
        case 16: *type = KvType::kF16; return true;
        case 8: *type = KvType::kQ8; return true;
        case 4: *type = KvType::kQ4; return true;
        case 3: *type = KvType::kQ3; return true;
        default: return false;
    }
}

}  // namespace sluice::kernels
