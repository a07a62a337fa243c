// The avx512 IsaTable: generic_ops.inc compiled with this file's target flags, plus the
// intrinsics linear loops of linear_avx512.cpp.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/isa_table.h"
#include "kernels/cpu/linear_isa.h"

#if defined(__x86_64__)
namespace sluice::kernels::cpu {
namespace avx512_ops {
#include "kernels/cpu/generic_ops.inc"
}  // namespace avx512_ops

using namespace avx512_ops;

const IsaTable kAvx512Table = {
    "avx512",
    avx512::prepared_x_floats,
    avx512::prepare_x,
    avx512::matvec_quant_rows,
    avx512::matvec_float_rows,
    avx512::dequant_rows,
    avx512::gemm_tile,
    "avx512-vnni",
    avx512::i8_prepared_bytes,
    avx512::i8_prepare,
    avx512::i8_matvec_rows,
    avx512::i8_gemm_prepared_bytes,
    avx512::i8_gemm_prepare,
    avx512::i8_gemm_scratch_bytes,
    avx512::i8_gemm_rows,
    g_rms_norm,
    g_rms_norm_gated,
    g_swiglu,
    g_axpy,
    g_rope_neox,
    g_conv1d_silu_channels,
    g_attention_group_kv,
    g_kv_load_head,
    g_delta_recurrent_head,
    g_delta_chunked_head,
};

}  // namespace sluice::kernels::cpu
#endif
