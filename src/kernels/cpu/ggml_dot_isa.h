// The per-ISA ggml dot products behind kernels::ggml_vec_dot (internal to src/kernels/cpu/).
// ggml_dot_avx2.cpp and ggml_dot_avx512.cpp each fill one table, compiled with their ISA's flags (the
// file suffix; CMakeLists.txt); ggml_dot.cpp picks the table that kernels::cpu_kernel_isa() names.
// The rules of isa_table.h hold for those files: everything but the table in an anonymous
// namespace, no standard-library inline functions or templates.
#pragma once

#include "kernels/ggml_quants.h"

namespace sluice::kernels::cpu {

// One entry per type with SIMD kernels (GgmlFormat::fast_dot); semantics: ggml_quants.h.
struct GgmlDotTable {
    const char* isa;
    GgmlDotFn q4_0;
    GgmlDotFn q8_0;
    GgmlDotFn q4_k;
    GgmlDotFn q5_k;
    GgmlDotFn q6_k;
    GgmlDotFn iq4_nl;
    GgmlDotFn iq4_xs;
    GgmlDotFn mxfp4;
};

#if defined(__x86_64__)
extern const GgmlDotTable kGgmlDotAvx2;
extern const GgmlDotTable kGgmlDotAvx512;
#endif

}  // namespace sluice::kernels::cpu
