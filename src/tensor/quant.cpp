// Quantized weight blocks, GGUF-compatible layouts: Q8_0 (32 int8 + f16 scale = 34 bytes) and Q4_0
// (32 4-bit + f16 scale = 18 bytes), with the reference (scalar) quantize and dequantize that every fast
// kernel must agree with.
#include "tensor/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qvl {

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::abs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK; ++i) out[b].qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}

void quantize_row_q4_0_ref(const float* x, BlockQ4_0* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0, max = 0;
    for (int i = 0; i < kQK; ++i)
      if (std::abs(xb[i]) > amax) {
        amax = std::abs(xb[i]);
        max = xb[i];
      }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK / 2; ++i) {
      const uint8_t lo = static_cast<uint8_t>(std::min(15, static_cast<int>(xb[i] * id + 8.5f)));
      const uint8_t hi = static_cast<uint8_t>(std::min(15, static_cast<int>(xb[i + kQK / 2] * id + 8.5f)));
      out[b].qs[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row_q8_0_ref(const BlockQ8_0* in, float* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int i = 0; i < kQK; ++i) out[b * kQK + i] = d * static_cast<float>(in[b].qs[i]);
  }
}

void dequantize_row_q4_0_ref(const BlockQ4_0* in, float* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int i = 0; i < kQK / 2; ++i) {
      out[b * kQK + i] = d * static_cast<float>((in[b].qs[i] & 0x0F) - 8);
      out[b * kQK + i + kQK / 2] = d * static_cast<float>((in[b].qs[i] >> 4) - 8);
    }
  }
}

void pack_q8_0x8(const BlockQ8_0* rows, int64_t nb, BlockQ8_0x8* out) {
  for (int64_t b = 0; b < nb; ++b)
    for (int c = 0; c < 8; ++c) {
      const BlockQ8_0& r = rows[c * nb + b];
      out[b].d[c] = r.d;
      for (int t = 0; t < 8; ++t)
        for (int j = 0; j < 4; ++j) out[b].qs[32 * t + 4 * c + j] = r.qs[4 * t + j];
    }
}

void pack_q4_0x8(const BlockQ4_0* rows, int64_t nb, BlockQ4_0x8* out) {
  for (int64_t b = 0; b < nb; ++b)
    for (int c = 0; c < 8; ++c) {
      const BlockQ4_0& r = rows[c * nb + b];
      out[b].d[c] = r.d;
      for (int s = 0; s < 4; ++s)
        for (int j = 0; j < 4; ++j) out[b].qs[32 * s + 4 * c + j] = r.qs[4 * s + j];
    }
}

void unpack_q8_0x8(const BlockQ8_0x8* in, int c, int64_t nb, BlockQ8_0* row) {
  for (int64_t b = 0; b < nb; ++b) {
    row[b].d = in[b].d[c];
    for (int t = 0; t < 8; ++t)
      for (int j = 0; j < 4; ++j) row[b].qs[4 * t + j] = in[b].qs[32 * t + 4 * c + j];
  }
}

void unpack_q4_0x8(const BlockQ4_0x8* in, int c, int64_t nb, BlockQ4_0* row) {
  for (int64_t b = 0; b < nb; ++b) {
    row[b].d = in[b].d[c];
    for (int s = 0; s < 4; ++s)
      for (int j = 0; j < 4; ++j) row[b].qs[4 * s + j] = in[b].qs[32 * s + 4 * c + j];
  }
}

void quantize_row_act_ref(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum_out) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::abs(xb[i]));
    const float db = amax / 127.0f;
    const float id = db != 0 ? 1.0f / db : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) {
      q[b * kQK + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
      sum += q[b * kQK + i];
    }
    d[b] = db;
    sum_out[b] = sum;
  }
}

