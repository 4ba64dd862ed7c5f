// The AMX table's panel GEMMs (Intel Xeon from Sapphire Rapids on): q8_0 and q4_0 weights times many
// quantized activation rows on the tile unit, 16 rows x 16 columns per TDPBSSD. The table is the AVX-512
// VNNI table plus these; decode and the few-row products keep its tiles (they are bound by memory, not by
// multiplies).
//
// Arithmetic: as every table's (kernels.h): per block of 32 an exact integer sum, then acc = fma(d_w * d_x,
// isum, acc) per row and column, blocks in order. A TDPBSSD sums over its whole K, so K is one block:
// A = 16 activation rows x 32 bytes, B = one block of 16 weight columns (8 rows of 4 values x 16 columns,
// 64 bytes), C = 16 x 16 int32 sums, stored and scaled on 512-bit registers.
//
// Layout: per call, each block of the one or two weight groups is staged as one B tile (row t: values
// 4t..4t+3 of each of the 16 columns; Q4_0 nibbles widened to u - 8, so the sum needs no correction) with
// its 16 scales as float32; the staging is reused by every 16-row tile of the call.
//
// Everything is a template over the tile instructions (kernels/amx_tiles.h): AmxHardware here, AmxEmulator
// in the tests, which run the same code on machines without AMX. Only these kernels live here;
// dispatch.cpp, compiled for baseline x86-64, builds the table after the CPU, OS and permission checks.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/kernels.h"

namespace qvl {
namespace amx {
namespace {

// The tile instructions themselves (the numbers must be immediates).
struct AmxHardware {
  static void configure(const TileConfig& c) { _tile_loadconfig(&c); }
  static void release() { _tile_release(); }
  template <int T>
  static void load(const void* p, int64_t stride) {
    static_assert(T == 0 || T == 1 || T == 3 || T == 4, "the panel loads A and B tiles only");
    if constexpr (T == 0) _tile_loadd(0, p, stride);
    else if constexpr (T == 1) _tile_loadd(1, p, stride);
    else if constexpr (T == 3) _tile_loadd(3, p, stride);
    else _tile_loadd(4, p, stride);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    static_assert(T == 2 || T == 5, "the panel stores C tiles only");
    if constexpr (T == 2) _tile_stored(2, p, stride);
    else _tile_stored(5, p, stride);
  }
  template <int T>
  static void zero() {
    static_assert(T == 2 || T == 5, "the panel zeroes C tiles only");
    if constexpr (T == 2) _tile_zero(2);
    else _tile_zero(5);
  }
  template <int C, int A, int B>
  static void dpbssd() {
    static_assert((C == 2 && A == 0 && B == 1) || (C == 5 && A == 3 && B == 4), "the panel's two tile sets");
    if constexpr (C == 2) _tile_dpbssd(2, 0, 1);
    else _tile_dpbssd(5, 3, 4);
  }
};

constexpr int kRows = 16;        // activation rows per tile (A and C)
constexpr int kCols = 16;        // weight columns per tile (two groups of 8)
constexpr int kBTileBytes = 512;  // 8 rows x 64 bytes

// Two tile sets, used by alternate blocks so one block's products overlap the other's scaling:
// A tmm0 / tmm3 (rows x 32 bytes), B tmm1 / tmm4 (8 x 64 bytes), C tmm2 / tmm5 (rows x 64 bytes).
TileConfig panel_config(int rows) {
  TileConfig c;
  c.palette_id = 1;
  for (int a : {0, 3}) {
    c.rows[a] = static_cast<uint8_t>(rows);
    c.colsb[a] = kQK;
  }
  for (int b : {1, 4}) {
    c.rows[b] = kQK / 4;
    c.colsb[b] = 4 * kCols;
  }
  for (int s : {2, 5}) {
    c.rows[s] = static_cast<uint8_t>(rows);
    c.colsb[s] = 4 * kCols;
  }
  return c;
}

// The f16 scales of block b of both groups (zero for a missing second group) as 16 floats.
inline void stage_scales(const uint16_t* d0, const uint16_t* d1, float* out) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d0));
  const __m128i b = d1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(d1)) : _mm_setzero_si128();
  _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1)));
}

