// The avx2 IsaTable: generic_ops.inc compiled with this file's target flags, plus the
// intrinsics linear loops of linear_avx2.cpp.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/isa_table.h"
#include "kernels/cpu/linear_isa.h"

#if defined(__x86_64__)
namespace sluice::kernels::cpu {
namespace avx2_ops {
#include "kernels/cpu/generic_ops.inc"
}  // namespace avx2_ops

using namespace avx2_ops;

const IsaTable kAvx2Table = {
    "avx2",
    avx2::prepared_x_floats,
    avx2::prepare_x,
    avx2::matvec_quant_rows,
    avx2::matvec_float_rows,
    avx2::dequant_rows,
    avx2::gemm_tile,
    "avx2",
    avx2::i8_prepared_bytes,
    avx2::i8_prepare,
    avx2::i8_matvec_rows,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
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
