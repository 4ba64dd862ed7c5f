// Quantized weight blocks, GGUF-compatible layouts: Q8_0 (32 int8 + f16 scale = 34 bytes) and Q4_0
// (32 4-bit + f16 scale = 18 bytes), with the reference (scalar) quantize and dequantize that every fast
// kernel must agree with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"
#include "tensor/weight_type.h"

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

// Eight rows of blocks interleaved for the integer GEMM kernels: block b of rows 8g .. 8g+7 is one x8
// block holding the 8 rows' scales, then their values in chunks of 4 consecutive values per row, so that one
// 32-byte load holds 4 values of each of the 8 rows (one int32 lane per row).
// Q8_0x8: qs[32 t + 4 c + j] = q_c[4 t + j] for row c < 8, chunk t < 8, j < 4.
struct BlockQ8_0x8 {
  uint16_t d[8];
  int8_t qs[8 * kQK];
};
static_assert(sizeof(BlockQ8_0x8) == 8 * sizeof(BlockQ8_0), "Q8_0x8 holds exactly 8 Q8_0 blocks");

// Q4_0x8: qs[32 s + 4 c + j] = Q4_0 byte qs_c[4 s + j] (s < 4), i.e. q_c[4 s + j] in the low nibble and
// q_c[16 + 4 s + j] in the high one; values d * (q - 8) as in Q4_0.
struct BlockQ4_0x8 {
  uint16_t d[8];
  uint8_t qs[4 * kQK];
};
static_assert(sizeof(BlockQ4_0x8) == 8 * sizeof(BlockQ4_0), "Q4_0x8 holds exactly 8 Q4_0 blocks");

// Packs 8 rows of nb blocks each (row c at rows + c * nb) into nb interleaved blocks, and back (row c).
void pack_q8_0x8(const BlockQ8_0* rows, int64_t nb, BlockQ8_0x8* out);
void pack_q4_0x8(const BlockQ4_0* rows, int64_t nb, BlockQ4_0x8* out);
void unpack_q8_0x8(const BlockQ8_0x8* in, int c, int64_t nb, BlockQ8_0* row);
void unpack_q4_0x8(const BlockQ4_0x8* in, int c, int64_t nb, BlockQ4_0* row);

// Activations quantized for the integer kernels: per block of 32 values, q = round(x / d) with
// d = amax / 127 kept in float32, and sum = sum(q) (what offsets such as Q4_0's 8 need).
void quantize_row_act_ref(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum);

// GGML's K-quant super-blocks of 256 values (the GGUF layouts, bound straight from a file's mapping).
constexpr int kQKK = 256;