// Q8_0x8 chunk t (8 rows x 4 values, 32 bytes) of each group is the B tile's row t, halves 0 and 1.
void stage_q8_0(const BlockQ8_0x8* w, int ngroups, int64_t nb, int8_t* bq, float* bd) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0x8* g1 = ngroups == 2 ? &w[nb + b] : nullptr;
    int8_t* dst = bq + b * kBTileBytes;
    for (int t = 0; t < 8; ++t) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * t));
      const __m256i hi = g1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g1->qs + 32 * t)) : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * t), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * t + 32), hi);
    }
    stage_scales(w[b].d, g1 ? g1->d : nullptr, bd + b * kCols);
  }
}

// Q4_0x8 byte 32s + 4c + j holds row c's values 4s + j (low nibble) and 16 + 4s + j (high): B rows s and
// 4 + s, widened to u - 8.
void stage_q4_0(const BlockQ4_0x8* w, int ngroups, int64_t nb, int8_t* bq, float* bd) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_0x8* g1 = ngroups == 2 ? &w[nb + b] : nullptr;
    int8_t* dst = bq + b * kBTileBytes;
    for (int half = 0; half < 2; ++half) {
      const BlockQ4_0x8* g = half == 0 ? &w[b] : g1;
      for (int s = 0; s < 4; ++s) {
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        if (g) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g->qs + 32 * s));
          lo = _mm256_sub_epi8(_mm256_and_si256(v, low4), eight);
          hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), eight);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * s + 32 * half), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * (4 + s) + 32 * half), hi);
      }
    }
    stage_scales(w[b].d, g1 ? g1->d : nullptr, bd + b * kCols);
  }
}

// One tile of rows (<= 16; kFull: 16) activation rows against the staged blocks: y[r * ldy + c] for
// c < cols (8 or 16).
template <class Tiles, bool kFull>
void panel_tile(const int8_t* bq, const float* bd, const int8_t* xq, const float* xd, int64_t nb, int rows, int cols,
                float* y, int64_t ldy) {
  const int64_t k = nb * kQK;
  alignas(64) int32_t c0[kRows][kCols], c1[kRows][kCols];  // [rows, 16] the C tiles' sums
  __m512 acc[kRows];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const auto scale = [&](const int32_t (*c)[kCols], int64_t b) {
    const __m512 dw = _mm512_loadu_ps(bd + b * kCols);
    for (int r = 0; r < kRows; ++r)
      if (kFull || r < rows) {
        const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b]));
        acc[r] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_load_si512(c[r])), acc[r]);
      }
  };
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    Tiles::template load<0>(xq + b * kQK, k);
    Tiles::template load<1>(bq + b * kBTileBytes, 4 * kCols);
    Tiles::template zero<2>();
    Tiles::template dpbssd<2, 0, 1>();
    Tiles::template load<3>(xq + (b + 1) * kQK, k);
    Tiles::template load<4>(bq + (b + 1) * kBTileBytes, 4 * kCols);
    Tiles::template zero<5>();
    Tiles::template dpbssd<5, 3, 4>();
    Tiles::template store<2>(c0, 4 * kCols);
    scale(c0, b);
    Tiles::template store<5>(c1, 4 * kCols);
    scale(c1, b + 1);
  }
  if (b < nb) {
    Tiles::template load<0>(xq + b * kQK, k);
    Tiles::template load<1>(bq + b * kBTileBytes, 4 * kCols);
    Tiles::template zero<2>();
    Tiles::template dpbssd<2, 0, 1>();
    Tiles::template store<2>(c0, 4 * kCols);
    scale(c0, b);
  }
  for (int r = 0; r < kRows; ++r)
    if (kFull || r < rows) {
      if (cols == kCols) _mm512_storeu_ps(y + r * ldy, acc[r]);
      else _mm256_storeu_ps(y + r * ldy, _mm512_castps512_ps256(acc[r]));
    }
}

