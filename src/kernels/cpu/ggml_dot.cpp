// kernels::ggml_vec_dot_fn: the dot product of one ggml-quantized row with f32 x, on the ISA the
// rest of the CPU kernels use (kernels::cpu_kernel_isa(), which testing::force_isa overrides, so one
// switch runs every kernel on one ISA). The per-ISA loops are ggml_dot_avx2.cpp and
// ggml_dot_avx512.cpp; types without them, and the portable ISA, run the scalar twin.
// Callers hoist the returned pointer out of their row loop: the choice is read once per call here.
#include <cstring>

#include "core/assert.h"
#include "kernels/cpu/ggml_dot_isa.h"
#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"

namespace sluice::kernels {
namespace {

template <GgmlType T>
float twin(const void* row, const float* x, int64_t cols) {
    return reference::ggml_vec_dot(T, row, x, cols);
}

GgmlDotFn twin_fn(GgmlType type) {
    switch (type) {
        case GgmlType::kF32: return twin<GgmlType::kF32>;
        case GgmlType::kF16: return twin<GgmlType::kF16>;
        case GgmlType::kQ4_0: return twin<GgmlType::kQ4_0>;
        case GgmlType::kQ4_1: return twin<GgmlType::kQ4_1>;
        case GgmlType::kQ5_0: return twin<GgmlType::kQ5_0>;
        case GgmlType::kQ5_1: return twin<GgmlType::kQ5_1>;
        case GgmlType::kQ8_0: return twin<GgmlType::kQ8_0>;
        case GgmlType::kQ4_K: return twin<GgmlType::kQ4_K>;
        case GgmlType::kQ5_K: return twin<GgmlType::kQ5_K>;
        case GgmlType::kQ6_K: return twin<GgmlType::kQ6_K>;
        case GgmlType::kQ8_K: return twin<GgmlType::kQ8_K>;
        case GgmlType::kIQ4_NL: return twin<GgmlType::kIQ4_NL>;
        case GgmlType::kIQ4_XS: return twin<GgmlType::kIQ4_XS>;
        case GgmlType::kBF16: return twin<GgmlType::kBF16>;
        case GgmlType::kMXFP4: return twin<GgmlType::kMXFP4>;
    }
    SLUICE_ASSERT(false && "unknown ggml type");
    return nullptr;
}

GgmlDotFn table_fn(const cpu::GgmlDotTable& t, GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0: return t.q4_0;
        case GgmlType::kQ8_0: return t.q8_0;
        case GgmlType::kQ4_K: return t.q4_k;
        case GgmlType::kQ5_K: return t.q5_k;
        case GgmlType::kQ6_K: return t.q6_k;
        case GgmlType::kIQ4_NL: return t.iq4_nl;
        case GgmlType::kIQ4_XS: return t.iq4_xs;
        case GgmlType::kMXFP4: return t.mxfp4;
        default: return nullptr;
    }
}

const cpu::GgmlDotTable* current_table() {
#if defined(__x86_64__)
    const char* isa = cpu_kernel_isa();
    if (std::strcmp(isa, cpu::kGgmlDotAvx512.isa) == 0) return &cpu::kGgmlDotAvx512;
    if (std::strcmp(isa, cpu::kGgmlDotAvx2.isa) == 0) return &cpu::kGgmlDotAvx2;
#endif
    return nullptr;
}

}  // namespace

GgmlDotFn ggml_vec_dot_fn(GgmlType type) {
    const cpu::GgmlDotTable* t = current_table();
    if (t != nullptr && ggml_format(type).fast_dot) {
        GgmlDotFn fn = table_fn(*t, type);
        SLUICE_ASSERT(fn != nullptr);
        return fn;
    }
    return twin_fn(type);
}

}  // namespace sluice::kernels