// Q4_K: 8 sub-blocks of 32, x = d * sc[j] * q - dmin * m[j] with q in [0, 15] and 6-bit sc[j], m[j]
// packed in `scales` (kquant_scale_min). Values 64 c + l (l < 32) are the low nibbles of qs[32 c + l],
// values 64 c + 32 + l their high nibbles.
struct BlockQ4_K {
  uint16_t d, dmin;  // f16
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes (GGUF layout)");

// Q5_K: Q4_K with a fifth bit: value v of sub-block j has 16 added where bit j of qh[v % 32] is set.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes (GGUF layout)");

// Q6_K: 16 sub-blocks of 16, x = d * scales[s] * (q - 32) with q in [0, 63]. In half h (128 values), value
// 32 g + l (g < 4, l < 32) has its low 4 bits in ql[64 h + l + 32 (g & 1)] (low nibble for g < 2, high for
// g >= 2) and its high 2 bits at bit 2 g of qh[32 h + l]; its scale is scales[8 h + 2 g + l / 16].
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes (GGUF layout)");

// The 6-bit scale and min of sub-block j < 8 of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4).
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// kquant_scale_min for all 8 sub-blocks at once (out of line, for the kernel files).
void kquant_scales_mins(const uint8_t* q, uint8_t* sc, uint8_t* m);

// Eight rows of K-quant super-blocks interleaved for the integer GEMM tiles, as BlockQ4_0x8 does for Q4_0:
// one 32-byte load holds 4 consecutive values of each of the 8 rows (one int32 lane per row). Each x8
// block is exactly the size of the 8 blocks it holds.
// Q4_Kx8: scales[w][c] = bytes 4w..4w+3 of row c's 12 packed scale bytes (so one load unpacks sub-block j's
// scale or min for all 8 rows); qs[32 (8 p + t) + 4 c + u] = row c's qs[32 p + 4 t + u] (p < 4, t < 8,
// u < 4): low nibbles are values 4t + u of sub-block 2p, high nibbles of sub-block 2p + 1.
struct BlockQ4_Kx8 {
  uint16_t d[8], dmin[8];
  uint32_t scales[3][8];
  uint8_t qs[8 * kQKK / 2];
};
static_assert(sizeof(BlockQ4_Kx8) == 8 * sizeof(BlockQ4_K), "Q4_Kx8 holds exactly 8 Q4_K blocks");

// Q5_Kx8: Q4_Kx8 with qh[32 t + 4 c + u] = row c's qh[4 t + u] (bit j: value 4t + u of sub-block j).
struct BlockQ5_Kx8 {
  uint16_t d[8], dmin[8];
  uint32_t scales[3][8];
  uint8_t qh[8 * kQKK / 8];
  uint8_t qs[8 * kQKK / 2];
};
static_assert(sizeof(BlockQ5_Kx8) == 8 * sizeof(BlockQ5_K), "Q5_Kx8 holds exactly 8 Q5_K blocks");

// Q6_Kx8: scales[8 s + c] = row c's scales[s] (s < 16); ql[32 (8 (2 h + e) + t) + 4 c + u] = row c's
// ql[64 h + 32 e + 4 t + u] (h, e < 2, t < 8: low nibbles are values 4t + u of block 4h + e, high ones of
// block 4h + e + 2); qh[32 (8 h + t) + 4 c + u] = row c's qh[32 h + 4 t + u] (bits 2g, 2g + 1: block 4h + g).
struct BlockQ6_Kx8 {
  uint16_t d[8];
  int8_t scales[8 * 16];
  uint8_t ql[8 * kQKK / 2];
  uint8_t qh[8 * kQKK / 4];
};
static_assert(sizeof(BlockQ6_Kx8) == 8 * sizeof(BlockQ6_K), "Q6_Kx8 holds exactly 8 Q6_K blocks");

// Packs 8 rows of ns super-blocks each (row c at rows + c * ns) into ns interleaved blocks, and back.
void pack_q4_kx8(const BlockQ4_K* rows, int64_t ns, BlockQ4_Kx8* out);
void pack_q5_kx8(const BlockQ5_K* rows, int64_t ns, BlockQ5_Kx8* out);
void pack_q6_kx8(const BlockQ6_K* rows, int64_t ns, BlockQ6_Kx8* out);
void unpack_q4_kx8(const BlockQ4_Kx8* in, int c, int64_t ns, BlockQ4_K* row);
void unpack_q5_kx8(const BlockQ5_Kx8* in, int c, int64_t ns, BlockQ5_K* row);
void unpack_q6_kx8(const BlockQ6_Kx8* in, int c, int64_t ns, BlockQ6_K* row);

// ggml's dequantize_row_q4_K / _q5_K / _q6_K in its float arithmetic and order (cols % 256 == 0).
void dequantize_row_q4_k_ref(const BlockQ4_K* in, float* out, int64_t cols);
void dequantize_row_q5_k_ref(const BlockQ5_K* in, float* out, int64_t cols);
void dequantize_row_q6_k_ref(const BlockQ6_K* in, float* out, int64_t cols);

// Reference quantization of one row (cols % 32 == 0), round to nearest as ggml does:
// Q8_0: d = amax / 127, q = round(x / d); Q4_0: d = max / -8 (the value of largest magnitude, sign kept),
// q = min(15, trunc(x / d + 8.5)).
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* out, int64_t cols);
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* out, int64_t cols);
void dequantize_row_q8_0_ref(const BlockQ8_0* in, float* out, int64_t cols);
void dequantize_row_q4_0_ref(const BlockQ4_0* in, float* out, int64_t cols);

}  // namespace qvl