template <class Tiles, class Block, void (*Stage)(const Block*, int, int64_t, int8_t*, float*)>
void gemm_panel(const Block* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                int64_t n, float* y, int64_t ldy) {
  (void)xsum;  // Q4_0 is staged as u - 8: its sums need no correction
  thread_local std::vector<int8_t> bq;  // [nb, 8, 64] the staged B tiles
  thread_local std::vector<float> bd;   // [nb, 16] their scales
  bq.resize(static_cast<size_t>(nb * kBTileBytes));
  bd.resize(static_cast<size_t>(nb * kCols));
  Stage(w, ngroups, nb, bq.data(), bd.data());
  int configured = 0;
  for (int64_t i = 0; i < n; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, n - i));
    if (rows != configured) {
      Tiles::configure(panel_config(rows));
      configured = rows;
    }
    const int8_t* xi = xq + i * nb * kQK;
    if (rows == kRows) panel_tile<Tiles, true>(bq.data(), bd.data(), xi, xd + i * nb, nb, rows, 8 * ngroups, y + i * ldy, ldy);
    else panel_tile<Tiles, false>(bq.data(), bd.data(), xi, xd + i * nb, nb, rows, 8 * ngroups, y + i * ldy, ldy);
  }
  if (configured) Tiles::release();
}

}  // namespace

void gemm_q8_0_panel(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy) {
  gemm_panel<AmxHardware, BlockQ8_0x8, stage_q8_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q4_0_panel(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy) {
  gemm_panel<AmxHardware, BlockQ4_0x8, stage_q4_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q8_0_panel_emulated(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                              int64_t nb, int64_t n, float* y, int64_t ldy) {
  gemm_panel<AmxEmulator, BlockQ8_0x8, stage_q8_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}
void gemm_q4_0_panel_emulated(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                              int64_t nb, int64_t n, float* y, int64_t ldy) {
  gemm_panel<AmxEmulator, BlockQ4_0x8, stage_q4_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);
}

// The hardware panels against their slow twins on random blocks (every byte value, so every q8_0 value
// and nibble), two full 16-row tiles and a tail of 5, one group and two, an odd and an even block count:
// bit for bit, or the table is not used.
bool panels_match_reference() {
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int64_t nb : {3, 4}) {
    constexpr int64_t n = 2 * kRows + 5;
    std::vector<int8_t> xq(static_cast<size_t>(n * nb * kQK));
    std::vector<float> xd(static_cast<size_t>(n * nb));
    std::vector<int32_t> xsum(static_cast<size_t>(n * nb));
    for (int64_t i = 0; i < n * nb; ++i) {
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) s += xq[static_cast<size_t>(i * kQK + j)] = static_cast<int8_t>(byte(rng) - 128);
      xsum[static_cast<size_t>(i)] = s;
      xd[static_cast<size_t>(i)] = scale(rng);
    }
    std::vector<BlockQ8_0x8> w8(static_cast<size_t>(2 * nb));
    std::vector<BlockQ4_0x8> w4(static_cast<size_t>(2 * nb));
    for (auto& blk : w8) {
      for (auto& q : blk.qs) q = static_cast<int8_t>(byte(rng) - 128);
      for (auto& d : blk.d) d = f32_to_f16(scale(rng));
    }
    for (auto& blk : w4) {
      for (auto& q : blk.qs) q = static_cast<uint8_t>(byte(rng));
      for (auto& d : blk.d) d = f32_to_f16(scale(rng));
    }
    for (int ngroups : {1, 2}) {
      std::vector<float> got(static_cast<size_t>(n * kCols), -1.0f), want = got;
      gemm_q8_0_panel(w8.data(), ngroups, xq.data(), xd.data(), xsum.data(), nb, n, got.data(), kCols);
      gemm_q8_0_panel_ref(w8.data(), ngroups, xq.data(), xd.data(), xsum.data(), nb, n, want.data(), kCols);
      if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) return false;
      gemm_q4_0_panel(w4.data(), ngroups, xq.data(), xd.data(), xsum.data(), nb, n, got.data(), kCols);
      gemm_q4_0_panel_ref(w4.data(), ngroups, xq.data(), xd.data(), xsum.data(), nb, n, want.data(), kCols);
      if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) return false;
    }
  }
  return true;
}

}  // namespace amx
}  // namespace qvl
