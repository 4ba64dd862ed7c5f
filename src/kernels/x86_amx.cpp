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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/amx_tiles.h"
#include "kernels/x86_amx.h"

namespace qvl {
namespace amx {
namespace {

// The tile instructions themselves (the numbers must be immediates).
// GCC 12's ldtilecfg and tileloadd asm statements name only their address, not the memory behind it, as
// input: a compiler barrier first makes every store to the configuration and the staged tiles happen before.
struct AmxHardware {
  static void configure(const TileConfig& c) {
    asm volatile("" ::: "memory");
    _tile_loadconfig(&c);
  }
  static void release() { _tile_release(); }
  template <int T>
  static void load(const void* p, int64_t stride) {
    static_assert(T == 0 || T == 1 || T == 3 || T == 4, "the panel loads A and B tiles only");
    asm volatile("" ::: "memory");
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

constexpr int kRows = 16;         // activation rows per tile (A and C)
constexpr int kCols = 16;         // weight columns per tile (two groups of 8)
constexpr int kBTileBytes = 512;  // one block of 16 columns: 8 rows x 64 bytes

// How a weight type's block sums become floats (kernels.h): q8_0/q4_0 acc = fma(d xd, C, acc); Q4_K/Q5_K
// acc = fma(d xd, sc C, acc), acc = fma(-(dmin xd), m xsum, acc); Q6_K sums its two halves of 16 values
// (each its own product, K 16 bytes) as sc1 C1 + sc2 C2, then acc = fma(d xd, isum, acc).
enum class Kind { kQ0, kQ45K, kQ6K };

// Per block b of the call's one or two groups (a missing second group staged as zeros), in buffers that
// only grow. Plain arrays: a std::vector instantiated in this file (compiled for AVX-512) could be the copy
// the linker keeps for all code.
struct Staged {
  int8_t* q = nullptr;     // [nb, 8, 64] B tiles: row t = values 4t..4t+3 of each of the 16 columns
  float* d = nullptr;      // [nb, 16] the block's (or super-block's) d
  float* dmin = nullptr;   // [nb, 16] Q4_K/Q5_K: the super-block's dmin
  int32_t* sc = nullptr;   // [nb, 16] Q4_K/Q5_K: sub-block scale; Q6_K: the first half's scale
  int32_t* sc2 = nullptr;  // [nb, 16] Q4_K/Q5_K: sub-block min; Q6_K: the second half's scale
  int64_t capacity = 0;    // blocks
  void* mem = nullptr;

  Staged() = default;
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  ~Staged() { std::free(mem); }
  void reserve(int64_t nb) {
    if (nb <= capacity) return;
    std::free(mem);
    const size_t per_block = kBTileBytes + 2 * kCols * sizeof(float) + 2 * kCols * sizeof(int32_t);
    mem = std::aligned_alloc(64, static_cast<size_t>(nb) * per_block);
    if (!mem) {
      std::fputs("qvl: out of memory staging AMX weight tiles\n", stderr);
      std::abort();
    }
    capacity = nb;
    q = static_cast<int8_t*>(mem);
    d = reinterpret_cast<float*>(q + nb * kBTileBytes);
    dmin = d + nb * kCols;
    sc = reinterpret_cast<int32_t*>(dmin + nb * kCols);
    sc2 = sc + nb * kCols;
  }
};

// Two tile sets, used by alternate products so one's scaling overlaps the other's multiplies: A tmm0 /
// tmm3 (rows x kbytes), B tmm1 / tmm4 (kbytes / 4 x 64), C tmm2 / tmm5 (rows x 64). kbytes is 32 (a
// block), 16 for Q6_K (half a block).
TileConfig panel_config(int rows, int kbytes) {
  TileConfig c;
  c.palette_id = 1;
  for (int a : {0, 3}) {
    c.rows[a] = static_cast<uint8_t>(rows);
    c.colsb[a] = static_cast<uint16_t>(kbytes);
  }
  for (int b : {1, 4}) {
    c.rows[b] = static_cast<uint8_t>(kbytes / 4);
    c.colsb[b] = 4 * kCols;
  }
  for (int s : {2, 5}) {
    c.rows[s] = static_cast<uint8_t>(rows);
    c.colsb[s] = 4 * kCols;
  }
  return c;
}

// The f16 scales of both groups (zero for a missing second group) as 16 floats.
inline void stage_f16(const uint16_t* d0, const uint16_t* d1, float* out) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d0));
  const __m128i b = d1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(d1)) : _mm_setzero_si128();
  _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1)));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store32(int8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// Q8_0x8 chunk t (8 rows x 4 values, 32 bytes) of each group is the B tile's row t, halves 0 and 1.
void stage_q8_0(const BlockQ8_0x8* w, int ngroups, int64_t nb, Staged& st) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0x8* g1 = ngroups == 2 ? &w[nb + b] : nullptr;
    int8_t* dst = st.q + b * kBTileBytes;
    for (int t = 0; t < 8; ++t) {
      store32(dst + 64 * t, load32(w[b].qs + 32 * t));
      store32(dst + 64 * t + 32, g1 ? load32(g1->qs + 32 * t) : _mm256_setzero_si256());
    }
    stage_f16(w[b].d, g1 ? g1->d : nullptr, &st.d[b * kCols]);
  }
}

