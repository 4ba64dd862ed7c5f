// The numeric operations of the forward pass on float32 activations: matrix products against weights
// stored in bf16/f16/f32, norms, activations, softmax and rotary embeddings. Threaded where the work is
// large; every function here is the reference ("generic") version that faster kernels must match.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/mat.h"
#include "tensor/quant.h"
#include "util/thread_pool.h"

namespace qvl {

// Converts row r of w to float32 into out[0, w.cols), on the kernel table in use (an interleaved row is
// unpacked first).
void row_to_f32(const Mat& w, int64_t r, float* out);

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
