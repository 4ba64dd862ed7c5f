// Quantized weight blocks, GGUF-compatible layouts: Q8_0 (32 int8 + f16 scale = 34 bytes) and Q4_0
// (32 4-bit + f16 scale = 18 bytes), with the reference (scalar) quantize and dequantize that every fast
// kernel must agree with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace qvl {

constexpr int kQK = 32;  // values per block

// x[i] = d * qs[i]
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes (GGUF layout)");

// x[i] = d * (q[i] - 8), q[i] in [0, 15]; qs[j] holds q[j] in its low nibble and q[j + 16] in its high one.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes (GGUF layout)");

// The storage of a weight matrix: float types as in the checkpoint, or quantized blocks along each row.
enum class WeightType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };

inline WeightType weight_type_of(DType t) {
  switch (t) {
    case DType::kF32: return WeightType::kF32;
    case DType::kF16: return WeightType::kF16;
    case DType::kBF16: return WeightType::kBF16;
    case DType::kU8: break;  // raw blocks: the type comes from the file's metadata
  }
  return WeightType::kF32;
}
const char* weight_type_name(WeightType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0"; false otherwise.
bool weight_type_from_name(const std::string& name, WeightType* out);
inline bool is_quantized(WeightType t) { return t == WeightType::kQ8_0 || t == WeightType::kQ4_0; }

// Bytes of one row of `cols` values (cols a multiple of 32 for the block types).
size_t row_bytes(WeightType t, int64_t cols);

// Reference quantization of one row (cols % 32 == 0), round to nearest as ggml does:
// Q8_0: d = amax / 127, q = round(x / d); Q4_0: d = max / -8 (the value of largest magnitude, sign kept),
// q = min(15, trunc(x / d + 8.5)).
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* out, int64_t cols);
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* out, int64_t cols);
void dequantize_row_q8_0_ref(const BlockQ8_0* in, float* out, int64_t cols);
void dequantize_row_q4_0_ref(const BlockQ4_0* in, float* out, int64_t cols);

}  // namespace qvl
