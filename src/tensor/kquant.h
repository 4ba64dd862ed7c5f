// Writing GGML's K-quant super-blocks (256 values): Q4_K and Q5_K (8 sub-blocks of 32, 4- or 5-bit values
// with a 6-bit scale and min each under an f16 scale and min of the super-block) and Q6_K (16 sub-blocks of
// 16, 6-bit values with an 8-bit signed scale each under an f16 scale). The layouts are the GGUF format's:
// the weight-type table (tensor/weight_type.h) reads back what these write. The fit is qvl's own: per sub-block a
// least-squares refined scale (and min), then the super-block's scales rounded to their 6/8-bit codes.
#pragma once

#include <cstdint>

#include "tensor/weight_type.h"
#include "util/status.h"

namespace qvl {

// n: a multiple of 256. out: n / 256 blocks (144, 176 or 210 bytes each).
void quantize_row_q4_k(const float* x, uint8_t* out, int64_t n);
void quantize_row_q5_k(const float* x, uint8_t* out, int64_t n);
void quantize_row_q6_k(const float* x, uint8_t* out, int64_t n);

// Any of the three by its type; an error for other types, a row that is not whole super-blocks, or a
// value that is not finite. (The typed writers above keep non-finite input defined but meaningless.)
Status quantize_row_kquant(WeightType type, const float* x, uint8_t* out, int64_t n);

}  // namespace qvl
