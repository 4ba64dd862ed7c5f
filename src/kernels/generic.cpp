// The scalar kernels: the specification that every SIMD kernel is tested against, and the fallback on
// machines without AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace qvl {
namespace generic {  // named, so that a unity build's other files (ops.h's gelu_tanh ...) cannot collide
namespace {

void row_to_f32(WeightType type, const void* row, float* out, int64_t cols) {
  weight_type_traits(type).to_f32(row, out, cols);
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

// By construction: the rows widened by row_to_f32, then gemm_f32_tile three rows at a time.
void gemm_w16_tile(WeightType type, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k, float* y,
                   int64_t ldy, int mr, int nr) {
  QVL_CHECK((type == WeightType::kBF16 || type == WeightType::kF16) && (nr <= 3 || mr <= 2));
  thread_local std::vector<float> rows;  // [nr, k]
  rows.resize(static_cast<size_t>(nr * k));
  for (int j = 0; j < nr; ++j) row_to_f32(type, w + j * ldw, &rows[static_cast<size_t>(j * k)], k);
  for (int j0 = 0; j0 < nr; j0 += 3)
    gemm_f32_tile(x, ldx, &rows[static_cast<size_t>(j0 * k)], k, k, y + j0, ldy, mr, std::min(3, nr - j0));
}

void gemm_f32_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
                      int mr, int nc) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nc; ++j) {
      float s = 0;
      for (int64_t t = 0; t < k; ++t) s += a[i * lda + t] * b[t * ldb + j];
      c[i * ldc + j] = s;
    }
}

float exp_scaled_from(float* x, int64_t n, float scale, float* running_max) {
  float mx = *running_max;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * scale);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] * scale - mx);
    sum += x[i];
  }
  *running_max = mx;
  return sum;
}

float exp_scaled(float* x, int64_t n, float scale) {
  float mx = -INFINITY;
  return exp_scaled_from(x, n, scale, &mx);
}

void f32_to_bf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
}

float exp_scaled_from_bf16(const float* x, int64_t n, float scale, float* running_max, uint16_t* out) {
  float mx = *running_max;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * scale);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] * scale - mx);
    out[i] = to_bf16(e);
    sum += e;
  }
  *running_max = mx;
  return sum;
}

void gemm_bf16_nn_tile(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t kp, float* c,
                       int64_t ldc, int mr, int nc) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nc; ++j) {
      float s = 0;
      for (int64_t t = 0; t < kp; ++t) {
        const uint16_t* pa = a + i * lda + 2 * t;
        const uint16_t* pb = b + t * ldb + 2 * j;
        s += from_bf16(pa[1]) * from_bf16(pb[1]);
        s += from_bf16(pa[0]) * from_bf16(pb[0]);
      }
      c[i * ldc + j] = s;
    }
}

void gelu_tanh(float* x, int64_t n) {
  // 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
  constexpr float kBeta = 0.7978845608028654f;
  constexpr float kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kBeta * (v + kKappa * v * v * v)));
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
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

// Per block: the exact integer dot, then acc = fma(d_w * d_x, isum, acc).
void gemm_q8_0x8(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  (void)xsum;
  for (int i = 0; i < mr; ++i)
    for (int c = 0; c < 8; ++c) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* x = xq + (i * nb + b) * kQK;
        int32_t isum = 0;
        for (int t = 0; t < 8; ++t)
          for (int j = 0; j < 4; ++j) isum += int32_t{w[b].qs[32 * t + 4 * c + j]} * x[4 * t + j];
        acc = std::fma(f16_to_f32(w[b].d[c]) * xd[i * nb + b], static_cast<float>(isum), acc);
      }
      y[i * ldy + c] = acc;
    }
}

// Per block: isum = sum((u - 8) * q) = sum(u * q) - 8 * sum(q) over the unsigned nibbles u, then as Q8_0.
void gemm_q4_0x8(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  for (int i = 0; i < mr; ++i)
    for (int c = 0; c < 8; ++c) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* x = xq + (i * nb + b) * kQK;
        int32_t isum = 0;
        for (int s = 0; s < 4; ++s)
          for (int j = 0; j < 4; ++j) {
            const uint8_t v = w[b].qs[32 * s + 4 * c + j];
            isum += (v & 0x0F) * int32_t{x[4 * s + j]} + (v >> 4) * int32_t{x[16 + 4 * s + j]};
          }
        isum -= 8 * xsum[i * nb + b];
        acc = std::fma(f16_to_f32(w[b].d[c]) * xd[i * nb + b], static_cast<float>(isum), acc);
      }
      y[i * ldy + c] = acc;
    }
}

