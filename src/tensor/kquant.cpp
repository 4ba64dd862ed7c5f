// K-quant super-blocks written from float rows (the layouts gguf_dequantize_row reads).
#include "tensor/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace qvl {

namespace {

constexpr int kSuper = 256;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// Rounded half to even, saturated (NaN: 0): what a division by a tiny or zero scale gives stays defined.
int nearest(float v) {
  if (std::isnan(v)) return 0;
  return static_cast<int>(std::nearbyint(std::clamp(v, -1e9f, 1e9f)));
}

// x ~ scale * q - mn with q in [0, nmax] and mn >= 0 (as the format stores a subtracted min): the min/max
// range first, then least-squares refits of (scale, mn) for the current q while the squared error drops.
void fit_scale_min(const float* x, int n, int nmax, float* scale, float* mn) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *mn = -lo;
  if (!(hi > lo)) {
    *scale = 0;
    return;
  }
  float s = (hi - lo) / static_cast<float>(nmax), m = -lo;
  auto error = [&](float sc, float off) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const int q = sc > 0 ? std::clamp(nearest((x[i] + off) / sc), 0, nmax) : 0;
      const double d = static_cast<double>(sc) * q - off - x[i];
      e += d * d;
    }
    return e;
  };
  double best = error(s, m);
  if (!(s > 0) || !std::isfinite(s)) {  // a range too small (or too large) for float steps
    *scale = 0;
    *mn = std::isfinite(m) ? m : 0;
    return;
  }
  for (int iter = 0; iter < 4; ++iter) {
    double A = 0, B = 0, X = 0, Y = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(nearest((x[i] + m) / s), 0, nmax);
      A += static_cast<double>(q) * q;
      B += q;
      X += static_cast<double>(q) * x[i];
      Y += x[i];
    }
    const double C = n, det = B * B - A * C;
    if (std::fabs(det) < 1e-12) break;
    double ns = (B * Y - X * C) / det, nm = (A * Y - B * X) / det;
    if (nm < 0) {  // the format's min is subtracted and non-negative
      nm = 0;
      ns = A > 0 ? X / A : 0;
    }
    if (!(ns > 0)) break;
    const double e = error(static_cast<float>(ns), static_cast<float>(nm));
    if (e >= best) break;
    best = e;
    s = static_cast<float>(ns);
    m = static_cast<float>(nm);
  }
  *scale = s;
  *mn = m;
}

// Q4_K / Q5_K: nmax 15 or 31.
void quantize_super_k(const float* x, uint8_t* out, int nmax) {
  const bool five = nmax == 31;
  float scale[8], mn[8];
  for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, nmax, &scale[j], &mn[j]);
  const float max_scale = *std::max_element(scale, scale + 8), max_mn = *std::max_element(mn, mn + 8);
  put_f16(out, max_scale / 63.0f);
  put_f16(out + 2, max_mn / 63.0f);
  const float d = f16_to_f32(static_cast<uint16_t>(out[0] | (out[1] << 8)));
  const float dmin = f16_to_f32(static_cast<uint16_t>(out[2] | (out[3] << 8)));
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest(scale[j] / d), 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(nearest(mn[j] / dmin), 0, 63) : 0);
  }
  // 12 bytes: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 split into the
  // low nibbles of bytes 8-11 and the top 2 bits of bytes 0-7.
  uint8_t* s = out + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  uint8_t q[kSuper];
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * m[j];
    for (int i = 0; i < 32; ++i)
      q[32 * j + i] = static_cast<uint8_t>(ds > 0 ? std::clamp(nearest((x[32 * j + i] + dm) / ds), 0, nmax) : 0);
  }
  // Values c*64 + l (low nibble) and c*64 + 32 + l (high nibble) share byte c*32 + l; Q5_K's fifth bits go to
  // qh[l], bit 2c and 2c + 1.
  uint8_t* qh = five ? out + 16 : nullptr;
  uint8_t* qs = out + (five ? 48 : 16);
  if (five) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const uint8_t a = q[64 * c + l], b = q[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((a & 0xF) | ((b & 0xF) << 4));
      if (five) qh[l] = static_cast<uint8_t>(qh[l] | ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
    }
}

void quantize_super_q6(const float* x, uint8_t* out) {
  // Per 16 values a signed scale that maps the largest magnitude near -32 (the code's widest side): of
  // vmax / -(32 - k/2), k = 0..12, the one with the least squared error.
  float scale[16];
  for (int j = 0; j < 16; ++j) {
    const float* v = x + 16 * j;
    float vmax = 0;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(v[i]) > std::fabs(vmax)) vmax = v[i];
    scale[j] = vmax / -32.0f;
    if (vmax == 0) continue;
    double best = -1;
    for (int k = 0; k <= 12; ++k) {
      const float s = vmax / -(32.0f - 0.5f * static_cast<float>(k));
      double e = 0;
      for (int i = 0; i < 16; ++i) {
        const double d = static_cast<double>(s) * std::clamp(nearest(v[i] / s), -32, 31) - v[i];
        e += d * d;
      }
      if (best < 0 || e < best) {
        best = e;
        scale[j] = s;
      }
    }
  }
  float amax = 0;
  for (float s : scale) amax = std::max(amax, std::fabs(s));
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
  put_f16(out + 208, amax / 127.0f);
  const float d = f16_to_f32(static_cast<uint16_t>(out[208] | (out[209] << 8)));
  uint8_t q[kSuper];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d > 0 ? std::clamp(nearest(scale[j] / d), -128, 127) : 0);
    const float ds = d * sc[j];
    for (int i = 0; i < 16; ++i)
      q[16 * j + i] = static_cast<uint8_t>((ds != 0 ? std::clamp(nearest(x[16 * j + i] / ds), -32, 31) : 0) + 32);
  }
  // Per half h: values h*128 + {l, 32 + l, 64 + l, 96 + l} share ql[h*64 + l], ql[h*64 + 32 + l] (low and high
  // nibbles) and qh[h*32 + l] (their top 2 bits, in that order).
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = q + 128 * h;
      const uint8_t q1 = v[l], q2 = v[32 + l], q3 = v[64 + l], q4 = v[96 + l];
      ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[64 * h + 32 + l] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
}

}  // namespace

void quantize_row_q4_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuper; ++b) quantize_super_k(x + b * kSuper, out + b * 144, 15);
}

void quantize_row_q5_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuper; ++b) quantize_super_k(x + b * kSuper, out + b * 176, 31);
}

void quantize_row_q6_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuper; ++b) quantize_super_q6(x + b * kSuper, out + b * 210);
}

Status quantize_row_kquant(WeightType type, const float* x, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return Status::Error("value " + std::to_string(i) + " of the row is not finite");
  if (!is_kquant(type)) return Status::Error(std::string("not a K-quant type: ") + weight_type_name(type));
  if (n % kSuper != 0)
    return Status::Error(std::string(weight_type_name(type)) + ": a row of " + std::to_string(n) +
                         " values is not whole super-blocks of 256");
  weight_type_traits(type).from_f32(x, out, n);
  return Status::Ok();
}

}  // namespace qvl
