// The numeric operations of the forward pass on float32 activations: matrix products against weights
// stored in bf16/f16/f32, norms, activations, softmax and rotary embeddings. Threaded where the work is
// large; every function here is the reference ("generic") version that faster kernels must match.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "util/status.h"

namespace qvl {

void row_to_f32(const Mat& w, int64_t r, float* out) {
  const KernelTable& K = kernels();
  if (w.layout == Layout::kRows) return K.row_to_f32(w.type, w.row(r), out, w.cols);
  const WeightTypeTraits& t = weight_type_traits(w.type);
  QVL_CHECK(t.unpack_x8 != nullptr && "interleaved float matrix");
  std::vector<uint8_t> tmp(row_bytes(w.type, w.cols));  // one row of blocks
  t.unpack_x8(w.group(r / 8), static_cast<int>(r % 8), w.cols / t.block_values, tmp.data());
  K.row_to_f32(w.type, tmp.data(), out, w.cols);
}

Mat interleave8(const Mat& w, void* out) {
  QVL_CHECK(w.layout == Layout::kRows && is_interleavable(w.type) && w.rows % 8 == 0);
  const WeightTypeTraits& t = weight_type_traits(w.type);
  QVL_CHECK(w.cols % t.block_values == 0);
  for (int64_t g = 0; g < w.rows / 8; ++g) {
    uint8_t* dst = static_cast<uint8_t*>(out) + static_cast<size_t>(8 * g) * row_bytes(w.type, w.cols);
    t.pack_x8(w.row(8 * g), w.cols / t.block_values, dst);
  }
  Mat m = w;
  m.data = out;
  m.layout = Layout::kInterleaved8;
  return m;
}

namespace {

// Float weights: blocks of weight rows (kBlockBytes as float32, about half of a 512 KiB L2) are reused across
// all activation rows, in tiles of 4 activation rows x 3 weight rows (1 or 2 x 6 for 16-bit rows). f32 rows
// are read as they are, bf16 rows (and f16 rows for up to kMaxRowsForFusedF16 activation rows) widened inside
// the tile, other rows widened into a float32 block first.
constexpr int64_t kBlockBytes = 192 * 1024;
constexpr int kTileX = 4, kTileW = 3;
// Up to this many activation rows, quantized weights are dotted in integers (see matmul()).
constexpr int64_t kMaxRowsForIntegerDots = 4;
// bf16 rows are widened inside the tile for any number of activation rows (a shift: faster at every shape
// measured), f16 rows for up to this many (vcvtph2ps competes with the FMAs: on a Zen 2, 1.4-2.9x faster
// up to 4 rows, even at 16, 8-33% slower at 210 and 784; BENCHMARKS.md).
constexpr int64_t kMaxRowsForFusedF16 = 16;

void matmul_float(ThreadPool& pool, const KernelTable& K, const float* x, int64_t n, const Mat& w, float* y) {
  const int64_t m = w.rows, k = w.cols;
  // 16-bit float rows widened inside the tile (the same bits as widening them into a block first) and run 6 at a
  // time for 1-2 activation rows: blocks and threads' ranges in whole 6-row tiles, so that decode runs no
  // narrower tile but the last.
  const bool fused = w.type == WeightType::kBF16 || (w.type == WeightType::kF16 && n <= kMaxRowsForFusedF16);
  const int64_t unit = fused ? 2 * kTileW : kTileW;
  const auto round_up = [unit](int64_t v) { return (v + unit - 1) / unit * unit; };
  const int64_t block = round_up(std::max<int64_t>(kTileW, kBlockBytes / (k * 4) / kTileW * kTileW));
  const auto* w16 = static_cast<const uint16_t*>(w.data);  // [m, k] when fused
  pool.parallel_for(m, std::min(block, round_up((m + pool.size() - 1) / pool.size())), [&](int, int64_t m0, int64_t m1) {
    thread_local std::vector<float> wbuf;
    if (!fused) wbuf.resize(static_cast<size_t>(block * k));
    for (int64_t b0 = m0; b0 < m1; b0 += block) {
      const int64_t rows = std::min(block, m1 - b0);
      if (!fused)
        for (int64_t r = 0; r < rows; ++r) K.row_to_f32(w.type, w.row(b0 + r), &wbuf[static_cast<size_t>(r * k)], k);
      for (int64_t i = 0; i < n; i += kTileX) {
        const int mr = static_cast<int>(std::min<int64_t>(kTileX, n - i));
        const int64_t tw = fused && mr <= 2 ? 2 * kTileW : kTileW;
        for (int64_t r = 0; r < rows; r += tw) {
          const int nr = static_cast<int>(std::min<int64_t>(tw, rows - r));
          float* yt = y + i * m + b0 + r;
          if (fused) K.gemm_w16_tile(w.type, x + i * k, k, w16 + (b0 + r) * k, k, k, yt, m, mr, nr);
          else K.gemm_f32_tile(x + i * k, k, &wbuf[static_cast<size_t>(r * k)], k, k, yt, m, mr, nr);
        }
      }
    }
  });
}

// Quantized weights: activation rows are quantized to Q8_0 once, then each weight row is dotted with groups
// of 4 activation rows (the weight blocks stay in L1 across the group).
void matmul_quantized(ThreadPool& pool, const KernelTable& K, const float* x, int64_t n, const Mat& w, float* y) {
  const int64_t m = w.rows, k = w.cols, nb = k / kQK;
  QVL_CHECK(k % kQK == 0);
  thread_local std::vector<BlockQ8_0> xq;
  xq.resize(static_cast<size_t>(n * nb));
  BlockQ8_0* xqp = xq.data();
  pool.parallel_for(n, 1, [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) K.quantize_q8_0(x + i * k, xqp + i * nb, k);
  });
  pool.parallel_for(m, 16, [&](int, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t i = 0; i < n; i += 4) {
        const int mr = static_cast<int>(std::min<int64_t>(4, n - i));
        if (w.type == WeightType::kQ8_0)
          K.dot_q8_0_rows(static_cast<const BlockQ8_0*>(w.row(j)), xqp + i * nb, nb, y + i * m + j, m, mr);
        else
          K.dot_q4_0_rows(static_cast<const BlockQ4_0*>(w.row(j)), xqp + i * nb, nb, y + i * m + j, m, mr);
      }
    }
  });
}