// Q4_0x8 byte 32s + 4c + j holds row c's values 4s + j (low nibble) and 16 + 4s + j (high): B rows s and
// 4 + s, widened to u - 8 (so the sums need no correction).
void stage_q4_0(const BlockQ4_0x8* w, int ngroups, int64_t nb, Staged& st) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_0x8* g1 = ngroups == 2 ? &w[nb + b] : nullptr;
    int8_t* dst = st.q + b * kBTileBytes;
    for (int half = 0; half < 2; ++half) {
      const BlockQ4_0x8* g = half == 0 ? &w[b] : g1;
      for (int s = 0; s < 4; ++s) {
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        if (g) {
          const __m256i v = load32(g->qs + 32 * s);
          lo = _mm256_sub_epi8(_mm256_and_si256(v, low4), eight);
          hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), eight);
        }
        store32(dst + 64 * s + 32 * half, lo);
        store32(dst + 64 * (4 + s) + 32 * half, hi);
      }
    }
    stage_f16(w[b].d, g1 ? g1->d : nullptr, &st.d[b * kCols]);
  }
}

// Q4_Kx8 / Q5_Kx8 (tensor/quant.h): sub-block j's value 4t + u of row c is a nibble of qs[32 (8 (j / 2) +
// t) + 4 c + u] (low for even j), plus 16 where bit j of qh[32 t + 4 c + u] is set (Q5_K): B row t.
template <class Block>
void stage_q45_k(const Block* w, int ngroups, int64_t nb, Staged& st) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_Kx8>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const int64_t ns = nb / 8;
  for (int64_t s = 0; s < ns; ++s)
    for (int half = 0; half < 2; ++half) {
      const Block* blk = half == 0 ? &w[s] : ngroups == 2 ? &w[ns + s] : nullptr;
      float d[8] = {}, dmin[8] = {};
      uint8_t sc[8][8] = {}, mins[8][8] = {};  // [column, sub-block]
      if (blk)
        for (int c = 0; c < 8; ++c) {
          d[c] = f16_to_f32(blk->d[c]);
          dmin[c] = f16_to_f32(blk->dmin[c]);
          uint8_t packed[12];
          for (int k = 0; k < 3; ++k) std::memcpy(packed + 4 * k, &blk->scales[k][c], 4);
          kquant_scales_mins(packed, sc[c], mins[c]);
        }
      for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * s + j;
        int8_t* dst = st.q + b * kBTileBytes + 32 * half;
        for (int t = 0; t < 8; ++t) {
          __m256i v = _mm256_setzero_si256();
          if (blk) {
            const __m256i bytes = load32(blk->qs + 32 * (8 * (j / 2) + t));
            v = _mm256_and_si256(j % 2 == 0 ? bytes : _mm256_srli_epi16(bytes, 4), low4);
            if constexpr (kQ5) {
              const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(load32(blk->qh + 32 * t), _mm_cvtsi32_si128(j)), one);
              v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
            }
          }
          store32(dst + 64 * t, v);
        }
        for (int c = 0; c < 8; ++c) {
          const size_t at = static_cast<size_t>(b * kCols + 8 * half + c);
          st.d[at] = d[c];
          st.dmin[at] = dmin[c];
          st.sc[at] = sc[c][j];
          st.sc2[at] = mins[c][j];
        }
      }
    }
}