// K-quant x8 tiles (layouts: tensor/quant.h). Row c's unsigned value 4t + u of sub-block j of a Q4_K/Q5_K
// super-block: its nibble (low for even j) of qs[32 (8 (j / 2) + t) + 4 c + u], plus 16 where bit j of
// qh[32 t + 4 c + u] is set (Q5_K).
template <class Block>
int q45_kx8_value(const Block& blk, const uint8_t* qh, int j, int t, int c, int u) {
  const uint8_t byte = blk.qs[32 * (8 * (j / 2) + t) + 4 * c + u];
  const int low = j % 2 == 0 ? byte & 0xF : byte >> 4;
  return low + (qh && ((qh[32 * t + 4 * c + u] >> j) & 1) ? 16 : 0);
}

template <class Block>
void gemm_q45_kx8(const Block* w, const uint8_t* (*qh_of)(const Block&), const int8_t* xq, const float* xd,
                  const int32_t* xsum, int64_t nb, float* y, int64_t ldy, int mr) {
  for (int i = 0; i < mr; ++i)
    for (int c = 0; c < 8; ++c) {
      float acc = 0;
      for (int64_t s = 0; s < nb / 8; ++s) {
        const Block& blk = w[s];
        const float d = f16_to_f32(blk.d[c]), dmin = f16_to_f32(blk.dmin[c]);
        uint8_t packed[12];
        for (int k = 0; k < 3; ++k) std::memcpy(packed + 4 * k, &blk.scales[k][c], 4);
        for (int j = 0; j < 8; ++j) {
          const int64_t b = i * nb + 8 * s + j;
          const int8_t* x = xq + b * kQK;
          uint8_t sc, m;
          kquant_scale_min(j, packed, &sc, &m);
          int32_t dot = 0;
          for (int t = 0; t < 8; ++t)
            for (int u = 0; u < 4; ++u) dot += q45_kx8_value(blk, qh_of(blk), j, t, c, u) * int32_t{x[4 * t + u]};
          acc = std::fma(d * xd[b], static_cast<float>(sc * dot), acc);
          acc = std::fma(-(dmin * xd[b]), static_cast<float>(m * xsum[b]), acc);
        }
      }
      y[i * ldy + c] = acc;
    }
}

const uint8_t* no_qh(const BlockQ4_Kx8&) { return nullptr; }
const uint8_t* qh_of(const BlockQ5_Kx8& b) { return b.qh; }

void gemm_q4_kx8(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q45_kx8(w, no_qh, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q5_kx8(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q45_kx8(w, qh_of, xq, xd, xsum, nb, y, ldy, mr);
}

// Block j of a Q6_K super-block: half h = j / 4, group g = j % 4; its low 4 bits are the low (g < 2) or
// high nibbles of ql pair e = g % 2, its top 2 bits at bit 2g of qh; values 0-15 take scale 2j, 16-31 2j + 1.
void gemm_q6_kx8(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  (void)xsum;
  for (int i = 0; i < mr; ++i)
    for (int c = 0; c < 8; ++c) {
      float acc = 0;
      for (int64_t s = 0; s < nb / 8; ++s) {
        const BlockQ6_Kx8& blk = w[s];
        const float d = f16_to_f32(blk.d[c]);
        for (int j = 0; j < 8; ++j) {
          const int64_t b = i * nb + 8 * s + j;
          const int8_t* x = xq + b * kQK;
          const int h = j / 4, g = j % 4, e = g % 2;
          int32_t isum = 0;
          for (int half = 0; half < 2; ++half) {
            int32_t dot = 0;
            for (int t = 4 * half; t < 4 * half + 4; ++t)
              for (int u = 0; u < 4; ++u) {
                const uint8_t lo = blk.ql[32 * (8 * (2 * h + e) + t) + 4 * c + u];
                const uint8_t hi = blk.qh[32 * (8 * h + t) + 4 * c + u];
                const int q = (g < 2 ? lo & 0xF : lo >> 4) | (((hi >> (2 * g)) & 3) << 4);
                dot += (q - 32) * int32_t{x[4 * t + u]};
              }
            isum += blk.scales[8 * (2 * j + half) + c] * dot;
          }
          acc = std::fma(d * xd[b], static_cast<float>(isum), acc);
        }
      }
      y[i * ldy + c] = acc;
    }
}

// The panels' definition: each group's tile on 4 rows at a time.
// A group is nb blocks of q8_0/q4_0, nb / 8 super-blocks of a K-quant (kBlocksPer: 1 or 8).
template <class Block, void (*Tile)(const Block*, const int8_t*, const float*, const int32_t*, int64_t, float*, int64_t, int),
          int kBlocksPer>
void panel_ref(const Block* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, int64_t n,
               float* y, int64_t ldy) {
  for (int64_t i = 0; i < n; i += 4) {
    const int mr = static_cast<int>(std::min<int64_t>(4, n - i));
    for (int g = 0; g < ngroups; ++g)
      Tile(w + g * (nb / kBlocksPer), xq + i * nb * kQK, xd + i * nb, xsum + i * nb, nb, y + i * ldy + 8 * g, ldy, mr);
  }
}

}  // namespace
}  // namespace generic

