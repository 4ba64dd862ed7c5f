// The floating-point storage types of checkpoint tensors and exact bit-level conversions between them.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qvl {

// kU8: raw bytes; qvl stores quantized matrices as U8 rows of blocks (see src/model/quantize_file.h).
enum class DType { kF32, kF16, kBF16, kU8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kU8: return 1;
  }
  return 0;
}

// The spelling used in safetensors headers.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kU8: return "U8";
  }
  return "?";
}

// Parses a safetensors dtype name; false for any dtype qvl does not read.
inline bool dtype_from_name(std::string_view name, DType* out) {
  if (name == "F32") { *out = DType::kF32; return true; }
  if (name == "F16") { *out = DType::kF16; return true; }
  if (name == "BF16") { *out = DType::kBF16; return true; }
  if (name == "U8") { *out = DType::kU8; return true; }
  return false;
}

// bfloat16 is the top half of a float32, so widening is a shift.
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even. A NaN stays a NaN (quiet bit set, so a payload only in the low bits
// cannot turn into infinity); values past the largest bf16 round to infinity as IEEE rounding says.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return std::bit_cast<float>(sign);  // ±0
    // Subnormal: man * 2^-24. Shift the leading one up to the implicit bit, lowering the exponent.
    uint32_t e32 = 127 - 15 + 1;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e32;
    }
    return std::bit_cast<float>(sign | (e32 << 23) | ((man & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

// Round to nearest, ties to even, with half subnormals, overflow to infinity and NaN kept NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // nan
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 (or inf): inf
  const uint32_t e32 = a >> 23;
  if (e32 < 113) {
    // Below 2^-14: the result is a half subnormal, value = m * 2^-24, with m = mantissa >> (126 - e32).
    if (e32 < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e32;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // a carry into bit 10 gives the smallest normal
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent, keep 10 mantissa bits, round on the 13 dropped ones. A carry out of the
  // mantissa bumps the exponent, and from 65520 up it reaches 0x7c00 (infinity), as RNE requires.
  uint32_t h = ((e32 - 112) << 10) | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace qvl
