// The portable IsaTable: generic_ops.inc compiled with this file's target flags (baseline x86-64 /
// any CPU), with the scalar linear loops.
#include <math.h>
#include <string.h>

#include "kernels/cpu/isa_table.h"
#include "kernels/cpu/linear_isa.h"

namespace sluice::kernels::cpu {
namespace portable_ops {
#define SLUICE_GENERIC_LINEAR 1
#include "kernels/cpu/generic_ops.inc"
}  // namespace portable_ops

using namespace portable_ops;

const IsaTable kPortableTable = {
    "portable",
    g_prepared_x_floats,
    g_prepare_x,
    g_matvec_quant_rows,
    g_matvec_float_rows,
    g_dequant_rows,
    g_gemm_tile,
    "portable",
    g_i8_prepared_bytes,
    g_i8_prepare,
    g_i8_matvec_rows,
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