// Q6_Kx8: block j (half h = j / 4, g = j % 4, pair e = g % 2) of row c: low 4 bits a nibble of
// ql[32 (8 (2h + e) + t) + 4 c + u] (low for g < 2), top 2 bits at bit 2g of qh[32 (8h + t) + 4 c + u];
// widened to q - 32. Values 0-15 (B rows 0-3) take scale 2j, 16-31 (rows 4-7) scale 2j + 1.
void stage_q6_k(const BlockQ6_Kx8* w, int ngroups, int64_t nb, Staged& st) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  const int64_t ns = nb / 8;
  for (int64_t s = 0; s < ns; ++s)
    for (int half = 0; half < 2; ++half) {
      const BlockQ6_Kx8* blk = half == 0 ? &w[s] : ngroups == 2 ? &w[ns + s] : nullptr;
      for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * s + j;
        const int h = j / 4, g = j % 4, e = g % 2;
        int8_t* dst = st.q + b * kBTileBytes + 32 * half;
        for (int t = 0; t < 8; ++t) {
          __m256i v = _mm256_setzero_si256();
          if (blk) {
            const __m256i lo = load32(blk->ql + 32 * (8 * (2 * h + e) + t));
            const __m256i low = _mm256_and_si256(g < 2 ? lo : _mm256_srli_epi16(lo, 4), low4);
            const __m256i top =
                _mm256_and_si256(_mm256_srl_epi16(load32(blk->qh + 32 * (8 * h + t)), _mm_cvtsi32_si128(2 * g)), three);
            v = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(top, 4)), bias);
          }
          store32(dst + 64 * t, v);
        }
        for (int c = 0; c < 8; ++c) {
          const size_t at = static_cast<size_t>(b * kCols + 8 * half + c);
          st.d[at] = blk ? f16_to_f32(blk->d[c]) : 0.0f;
          st.sc[at] = blk ? blk->scales[8 * (2 * j) + c] : 0;
          st.sc2[at] = blk ? blk->scales[8 * (2 * j + 1) + c] : 0;
        }
      }
    }
}

// One tile of rows (<= 16; kFull: 16) activation rows against the staged blocks: y[r * ldy + c] for
// c < cols (8 or 16). Activation row r is xq + r * nb * 32, its scales xd + r * nb, sums xsum + r * nb.
template <class Tiles, Kind kKind, bool kFull>
void panel_tile(const Staged& st, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, int rows, int cols,
                float* y, int64_t ldy) {
  const int64_t k = nb * kQK;
  alignas(64) int32_t c0[kRows][kCols], c1[kRows][kCols];  // [rows, 16] the C tiles' sums
  __m512 acc[kRows];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  // Block b's scaling, from its sums c (Q6_K: c the first half's, c2 the second's).
  const auto scale = [&](const int32_t (*c)[kCols], const int32_t (*c2)[kCols], int64_t b) {
    const size_t at = static_cast<size_t>(b * kCols);
    const __m512 dw = _mm512_loadu_ps(&st.d[at]);
    for (int r = 0; r < kRows; ++r)
      if (kFull || r < rows) {
        const __m512 dx = _mm512_set1_ps(xd[r * nb + b]);
        __m512i isum = _mm512_load_si512(c[r]);
        if constexpr (kKind == Kind::kQ45K) {
          isum = _mm512_mullo_epi32(_mm512_loadu_si512(&st.sc[at]), isum);
        } else if constexpr (kKind == Kind::kQ6K) {
          isum = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_loadu_si512(&st.sc[at]), isum),
                                  _mm512_mullo_epi32(_mm512_loadu_si512(&st.sc2[at]), _mm512_load_si512(c2[r])));
        }
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum), acc[r]);
        if constexpr (kKind == Kind::kQ45K) {
          const __m512i msum = _mm512_mullo_epi32(_mm512_loadu_si512(&st.sc2[at]), _mm512_set1_epi32(xsum[r * nb + b]));
          acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(&st.dmin[at]), dx), _mm512_cvtepi32_ps(msum), acc[r]);
        }
      }
  };
  const int8_t* bq = st.q;
  if constexpr (kKind == Kind::kQ6K) {
    // Each block's two halves (16 values) on the two tile sets.
    for (int64_t b = 0; b < nb; ++b) {
      Tiles::template load<0>(xq + b * kQK, k);
      Tiles::template load<1>(bq + b * kBTileBytes, 4 * kCols);
      Tiles::template zero<2>();
      Tiles::template dpbssd<2, 0, 1>();
      Tiles::template load<3>(xq + b * kQK + kQK / 2, k);
      Tiles::template load<4>(bq + b * kBTileBytes + kBTileBytes / 2, 4 * kCols);
      Tiles::template zero<5>();
      Tiles::template dpbssd<5, 3, 4>();
      Tiles::template store<2>(c0, 4 * kCols);
      Tiles::template store<5>(c1, 4 * kCols);
      scale(c0, c1, b);
    }
  } else {
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
      scale(c0, nullptr, b);
      Tiles::template store<5>(c1, 4 * kCols);
      scale(c1, nullptr, b + 1);
    }
    if (b < nb) {
      Tiles::template load<0>(xq + b * kQK, k);
      Tiles::template load<1>(bq + b * kBTileBytes, 4 * kCols);
      Tiles::template zero<2>();
      Tiles::template dpbssd<2, 0, 1>();
      Tiles::template store<2>(c0, 4 * kCols);
      scale(c0, nullptr, b);
    }
  }
  for (int r = 0; r < kRows; ++r)
    if (kFull || r < rows) {
      if (cols == kCols) _mm512_storeu_ps(y + r * ldy, acc[r]);
      else _mm256_storeu_ps(y + r * ldy, _mm512_castps512_ps256(acc[r]));
    }
}

