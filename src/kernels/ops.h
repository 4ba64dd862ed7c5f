// The numeric operations of the forward pass on float32 activations: matrix products against weights
// stored in bf16/f16/f32, norms, activations, softmax and rotary embeddings. Threaded where the work is
// large; every function here is the reference ("generic") version that faster kernels must match.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/quant.h"
#include "util/thread_pool.h"

namespace qvl {

// How a matrix's storage is ordered: row after row, or (quantized types, rows % 8 == 0) groups of 8 rows
// whose blocks are interleaved (BlockQ8_0x8, BlockQ4_0x8, BlockQ4_Kx8, ...) for the integer GEMM kernels.
enum class Layout { kRows, kInterleaved8 };

// A weight matrix [rows, cols] (PyTorch's [out_features, in_features]), not owned: float rows as in the
// checkpoint, rows of quantized blocks, or interleaved groups of 8 such rows.
struct Mat {
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  Layout layout = Layout::kRows;

  bool empty() const { return data == nullptr; }
  // Row r's storage (Layout::kRows only).
  const void* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes(type, cols);
  }
  // The interleaved blocks of rows 8g .. 8g+7 (Layout::kInterleaved8 only): 8 rows' worth of bytes.
  const void* group(int64_t g) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(8 * g) * row_bytes(type, cols);
  }
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes(type, cols); }
  // Converts row r to float32 into out[0, cols).
  void row_to_f32(int64_t r, float* out) const;
};

// y[n, m] = x[n, k] · W[m, k]ᵀ (+ bias[m]). x and y are float32 row-major; bias may be null. Float weights
// are widened to float32 a block of rows at a time; with interleaved quantized weights the activations are
// quantized per block of 32 values (quantize_row_act_ref) and every product is an integer GEMM.
void matmul(ThreadPool& pool, const float* x, int64_t n, const Mat& w, const float* bias, float* y);
// The same on a given kernel table instead of the one in use (tests run the driver on every table).
struct KernelTable;
void matmul_with(const KernelTable& K, ThreadPool& pool, const float* x, int64_t n, const Mat& w, const float* bias,
                 float* y);

// Interleaves a row-ordered quantized matrix (rows % 8 == 0) into `out` (w.bytes() bytes); the result
// views `out`.
Mat interleave8(const Mat& w, void* out);

// LayerNorm over the last dimension d (biased variance, as torch): y = (x - mean) / sqrt(var + eps) * w + b.
void layer_norm(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y);

// RMSNorm (Qwen3): y = w * (x * rsqrt(mean(x²) + eps)).
void rms_norm(const float* x, int64_t n, int64_t d, const float* w, float eps, float* y);

// GELU, tanh approximation (gelu_pytorch_tanh), in place.
void gelu_tanh(float* x, int64_t n);
// GELU, exact erf form (nn.GELU()), in place.
void gelu_erf(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i] (SwiGLU), in place in gate.
void silu_mul(float* gate, const float* up, int64_t n);

// Softmax over x[0, n) in place (max-subtracted, float32 sums).
void softmax(float* x, int64_t n);

// Rotate-half rotary embedding of one head vector x[0, d): x'[j] = x[j]cos[j] - x[j+d/2]sin[j],
// x'[j+d/2] = x[j+d/2]cos[j+d/2] + x[j]sin[j+d/2], with cos/sin of length d.
void rope_rotate_half(float* x, int64_t d, const float* cos, const float* sin);

// y += x over n values.
void add_inplace(float* y, const float* x, int64_t n);

// The same element-wise operations split over the pool's threads (by rows, or by chunks of values).
void layer_norm(ThreadPool& pool, const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y);
void rms_norm(ThreadPool& pool, const float* x, int64_t n, int64_t d, const float* w, float eps, float* y);
void gelu_tanh(ThreadPool& pool, float* x, int64_t n);
void gelu_erf(ThreadPool& pool, float* x, int64_t n);
void silu_mul(ThreadPool& pool, float* gate, const float* up, int64_t n);
void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n);

}  // namespace qvl