void gemm_q8_0_panel_ref(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy) {
  generic::panel_ref<BlockQ8_0x8, generic::gemm_q8_0x8, 1>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q4_0_panel_ref(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy) {
  generic::panel_ref<BlockQ4_0x8, generic::gemm_q4_0x8, 1>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}

void gemm_q4_k_panel_ref(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy) {
  generic::panel_ref<BlockQ4_Kx8, generic::gemm_q4_kx8, 8>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q5_k_panel_ref(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy) {
  generic::panel_ref<BlockQ5_Kx8, generic::gemm_q5_kx8, 8>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q6_k_panel_ref(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy) {
  generic::panel_ref<BlockQ6_Kx8, generic::gemm_q6_kx8, 8>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}

namespace generic {
namespace {
const KernelTable& table() {
  static const KernelTable table{
      .name = "generic",
      .row_to_f32 = row_to_f32,
      .gemm_f32_tile = gemm_f32_tile,
      .gemm_w16_tile = gemm_w16_tile,
      .gemm_f32_nn_tile = gemm_f32_nn_tile,
      .nn_rows = 6,
      .nn_cols = 16,
      .exp_scaled = exp_scaled,
      .gelu_tanh = gelu_tanh,
      .silu_mul = silu_mul,
      .quantize_q8_0 = quantize_row_q8_0_ref,
      .dot_q8_0_rows = dot_q8_0_rows,
      .dot_q4_0_rows = dot_q4_0_rows,
      .quantize_act = quantize_row_act_ref,
      .gemm_q8_0x8 = gemm_q8_0x8,
      .gemm_q4_0x8 = gemm_q4_0x8,
      .gemm_q8_0x16 = two_groups<BlockQ8_0x8, gemm_q8_0x8>,
      .gemm_q4_0x16 = two_groups<BlockQ4_0x8, gemm_q4_0x8>,
      .gemm_q4_kx8 = gemm_q4_kx8,
      .gemm_q5_kx8 = gemm_q5_kx8,
      .gemm_q6_kx8 = gemm_q6_kx8,
      .gemm_q4_kx16 = two_kgroups<BlockQ4_Kx8, gemm_q4_kx8>,
      .gemm_q5_kx16 = two_kgroups<BlockQ5_Kx8, gemm_q5_kx8>,
      .gemm_q6_kx16 = two_kgroups<BlockQ6_Kx8, gemm_q6_kx8>,
      // No panels (AMX only) and no four-group tiles (AVX-512 only): null.
      .exp_scaled_from = exp_scaled_from,
      .f32_to_bf16 = f32_to_bf16,
      // No bf16 entries: the scalar twins below are neither faster nor exact, so bf16 attention runs in f32
      // here (bf16_twin_kernels() has them, for the tests).
  };
  return table;
}
const KernelTable& bf16_twin_table() {
  static const KernelTable t = [] {
    KernelTable k = table();
    k.name = "generic-bf16-twin";
    k.gemm_bf16_nn_tile = gemm_bf16_nn_tile;
    k.exp_scaled_from_bf16 = exp_scaled_from_bf16;
    return k;
  }();
  return t;
}
}  // namespace
}  // namespace generic

const KernelTable& generic_kernels() { return generic::table(); }
const KernelTable& bf16_twin_kernels() { return generic::bf16_twin_table(); }

}  // namespace qvl
