// bfloat16 scalars: float32's upper 16 bits. The conversion every table's f32_to_bf16 agrees with bit for
// bit (round to nearest even, NaN kept quiet), and the widening back (exact).
#pragma once

#include <cstdint>
#include <cstring>

namespace qvl {

inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: quiet, sign kept
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace qvl
