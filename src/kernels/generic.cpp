// The scalar kernels: the specification that every SIMD kernel is tested against, and the fallback on
// machines without AVX2.
#include <cstring>

#include "kernels/kernels.h"

namespace qvl {

namespace {

void row_to_f32(WeightType type, const void* row, float* out, int64_t cols) {
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float));
      return;
    case WeightType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case WeightType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
    case WeightType::kQ8_0:
      dequantize_row_q8_0_ref(static_cast<const BlockQ8_0*>(row), out, cols);
      return;
    case WeightType::kQ4_0:
      dequantize_row_q4_0_ref(static_cast<const BlockQ4_0*>(row), out, cols);
      return;
  }
}

void gemm_f32_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                   int mr, int nr) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float s = 0;
      for (int64_t t = 0; t < k; ++t) s += x[i * ldx + t] * w[j * ldw + t];
      y[i * ldy + j] = s;
    }
}

void dot_q8_0_rows(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr) {
  for (int i = 0; i < mr; ++i) {
    const BlockQ8_0* xi = x + i * nb;
    float sum = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t isum = 0;
      for (int t = 0; t < kQK; ++t) isum += int32_t{w[b].qs[t]} * xi[b].qs[t];
      sum += static_cast<float>(isum) * (f16_to_f32(w[b].d) * f16_to_f32(xi[b].d));
    }
    y[i * ldy] = sum;
  }
}

void dot_q4_0_rows(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr) {
  for (int i = 0; i < mr; ++i) {
    const BlockQ8_0* xi = x + i * nb;
    float sum = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t isum = 0;
      for (int t = 0; t < kQK / 2; ++t) {
        isum += ((w[b].qs[t] & 0x0F) - 8) * int32_t{xi[b].qs[t]};
        isum += ((w[b].qs[t] >> 4) - 8) * int32_t{xi[b].qs[t + kQK / 2]};
      }
      sum += static_cast<float>(isum) * (f16_to_f32(w[b].d) * f16_to_f32(xi[b].d));
    }
    y[i * ldy] = sum;
  }
}

}  // namespace

const KernelTable& generic_kernels() {
  static const KernelTable table{"generic", row_to_f32, gemm_f32_tile, quantize_row_q8_0_ref, dot_q8_0_rows,
                                 dot_q4_0_rows};
  return table;
}

}  // namespace qvl