// Activation rows quantized once per product (quantize_act), reused by every weight group.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

// tile_choice().gemm_row_block activation rows are multiplied with all of a thread's weight groups before
// the next rows: their int8 values (128 x cols bytes) stay in L2 while each group's blocks stream from
// L1/L2 (on Zen 3 and Zen 5, 64 and 256 measured slower than 128 on the vision and prefill shapes).

// Fewer activation rows than this (decode, small batches) stay on the tiles, which are bound by reading
// the weights, not by multiplies: a panel call stages its weights first and computes in 16-row tiles.
constexpr int64_t kPanelMinRows = 16;

// Interleaved quantized weights: the threads take chunks of 8-row groups as they come free; for each block
// of activation rows, each four groups (where the table has such tiles), pair of groups or last single one
// is dotted with 4 activation rows at a time by the integer GEMM tile.
void matmul_interleaved(ThreadPool& pool, const KernelTable& K, const float* x, int64_t n, const Mat& w, float* y) {
  const int64_t m = w.rows, k = w.cols, nb = k / kQK;
  QVL_CHECK(k % kQK == 0 && m % 8 == 0 && (!is_kquant(w.type) || k % kQKK == 0));
  thread_local QuantizedRows xq;
  xq.q.resize(static_cast<size_t>(n * k));
  xq.d.resize(static_cast<size_t>(n * nb));
  xq.sum.resize(static_cast<size_t>(n * nb));
  int8_t* q = xq.q.data();
  float* d = xq.d.data();
  int32_t* s = xq.sum.data();
  pool.parallel_for(n, 4, [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) K.quantize_act(x + i * k, k, q + i * k, d + i * nb, s + i * nb);
  });
  // Tiles of four groups (32 columns) where the table has them, else pairs (16 columns, one 512-bit
  // register per row where the table has them), and a single group last.
  const bool quads = (w.type == WeightType::kQ8_0 && K.gemm_q8_0x32) || (w.type == WeightType::kQ4_0 && K.gemm_q4_0x32);
  const int64_t step = quads ? 4 : 2;
  // Chunks of groups handed out dynamically: about 8 per thread, a multiple of the step, up to 128 rows each.
  const int64_t groups = m / 8;
  const int64_t chunk = std::clamp<int64_t>(groups / (8 * pool.size()) / step * step, step, 16);
  // A table with panel GEMMs (AMX) takes a row block of a pair of groups in one call.
  const bool has_panel = [&] {
    switch (w.type) {
      case WeightType::kQ8_0: return K.gemm_q8_0_panel != nullptr;
      case WeightType::kQ4_0: return K.gemm_q4_0_panel != nullptr;
      case WeightType::kQ4_K: return K.gemm_q4_k_panel != nullptr;
      case WeightType::kQ5_K: return K.gemm_q5_k_panel != nullptr;
      default: return K.gemm_q6_k_panel != nullptr;
    }
  }();
  const int64_t row_block = tile_choice().gemm_row_block;
  pool.parallel_for_dynamic(groups, chunk, [&](int, int64_t g0, int64_t g1) {
    for (int64_t r0 = 0; r0 < n; r0 += row_block) {
      const int64_t r1 = std::min(n, r0 + row_block);
      for (int64_t g = g0; g < g1;) {
        if (has_panel && r1 - r0 >= kPanelMinRows) {
          const void* wg = w.group(g);
          const int groups_now = g + 1 < g1 ? 2 : 1;
          const int8_t* qr = q + r0 * k;
          const float* dr = d + r0 * nb;
          const int32_t* sr = s + r0 * nb;
          float* yr = y + r0 * m + 8 * g;
          switch (w.type) {
            case WeightType::kQ8_0:
              K.gemm_q8_0_panel(static_cast<const BlockQ8_0x8*>(wg), groups_now, qr, dr, sr, nb, r1 - r0, yr, m);
              break;
            case WeightType::kQ4_0:
              K.gemm_q4_0_panel(static_cast<const BlockQ4_0x8*>(wg), groups_now, qr, dr, sr, nb, r1 - r0, yr, m);
              break;
            case WeightType::kQ4_K:
              K.gemm_q4_k_panel(static_cast<const BlockQ4_Kx8*>(wg), groups_now, qr, dr, sr, nb, r1 - r0, yr, m);
              break;
            case WeightType::kQ5_K:
              K.gemm_q5_k_panel(static_cast<const BlockQ5_Kx8*>(wg), groups_now, qr, dr, sr, nb, r1 - r0, yr, m);
              break;
            default:
              K.gemm_q6_k_panel(static_cast<const BlockQ6_Kx8*>(wg), groups_now, qr, dr, sr, nb, r1 - r0, yr, m);
          }
          g += groups_now;
          continue;
        }
        const int span = quads && g + 4 <= g1 ? 4 : g + 2 <= g1 ? 2 : 1;
        const void* wg = w.group(g);
        for (int64_t i = r0; i < r1; i += 4) {
          const int mr = static_cast<int>(std::min<int64_t>(4, r1 - i));
          float* yi = y + i * m + 8 * g;
          const int8_t* qi = q + i * k;
          switch (w.type) {
            case WeightType::kQ8_0:
              (span == 4 ? K.gemm_q8_0x32 : span == 2 ? K.gemm_q8_0x16 : K.gemm_q8_0x8)(
                  static_cast<const BlockQ8_0x8*>(wg), qi, d + i * nb, s + i * nb, nb, yi, m, mr);
              break;
            case WeightType::kQ4_0:
              (span == 4 ? K.gemm_q4_0x32 : span == 2 ? K.gemm_q4_0x16 : K.gemm_q4_0x8)(
                  static_cast<const BlockQ4_0x8*>(wg), qi, d + i * nb, s + i * nb, nb, yi, m, mr);
              break;
            case WeightType::kQ4_K:
              (span == 2 ? K.gemm_q4_kx16 : K.gemm_q4_kx8)(static_cast<const BlockQ4_Kx8*>(wg), qi, d + i * nb, s + i * nb, nb, yi, m, mr);
              break;
            case WeightType::kQ5_K:
              (span == 2 ? K.gemm_q5_kx16 : K.gemm_q5_kx8)(static_cast<const BlockQ5_Kx8*>(wg), qi, d + i * nb, s + i * nb, nb, yi, m, mr);
              break;
            default:
              (span == 2 ? K.gemm_q6_kx16 : K.gemm_q6_kx8)(static_cast<const BlockQ6_Kx8*>(wg), qi, d + i * nb, s + i * nb, nb, yi, m, mr);
          }
        }
        g += span;
      }
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t n, const Mat& w, const float* bias, float* y) {
  matmul_with(kernels(), pool, x, n, w, bias, y);
}

void matmul_with(const KernelTable& K, ThreadPool& pool, const float* x, int64_t n, const Mat& w, const float* bias,
                 float* y) {
  const int64_t m = w.rows;
  QVL_CHECK(w.data != nullptr && m > 0 && w.cols > 0 && n >= 0);
  if (n == 0) return;
  // Interleaved quantized weights (what the loader makes of every quantized matrix with rows % 8 == 0):
  // integer GEMM for any number of rows. Row-ordered quantized weights (other shapes): integer dots for a
  // few rows, else the blocks are widened to float32 once per block of weight rows for the float tiles.
  if (w.layout == Layout::kInterleaved8) {
    matmul_interleaved(pool, K, x, n, w, y);
  } else if (is_block32_quant(w.type) && n <= kMaxRowsForIntegerDots) {
    matmul_quantized(pool, K, x, n, w, y);
  } else {
    matmul_float(pool, K, x, n, w, y);
  }
  if (bias) {
    pool.parallel_for(n, std::max<int64_t>(1, 16384 / m), [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < m; ++j) y[i * m + j] += bias[j];
    });
  }
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

void gelu_tanh(float* x, int64_t n) { kernels().gelu_tanh(x, n); }

void gelu_erf(float* x, int64_t n) {
  // 0.5 * x * (1 + erf(x / sqrt(2)))
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void silu_mul(float* gate, const float* up, int64_t n) { kernels().silu_mul(gate, up, n); }

void softmax(float* x, int64_t n) {
  const float inv = 1.0f / kernels().exp_scaled(x, n, 1.0f);
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

namespace {
// Element-wise work is split in chunks of this many values (about 64 KiB of floats).
constexpr int64_t kChunk = 16384;
}  // namespace

void layer_norm(ThreadPool& pool, const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps,
                float* y) {
  pool.parallel_for(n, std::max<int64_t>(1, kChunk / d), [&](int, int64_t r0, int64_t r1) {
    layer_norm(x + r0 * d, r1 - r0, d, w, b, eps, y + r0 * d);
  });
}

void rms_norm(ThreadPool& pool, const float* x, int64_t n, int64_t d, const float* w, float eps, float* y) {
  pool.parallel_for(n, std::max<int64_t>(1, kChunk / d), [&](int, int64_t r0, int64_t r1) {
    rms_norm(x + r0 * d, r1 - r0, d, w, eps, y + r0 * d);
  });
}

void gelu_tanh(ThreadPool& pool, float* x, int64_t n) {
  pool.parallel_for(n, kChunk, [&](int, int64_t a, int64_t b) { gelu_tanh(x + a, b - a); });
}

void gelu_erf(ThreadPool& pool, float* x, int64_t n) {
  pool.parallel_for(n, kChunk, [&](int, int64_t a, int64_t b) { gelu_erf(x + a, b - a); });
}

void silu_mul(ThreadPool& pool, float* gate, const float* up, int64_t n) {
  pool.parallel_for(n, kChunk, [&](int, int64_t a, int64_t b) { silu_mul(gate + a, up + a, b - a); });
}

void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n) {
  pool.parallel_for(n, kChunk, [&](int, int64_t a, int64_t b) { add_inplace(y + a, x + a, b - a); });
}

}  // namespace qvl