template <class Tiles, Kind kKind, class Block, void (*Stage)(const Block*, int, int64_t, Staged&)>
void gemm_panel(const Block* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                int64_t n, float* y, int64_t ldy) {
  thread_local Staged st;
  st.reserve(nb);
  Stage(w, ngroups, nb, st);
  const int kbytes = kKind == Kind::kQ6K ? kQK / 2 : kQK;
  int configured = 0;
  for (int64_t i = 0; i < n; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, n - i));
    if (rows != configured) {
      Tiles::configure(panel_config(rows, kbytes));
      configured = rows;
    }
    const int8_t* xi = xq + i * nb * kQK;
    if (rows == kRows)
      panel_tile<Tiles, kKind, true>(st, xi, xd + i * nb, xsum + i * nb, nb, rows, 8 * ngroups, y + i * ldy, ldy);
    else
      panel_tile<Tiles, kKind, false>(st, xi, xd + i * nb, xsum + i * nb, nb, rows, 8 * ngroups, y + i * ldy, ldy);
  }
  if (configured) Tiles::release();
}

}  // namespace

#define QVL_AMX_PANELS(SUFFIX, TILES)                                                                                   \
  void gemm_q8_0_panel##SUFFIX(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd,                   \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy) {                    \
    gemm_panel<TILES, Kind::kQ0, BlockQ8_0x8, stage_q8_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);                     \
  }                                                                                                                     \
  void gemm_q4_0_panel##SUFFIX(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd,                   \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy) {                    \
    gemm_panel<TILES, Kind::kQ0, BlockQ4_0x8, stage_q4_0>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);                     \
  }                                                                                                                     \
  void gemm_q4_k_panel##SUFFIX(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd,                   \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy) {                    \
    gemm_panel<TILES, Kind::kQ45K, BlockQ4_Kx8, stage_q45_k<BlockQ4_Kx8>>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);     \
  }                                                                                                                     \
  void gemm_q5_k_panel##SUFFIX(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd,                   \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy) {                    \
    gemm_panel<TILES, Kind::kQ45K, BlockQ5_Kx8, stage_q45_k<BlockQ5_Kx8>>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);     \
  }                                                                                                                     \
  void gemm_q6_k_panel##SUFFIX(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd,                   \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy) {                    \
    gemm_panel<TILES, Kind::kQ6K, BlockQ6_Kx8, stage_q6_k>(w, ngroups, xq, xd, xsum, nb, n, y, ldy);                    \
  }
QVL_AMX_PANELS(, AmxHardware)
QVL_AMX_PANELS(_emulated, AmxEmulator)
#undef QVL_AMX_PANELS

}  // namespace amx
}  // namespace qvl
