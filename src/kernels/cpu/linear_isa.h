// Declarations of the per-ISA linear inner loops (linear_avx2.cpp, linear_avx512.cpp), shared by
// the ops_*.cpp files that put them into their IsaTable. Semantics: see IsaTable in isa_table.h.
#pragma once

#include "kernels/cpu/isa_table.h"

#define SLUICE_DECLARE_LINEAR_ISA(ns)                                                                        \
    namespace sluice::kernels::cpu::ns {                                                                     \
    int64_t prepared_x_floats(const WeightView& w);                                                          \
    void prepare_x(const WeightView& w, const float* x, float* xp, float* xsum);                             \
    void matvec_quant_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);                \
    void matvec_float_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);                \
    void dequant_rows(const WeightView& w, int64_t r0, int64_t r1, float* tile);                             \
    void gemm_tile(const float* wt, int64_t nr, int64_t ldw, const float* x, int64_t n, int64_t cols,        \
                   float* y, int64_t ldy);                                                                   \
    int64_t i8_prepared_bytes(const WeightView& w);                                                          \
    void i8_prepare(const WeightView& w, const float* x, uint8_t* prep, float* xs);                          \
    void i8_matvec_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);                   \
    int64_t i8_gemm_prepared_bytes(const WeightView& w, int64_t n);                                          \
    void i8_gemm_prepare(const WeightView& w, const float* x, int64_t n, uint8_t* prep);                     \
    int64_t i8_gemm_scratch_bytes(const WeightView& w, int64_t rows);                                        \
    void i8_gemm_rows(const WeightView& w, const uint8_t* prep, int64_t n, int64_t r0, int64_t r1, float* y, \
                      int64_t ldy, uint8_t* scratch);                                                        \
    }

#if defined(__x86_64__)
SLUICE_DECLARE_LINEAR_ISA(avx2)
SLUICE_DECLARE_LINEAR_ISA(avx512)
#endif
