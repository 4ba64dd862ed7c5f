// The numeric operations of the forward pass on float32 activations: matrix products against weights
// stored in bf16/f16/f32, norms, activations, softmax and rotary embeddings. Threaded where the work is
// large; every function here is the reference ("generic") version that faster kernels must match.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/status.h"

namespace qvl {

void Mat::row_to_f32(int64_t r, float* out) const {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, static_cast<const float*>(data) + r * cols, static_cast<size_t>(cols) * sizeof(float));
      return;
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t i = 0; i < cols; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
  }
}

namespace {

// Dot products of one x row with 4 weight rows, 8 lanes each so the compiler can keep them in vectors.
inline void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3, int64_t k,
                 float out[4]) {
  float a0[8] = {}, a1[8] = {}, a2[8] = {}, a3[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float xv = x[i + j];
      a0[j] += xv * w0[i + j];
      a1[j] += xv * w1[i + j];
      a2[j] += xv * w2[i + j];
      a3[j] += xv * w3[i + j];
    }
  }
  float s[4] = {0, 0, 0, 0};
  for (int j = 0; j < 8; ++j) {
    s[0] += a0[j];
    s[1] += a1[j];
    s[2] += a2[j];
    s[3] += a3[j];
  }
  for (; i < k; ++i) {
    s[0] += x[i] * w0[i];
    s[1] += x[i] * w1[i];
    s[2] += x[i] * w2[i];
    s[3] += x[i] * w3[i];
  }
  std::copy(s, s + 4, out);
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t n, const Mat& w, const float* bias, float* y) {
  const int64_t m = w.rows, k = w.cols;
  QVL_CHECK(w.data != nullptr && m > 0 && k > 0);
  // kRowBlock weight rows are converted to float32 at a time: 16 rows x k <= 6144 floats = 384 KiB at
  // most, reused across all n activation rows (tiled by kRowTile to stay in cache).
  constexpr int64_t kRowBlock = 16;
  constexpr int64_t kRowTile = 64;
  pool.parallel_for(m, kRowBlock, [&](int, int64_t m0, int64_t m1) {
    thread_local std::vector<float> wbuf;
    wbuf.resize(static_cast<size_t>(kRowBlock * k + 4 * k));
    for (int64_t b0 = m0; b0 < m1; b0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, m1 - b0);
      for (int64_t r = 0; r < rows; ++r) w.row_to_f32(b0 + r, &wbuf[static_cast<size_t>(r * k)]);
      // Pad to a multiple of 4 rows with zeros so dot4 needs no tail case.
      const int64_t rows4 = (rows + 3) / 4 * 4;
      std::fill(wbuf.begin() + rows * k, wbuf.begin() + rows4 * k, 0.0f);
      for (int64_t i0 = 0; i0 < n; i0 += kRowTile) {
        const int64_t i1 = std::min(n, i0 + kRowTile);
        for (int64_t r = 0; r < rows4; r += 4) {
          const float* w0 = &wbuf[static_cast<size_t>(r * k)];
          for (int64_t i = i0; i < i1; ++i) {
            float s[4];
            dot4(x + i * k, w0, w0 + k, w0 + 2 * k, w0 + 3 * k, k, s);
            for (int64_t j = 0; j < 4 && r + j < rows; ++j) {
              const int64_t col = b0 + r + j;
              y[i * m + col] = s[j] + (bias ? bias[col] : 0.0f);
            }
          }
        }
      }
    }
  });
}

void layer_norm(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    double mean = 0;
    for (int64_t j = 0; j < d; ++j) mean += xi[j];
    mean /= static_cast<double>(d);
    double var = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double c = xi[j] - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float mu = static_cast<float>(mean);
    for (int64_t j = 0; j < d; ++j) yi[j] = (xi[j] - mu) * rstd * w[j] + (b ? b[j] : 0.0f);
  }
}

void rms_norm(const float* x, int64_t n, int64_t d, const float* w, float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    // variance = hidden_states.pow(2).mean(-1); hidden_states * torch.rsqrt(variance + eps)
    const float rstd = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + eps);
    for (int64_t j = 0; j < d; ++j) yi[j] = w[j] * (xi[j] * rstd);
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

void gelu_erf(float* x, int64_t n) {
  // 0.5 * x * (1 + erf(x / sqrt(2)))
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope_rotate_half(float* x, int64_t d, const float* cos, const float* sin) {
  const int64_t h = d / 2;
  for (int64_t j = 0; j < h; ++j) {
    const float a = x[j], b = x[j + h];
    // q_embed = (q * cos) + (rotate_half(q) * sin), rotate_half(q) = cat(-q2, q1)
    x[j] = a * cos[j] - b * sin[j];
    x[j + h] = b * cos[j + h] + a * sin[j + h];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace qvl