namespace {

// Q4_K and Q5_K (qh null): ggml's loop, two sub-blocks of 32 per 64 values.
void dequantize_q45_k(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qh, const uint8_t* q, float* y) {
  const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQKK; j += 64) {
    uint8_t sc, m;
    kquant_scale_min(is + 0, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    kquant_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((q[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
    q += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

}  // namespace

void dequantize_row_q4_k_ref(const BlockQ4_K* in, float* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQKK; ++b) dequantize_q45_k(in[b].d, in[b].dmin, in[b].scales, nullptr, in[b].qs, out + b * kQKK);
}

void dequantize_row_q5_k_ref(const BlockQ5_K* in, float* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQKK; ++b) dequantize_q45_k(in[b].d, in[b].dmin, in[b].scales, in[b].qh, in[b].qs, out + b * kQKK);
}

void dequantize_row_q6_k_ref(const BlockQ6_K* in, float* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    const float d = f16_to_f32(in[b].d);
    const uint8_t* ql = in[b].ql;
    const uint8_t* qh = in[b].qh;
    const int8_t* sc = in[b].scales;
    float* y = out + b * kQKK;
    for (int h = 0; h < kQKK; h += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// K-quant interleaving. Each function moves every byte of the 8 blocks once, 4 at a time: pack row -> x8,
// unpack x8 -> row.
namespace {

// Row c's 12 scale bytes <-> the x8 block's three words of lane c.
void pack_scales(const uint8_t* row, uint32_t (&words)[3][8], int c) {
  for (int w = 0; w < 3; ++w) std::memcpy(&words[w][c], row + 4 * w, 4);
}
void unpack_scales(const uint32_t (&words)[3][8], int c, uint8_t* row) {
  for (int w = 0; w < 3; ++w) std::memcpy(row + 4 * w, &words[w][c], 4);
}

// Q4_K / Q5_K values: x8 index of row c's qs byte 32p + 4t + u.
inline size_t q45_index(int p, int t, int c, int u) { return static_cast<size_t>(32 * (8 * p + t) + 4 * c + u); }
// Q6_K: x8 index of row c's ql byte 64h + 32e + 4t + u, and of its qh byte 32h + 4t + u.
inline size_t ql_index(int h, int e, int t, int c, int u) { return static_cast<size_t>(32 * (8 * (2 * h + e) + t) + 4 * c + u); }
inline size_t qh_index(int h, int t, int c, int u) { return static_cast<size_t>(32 * (8 * h + t) + 4 * c + u); }

}  // namespace

void pack_q4_kx8(const BlockQ4_K* rows, int64_t ns, BlockQ4_Kx8* out) {
  for (int64_t s = 0; s < ns; ++s)
    for (int c = 0; c < 8; ++c) {
      const BlockQ4_K& r = rows[c * ns + s];
      out[s].d[c] = r.d;
      out[s].dmin[c] = r.dmin;
      pack_scales(r.scales, out[s].scales, c);
      for (int p = 0; p < 4; ++p)
        for (int t = 0; t < 8; ++t)
          std::memcpy(&out[s].qs[q45_index(p, t, c, 0)], &r.qs[32 * p + 4 * t], 4);
    }
}

void unpack_q4_kx8(const BlockQ4_Kx8* in, int c, int64_t ns, BlockQ4_K* row) {
  for (int64_t s = 0; s < ns; ++s) {
    BlockQ4_K& r = row[s];
    r.d = in[s].d[c];
    r.dmin = in[s].dmin[c];
    unpack_scales(in[s].scales, c, r.scales);
    for (int p = 0; p < 4; ++p)
      for (int t = 0; t < 8; ++t)
        std::memcpy(&r.qs[32 * p + 4 * t], &in[s].qs[q45_index(p, t, c, 0)], 4);
  }
}

void pack_q5_kx8(const BlockQ5_K* rows, int64_t ns, BlockQ5_Kx8* out) {
  for (int64_t s = 0; s < ns; ++s)
    for (int c = 0; c < 8; ++c) {
      const BlockQ5_K& r = rows[c * ns + s];
      out[s].d[c] = r.d;
      out[s].dmin[c] = r.dmin;
      pack_scales(r.scales, out[s].scales, c);
      for (int t = 0; t < 8; ++t)
        std::memcpy(&out[s].qh[32 * t + 4 * c], &r.qh[4 * t], 4);
      for (int p = 0; p < 4; ++p)
        for (int t = 0; t < 8; ++t)
          std::memcpy(&out[s].qs[q45_index(p, t, c, 0)], &r.qs[32 * p + 4 * t], 4);
    }
}

void unpack_q5_kx8(const BlockQ5_Kx8* in, int c, int64_t ns, BlockQ5_K* row) {
  for (int64_t s = 0; s < ns; ++s) {
    BlockQ5_K& r = row[s];
    r.d = in[s].d[c];
    r.dmin = in[s].dmin[c];
    unpack_scales(in[s].scales, c, r.scales);
    for (int t = 0; t < 8; ++t)
      std::memcpy(&r.qh[4 * t], &in[s].qh[32 * t + 4 * c], 4);
    for (int p = 0; p < 4; ++p)
      for (int t = 0; t < 8; ++t)
        std::memcpy(&r.qs[32 * p + 4 * t], &in[s].qs[q45_index(p, t, c, 0)], 4);
  }
}

void pack_q6_kx8(const BlockQ6_K* rows, int64_t ns, BlockQ6_Kx8* out) {
  for (int64_t s = 0; s < ns; ++s)
    for (int c = 0; c < 8; ++c) {
      const BlockQ6_K& r = rows[c * ns + s];
      out[s].d[c] = r.d;
      for (int k = 0; k < 16; ++k) out[s].scales[8 * k + c] = r.scales[k];
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 8; ++t) {
          for (int e = 0; e < 2; ++e) std::memcpy(&out[s].ql[ql_index(h, e, t, c, 0)], &r.ql[64 * h + 32 * e + 4 * t], 4);
          std::memcpy(&out[s].qh[qh_index(h, t, c, 0)], &r.qh[32 * h + 4 * t], 4);
        }
    }
}

void unpack_q6_kx8(const BlockQ6_Kx8* in, int c, int64_t ns, BlockQ6_K* row) {
  for (int64_t s = 0; s < ns; ++s) {
    BlockQ6_K& r = row[s];
    r.d = in[s].d[c];
    for (int k = 0; k < 16; ++k) r.scales[k] = in[s].scales[8 * k + c];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 8; ++t) {
        for (int e = 0; e < 2; ++e) std::memcpy(&r.ql[64 * h + 32 * e + 4 * t], &in[s].ql[ql_index(h, e, t, c, 0)], 4);
        std::memcpy(&r.qh[32 * h + 4 * t], &in[s].qh[qh_index(h, t, c, 0)], 4);
      }
  }
}

void kquant_scales_mins(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) kquant_scale_min(j, q, &sc[j], &m[j]);
}

}  // namespace qvl
