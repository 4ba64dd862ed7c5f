// The table of compute kernels, chosen once at start-up for the best instruction set the CPU and OS
// support (CPUID + XGETBV), overridable with QVL_ISA=generic|avx2 for tests. Every entry of the AVX2 table
// has a scalar twin in generic.cpp that defines what it must compute.
#pragma once

#include <cstdint>

#include "tensor/quant.h"

namespace qvl {

struct KernelTable {
  const char* name;

  // Converts one row of `cols` values of the given storage type to float32.
  void (*row_to_f32)(WeightType type, const void* row, float* out, int64_t cols);

  // y[i * ldy + j] = dot(x[i * ldx .. +k], w[j * ldw .. +k]) for i < mr <= 4, j < nr <= 3 (float32).
  void (*gemm_f32_tile)(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y,
                        int64_t ldy, int mr, int nr);

  // Quantizes one activation row (cols % 32 == 0) to Q8_0 blocks.
  void (*quantize_q8_0)(const float* x, BlockQ8_0* out, int64_t cols);

  // y[i * ldy] = dot(w_row, x_i) for i < mr <= 4 activation rows of nb Q8_0 blocks each (x rows nb apart);
  // w_row is nb blocks of Q8_0 or Q4_0.
  void (*dot_q8_0_rows)(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr);
  void (*dot_q4_0_rows)(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr);
};

const KernelTable& generic_kernels();
// Null when the machine (CPU or OS) cannot run AVX2 + FMA + F16C.
const KernelTable* avx2_kernels();

// The table in use: the best available, or the one QVL_ISA names (an unavailable one is an error printed
// once at start-up, falling back to generic).
const KernelTable& kernels();

// What the CPU and OS support.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512f = false, os_ymm = false;
};
CpuFeatures cpu_features();

}  // namespace qvl
