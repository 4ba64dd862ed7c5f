// Scaled dot-product attention of one head, tiled over query rows so that long image sequences never
// materialise the full score matrix: scores and probabilities exist for kQueryBlock rows at a time.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace qvl {

namespace {
// 72 query rows (a multiple of every table's tile rows) x n_kv scores: 72 x 3136 floats = 882 KiB for a
// 1024x768 image's 3072+ patches.
constexpr int64_t kQueryBlock = 72;
// attention_head packs v in panels for at least this many query rows (a copy of v per call, which text.cpp makes
// per query head and row chunk: at 64 rows it is under 2 % of P · v's work) and values of v (512 KiB: an L2).
constexpr int64_t kMinRowsForVPanels = 64, kMinValuesForVPanels = 128 * 1024;

// A row tile against `panels` full panels of B (panel_stride floats apart, rows ldb apart): the table's
// gemm_f32_nn_panels where it has one, else its slow twin, the loop over gemm_f32_nn_tile.
void nn_panels(const KernelTable& K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t panel_stride,
               int64_t k, float* c, int64_t ldc, int mr, int64_t panels) {
  if (K.gemm_f32_nn_panels) return K.gemm_f32_nn_panels(a, lda, b, ldb, panel_stride, k, c, ldc, mr, panels);
  for (int64_t p = 0; p < panels; ++p)
    K.gemm_f32_nn_tile(a, lda, b + p * panel_stride, ldb, k, c + p * K.nn_cols, ldc, mr, K.nn_cols);
}
// softmax(scores * scale) over each of a query block's rows' visible keys (rows q0.. of the call), the rest up
// to kv_end 0: exp in place, and 1 / the row's sum into inv_sum, for its output row after P · v (one multiply
// per output value, not per score).
void softmax_rows(const KernelTable& K, float* sc, int64_t lds, int64_t rows, int64_t q0, int64_t causal_offset,
                  int64_t n_kv, int64_t kv_end, float scale, float* inv_sum) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t limit = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + i + 1) : n_kv;
    float* row = sc + i * lds;
    inv_sum[i] = 1.0f / K.exp_scaled(row, limit, scale);
    std::fill(row + limit, row + kv_end, 0.0f);
  }
}
}  // namespace

void attention_head(const float* q, int64_t ldq, int64_t nq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                    AttentionScratch& s, bool row_invariant, const float* kt) {
  const KernelTable& K = kernels();
  // Both products run on row-times-panel tiles (tile_rows query rows x tile_cols columns of B, the kernel table's
  // sizes): q · kᵀ with kᵀ in panels (tile_cols keys per panel row), P · v with v's rows or panels.
  const int tile_rows = K.nn_rows, tile_cols = K.nn_cols;
  // q · kᵀ on kᵀ panels: given (the KV cache's layout), or packed here for many queries or row invariance.
  // Otherwise (few queries, no panels: a decode step outside the text decoder) as dot products with k's
  // rows, whose transposition would cost more than the product.
  const bool panels_k = kt != nullptr || row_invariant || nq >= tile_rows;
  const bool pack_k = panels_k && kt == nullptr;
  const int64_t panels = (n_kv + tile_cols - 1) / tile_cols;
  // Score rows padded to whole panels, so every tile is full; the padding is never read.
  const int64_t lds = panels * tile_cols;
  s.scores.resize(static_cast<size_t>(std::min(nq, kQueryBlock) * lds));
  if (pack_k) {
    // kt[p][t][c] = k[tile_cols p + c][t]; only the last panel has columns past n_kv, zeroed.
    s.kt.resize(static_cast<size_t>(panels * head_dim * tile_cols));
    std::fill(s.kt.end() - head_dim * tile_cols, s.kt.end(), 0.0f);
    for (int64_t j = 0; j < n_kv; ++j) {
      float* dst = &s.kt[static_cast<size_t>((j / tile_cols) * head_dim * tile_cols + j % tile_cols)];
      for (int64_t d = 0; d < head_dim; ++d) dst[d * tile_cols] = k[j * ldk + d];
    }
    kt = s.kt.data();
  }
  // P · v reads v a panel of tile_cols columns at a time, key after key. Many queries against a v larger than an
  // L2 (512 KiB): v packed in such panels, each a contiguous run of its columns per key, as flash attention packs
  // it below (2b prefill of 3,498 tokens on a Zen 2: attention 14.4 -> 12.6 s; at 702 and 222 tokens, whose v
  // stays in L2, the packing cost 1-3 % instead). Otherwise v's rows, packed only when far apart. The sums are
  // the same either way.
  const bool v_panels = nq >= kMinRowsForVPanels && n_kv * head_dim >= kMinValuesForVPanels;
  const float* vp = v;
  int64_t ldvp = ldv;
  if (v_panels) {
    s.vc.resize(static_cast<size_t>(n_kv * head_dim));
    for (int64_t c0 = 0; c0 < head_dim; c0 += tile_cols) {
      const int64_t w = std::min<int64_t>(tile_cols, head_dim - c0);
      float* panel = &s.vc[static_cast<size_t>(c0 * n_kv)];
      for (int64_t j = 0; j < n_kv; ++j) std::copy(v + j * ldv + c0, v + j * ldv + c0 + w, panel + j * w);
    }
    vp = s.vc.data();
  } else if (ldv != head_dim) {
    s.vc.resize(static_cast<size_t>(n_kv * head_dim));
    for (int64_t j = 0; j < n_kv; ++j)
      std::copy(v + j * ldv, v + j * ldv + head_dim, &s.vc[static_cast<size_t>(j * head_dim)]);
    vp = s.vc.data();
    ldvp = head_dim;
  }
  for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, nq - q0);
    // Keys any row of this block may see.
    const int64_t kv_end = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + rows) : n_kv;
    float* sc = s.scores.data();
    // scores = q · kᵀ
    if (panels_k) {
      for (int64_t i = 0; i < rows; i += tile_rows) {
        const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
        nn_panels(K, q + (q0 + i) * ldq, ldq, kt, tile_cols, head_dim * tile_cols, head_dim, sc + i * lds, lds, mr,
                  (kv_end + tile_cols - 1) / tile_cols);
      }
    } else {
      for (int64_t i = 0; i < rows; i += 4) {
        const int mr = static_cast<int>(std::min<int64_t>(4, rows - i));
        for (int64_t j = 0; j < kv_end; j += 3) {
          const int nr = static_cast<int>(std::min<int64_t>(3, kv_end - j));
          K.gemm_f32_tile(q + (q0 + i) * ldq, ldq, k + j * ldk, ldk, head_dim, sc + i * lds + j, lds, mr, nr);
        }
      }
    }
    // softmax(scores * scale) over each row's visible keys, the rest 0: exp here, the division by the
    // row's sum applied to its output row after P · v (one multiply per output value, not per score).
    float inv_sum[kQueryBlock];
    softmax_rows(K, sc, lds, rows, q0, causal_offset, n_kv, kv_end, scale, inv_sum);
    // out = P · v: the full column panels in one call (a decode step's row runs several at once), then a
    // partial one (head_dim not a multiple of tile_cols).
    const int64_t full = head_dim / tile_cols;
    for (int64_t i = 0; i < rows; i += tile_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
      float* o = out + (q0 + i) * ldo;
      if (v_panels) nn_panels(K, sc + i * lds, lds, vp, tile_cols, tile_cols * n_kv, kv_end, o, ldo, mr, full);
      else nn_panels(K, sc + i * lds, lds, vp, ldvp, tile_cols, kv_end, o, ldo, mr, full);
      if (const int64_t d = full * tile_cols; d < head_dim) {
        const int nc = static_cast<int>(head_dim - d);
        K.gemm_f32_nn_tile(sc + i * lds, lds, v_panels ? vp + d * n_kv : vp + d, v_panels ? nc : ldvp, kv_end, o + d, ldo,
                           mr, nc);
      }
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < head_dim; ++d) out[(q0 + i) * ldo + d] *= inv_sum[i];
  }
}

bool attention_f16_supported(int64_t head_dim) {
  const KernelTable& K = kernels();
  return K.gemm_f16_nn_panels != nullptr && head_dim % K.nn_cols == 0;
}

void attention_head_f16(const float* q, int64_t ldq, int64_t nq, const uint16_t* kt, const uint16_t* v, int64_t ldv,
                        int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                        AttentionScratch& s) {
  QVL_CHECK(attention_f16_supported(head_dim));
  const KernelTable& K = kernels();
  // attention_head's steps for row_invariant with kt given and v's rows, in the same order (so the same bits).
  const int tile_rows = K.nn_rows, tile_cols = K.nn_cols;
  const int64_t panels = (n_kv + tile_cols - 1) / tile_cols, lds = panels * tile_cols;
  s.scores.resize(static_cast<size_t>(std::min(nq, kQueryBlock) * lds));
  for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, nq - q0);
    const int64_t kv_end = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + rows) : n_kv;
    float* sc = s.scores.data();
    for (int64_t i = 0; i < rows; i += tile_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
      K.gemm_f16_nn_panels(q + (q0 + i) * ldq, ldq, kt, tile_cols, head_dim * tile_cols, head_dim, sc + i * lds, lds, mr,
                           (kv_end + tile_cols - 1) / tile_cols);
    }
    float inv_sum[kQueryBlock];
    softmax_rows(K, sc, lds, rows, q0, causal_offset, n_kv, kv_end, scale, inv_sum);
    for (int64_t i = 0; i < rows; i += tile_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
      K.gemm_f16_nn_panels(sc + i * lds, lds, v, ldv, tile_cols, kv_end, out + (q0 + i) * ldo, ldo, mr,
                           head_dim / tile_cols);
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < head_dim; ++d) out[(q0 + i) * ldo + d] *= inv_sum[i];
  }
}

// ---- Flash attention over many queries --------------------------------------------------------------------

const char* attention_precision_name(AttentionPrecision p) { return p == AttentionPrecision::kBF16 ? "bf16" : "f32"; }

bool parse_attention_precision(const std::string& text, AttentionPrecision* out) {
  if (text == "f32") *out = AttentionPrecision::kF32;
  else if (text == "bf16") *out = AttentionPrecision::kBF16;
  else return false;
  return true;
}

AttentionPrecision effective_attention_precision(AttentionPrecision p, const KernelTable* table) {
  const KernelTable& K = table ? *table : kernels();
  return p == AttentionPrecision::kBF16 && K.gemm_bf16_nn_tile && K.exp_scaled_from_bf16 ? AttentionPrecision::kBF16
                                                                                          : AttentionPrecision::kF32;
}

size_t FlashScratch::bytes() const {
  size_t b = kt.capacity() * 4 + v.capacity() * 4 + kt2.capacity() * 2 + v2.capacity() * 2;
  for (const FlashThreadScratch& t : threads)
    b += (t.s.capacity() + t.o.capacity() + t.pv.capacity() + t.m.capacity() + t.l.capacity() + t.qf.capacity()) * 4 +
         (t.qb.capacity() + t.pb.capacity() + t.row.capacity()) * 2;
  return b;
}

namespace {

// Key blocks are cut at multiples of this many keys: every table's panel width divides it.
constexpr int64_t kGranule = 64;

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// Packs keys [j0, j1) of head h (j0, j1 multiples of the panel width tc, j1 rounded up past n: keys past n
// are zero): f32 kᵀ panels and v column panels, or their bf16 pairs.
void pack_keys(const KernelTable& K, const float* k, const float* v, int64_t ld, int64_t n, int64_t hd, int64_t h,
               int64_t j0, int64_t j1, int64_t panels, bool bf16, FlashScratch& s, std::vector<uint16_t>& row) {
  const int64_t tc = K.nn_cols;
  if (!bf16) {
    float* kt = &s.kt[static_cast<size_t>(h * panels * hd * tc)];
    float* vh = &s.v[static_cast<size_t>(h * n * hd)];
    for (int64_t j = j0; j < j1; ++j) {
      float* dst = kt + (j / tc) * hd * tc + j % tc;  // kt[p][d][c] = k[p tc + c][d]
      if (j >= n) {
        for (int64_t d = 0; d < hd; ++d) dst[d * tc] = 0.0f;
        continue;
      }
      const float* kr = k + j * ld + h * hd;
      for (int64_t d = 0; d < hd; ++d) dst[d * tc] = kr[d];
      // Panel p (columns [p tc, p tc + w), w = min(tc, hd - p tc)) at vh + p tc n: v[j][p tc + c] at j w + c.
      const float* vr = v + j * ld + h * hd;
      for (int64_t c0 = 0; c0 < hd; c0 += tc) {
        const int64_t w = std::min(tc, hd - c0);
        std::copy(vr + c0, vr + c0 + w, vh + c0 * n + j * w);
      }
    }
    return;
  }
  // bf16: kt2[p][t][c] = (k[p tc + c][2t], k[p tc + c][2t + 1]); v2[j / 2][d] = (v[j][d], v[j + 1][d]).
  grow(row, hd);
  const int64_t pairs = (n + 1) / 2;
  uint16_t* kt = &s.kt2[static_cast<size_t>(h * panels * hd * tc)];
  uint16_t* vh = &s.v2[static_cast<size_t>(h * pairs * 2 * hd)];
  for (int64_t j = j0; j < j1; ++j) {
    uint16_t* dst = kt + (j / tc) * hd * tc + 2 * (j % tc);  // element (t, c, e) at (t tc + c) 2 + e
    if (j < n) K.f32_to_bf16(k + j * ld + h * hd, row.data(), hd);
    else std::fill(row.begin(), row.begin() + hd, uint16_t{0});
    for (int64_t t = 0; t < hd / 2; ++t) {
      dst[t * 2 * tc] = row[static_cast<size_t>(2 * t)];
      dst[t * 2 * tc + 1] = row[static_cast<size_t>(2 * t + 1)];
    }
    if (j >= (pairs * 2)) continue;
    if (j < n) K.f32_to_bf16(v + j * ld + h * hd, row.data(), hd);
    else std::fill(row.begin(), row.begin() + hd, uint16_t{0});
    uint16_t* vd = vh + (j / 2) * 2 * hd + (j % 2);
    for (int64_t d = 0; d < hd; ++d) vd[2 * d] = row[static_cast<size_t>(d)];
  }
}

// o = o * a + pv (the compiler's vectors: attention.cpp is built with -O3).
void rescale_add(float* __restrict o, const float* __restrict pv, float a, int64_t n) {
  for (int64_t d = 0; d < n; ++d) o[d] = o[d] * a + pv[d];
}

// One task: query rows [q0, q0 + rows) of head h against every key, kv_block keys at a time.
void flash_rows(const KernelTable& K, const float* q, int64_t ld, int64_t n, int64_t hd, int64_t h, int64_t q0,
                int64_t rows, float scale, float* out, int64_t ldo, bool bf16, int64_t Bq, int64_t Bk, int64_t blocks,
                int64_t granules, const FlashScratch& s, FlashThreadScratch& t) {
  const int64_t tr = K.nn_rows, tc = K.nn_cols, panels = (n + tc - 1) / tc, pairs = (n + 1) / 2;
  grow(t.s, Bq * Bk);
  grow(t.o, Bq * hd);
  grow(t.pv, Bq * hd);
  grow(t.m, Bq);
  grow(t.l, Bq);
  float* S = t.s.data();    // [rows, Bk]
  float* O = t.o.data();    // [rows, hd]
  float* PV = t.pv.data();  // [rows, hd]
  // The block's queries packed together (their rows are 3 D floats apart in the fused qkv: a page each).
  if (bf16) {
    grow(t.qb, Bq * hd);
    grow(t.pb, Bq * Bk);
    for (int64_t i = 0; i < rows; ++i) K.f32_to_bf16(q + (q0 + i) * ld + h * hd, &t.qb[static_cast<size_t>(i * hd)], hd);
  } else {
    grow(t.qf, Bq * hd);
    for (int64_t i = 0; i < rows; ++i)
      std::copy(q + (q0 + i) * ld + h * hd, q + (q0 + i) * ld + h * hd + hd, &t.qf[static_cast<size_t>(i * hd)]);
  }
  std::fill(t.m.begin(), t.m.begin() + rows, -INFINITY);
  std::fill(t.l.begin(), t.l.begin() + rows, 0.0f);
  float alpha[1536];  // [rows]: each row's rescale of its running output for this block (rows <= 1536)
  for (int64_t b = 0; b < blocks; ++b) {
    // Block b: granules [b granules / blocks, (b + 1) granules / blocks), the last one's keys past n left out.
    const int64_t kv0 = b * granules / blocks * kGranule, kv1 = std::min(n, (b + 1) * granules / blocks * kGranule);
    const int64_t cols = kv1 - kv0, np = (cols + tc - 1) / tc;
    // S = q · kᵀ for this block's keys: a row tile (its queries in L1) against each panel in turn (the
    // panels from L2). Panel-outer order measured 11% slower on Zen 5 (448² image: 24 layers 174 vs 154 ms).
    for (int64_t i = 0; i < rows; i += tr) {
      const int mr = static_cast<int>(std::min(tr, rows - i));
      if (!bf16) {
        nn_panels(K, &t.qf[static_cast<size_t>(i * hd)], hd, &s.kt[static_cast<size_t>((h * panels + kv0 / tc) * hd * tc)],
                  tc, hd * tc, hd, S + i * Bk, Bk, mr, np);
        continue;
      }
      for (int64_t p = 0; p < np; ++p) {
        const uint16_t* kp = &s.kt2[static_cast<size_t>((h * panels + kv0 / tc + p) * hd * tc)];
        K.gemm_bf16_nn_tile(&t.qb[static_cast<size_t>(i * hd)], hd, kp, 2 * tc, hd / 2, S + i * Bk + p * tc, Bk, mr,
                            static_cast<int>(tc));
      }
    }
    // The online softmax: each row's new max, its exponentials (in place; bf16: as bf16 pairs, an odd block's
    // last pair with a zero partner) and its running sum; the output so far is rescaled by
    // exp(old max - new max).
    for (int64_t i = 0; i < rows; ++i) {
      float& m = t.m[static_cast<size_t>(i)];
      const float old_max = m;
      float sum;
      if (bf16) {
        uint16_t* pb = &t.pb[static_cast<size_t>(i * Bk)];
        sum = K.exp_scaled_from_bf16(S + i * Bk, cols, scale, &m, pb);
        if (cols % 2) pb[cols] = 0;
      } else {
        sum = K.exp_scaled_from(S + i * Bk, cols, scale, &m);
      }
      alpha[i] = kv0 == 0 ? 0.0f : std::exp(old_max - m);
      t.l[static_cast<size_t>(i)] = t.l[static_cast<size_t>(i)] * alpha[i] + sum;
    }
    // PV = P · v for this block's keys.
    float* dst = kv0 == 0 ? O : PV;
    if (bf16) {
      const uint16_t* pb = t.pb.data();  // [rows, Bk]
      const uint16_t* vb = &s.v2[static_cast<size_t>((h * pairs + kv0 / 2) * 2 * hd)];
      for (int64_t i = 0; i < rows; i += tr) {
        const int mr = static_cast<int>(std::min(tr, rows - i));
        for (int64_t d = 0; d < hd; d += tc) {
          const int nc = static_cast<int>(std::min(tc, hd - d));
          K.gemm_bf16_nn_tile(pb + i * Bk, Bk, vb + 2 * d, 2 * hd, (cols + 1) / 2, dst + i * hd + d, hd, mr, nc);
        }
      }
    } else {
      // v's panels: each a contiguous run of its columns per key, read in sequence (v's rows as they are,
      // head_dim floats apart, ran P · v at 72 % of the FMA peak on a Zen 2 against 97 % packed: BENCHMARKS.md).
      const float* vh = &s.v[static_cast<size_t>(h * n * hd)];
      for (int64_t i = 0; i < rows; i += tr) {
        const int mr = static_cast<int>(std::min(tr, rows - i));
        for (int64_t d = 0; d < hd; d += tc) {
          const int nc = static_cast<int>(std::min(tc, hd - d));
          K.gemm_f32_nn_tile(S + i * Bk, Bk, vh + d * n + kv0 * nc, nc, cols, dst + i * hd + d, hd, mr, nc);
        }
      }
    }
    if (kv0 > 0)
      for (int64_t i = 0; i < rows; ++i) rescale_add(O + i * hd, PV + i * hd, alpha[i], hd);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = 1.0f / t.l[static_cast<size_t>(i)];
    float* dst = out + (q0 + i) * ldo + h * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = O[i * hd + d] * inv;
  }
}

}  // namespace

void attention_multihead(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                         int heads, int64_t head_dim, float scale, float* out, int64_t ldo, AttentionPrecision precision,
                         FlashScratch& s, int q_block, int kv_block, const KernelTable* table) {
  if (n <= 0) return;
  const KernelTable& K = table ? *table : kernels();
  const bool bf16 = effective_attention_precision(precision, &K) == AttentionPrecision::kBF16 && head_dim % 2 == 0;
  const int64_t Bq = q_block > 0 ? q_block : tile_choice().attn_q_block;
  const int64_t Bk_max = kv_block > 0 ? kv_block : tile_choice().attn_kv_block;
  QVL_CHECK(Bq % K.nn_rows == 0 && Bq <= 1536 && Bk_max % K.nn_cols == 0 && Bk_max % 2 == 0);
  const int64_t tc = K.nn_cols, panels = (n + tc - 1) / tc, pairs = (n + 1) / 2, hd = head_dim;
  // The keys in as few blocks of whole 64-key granules as kv_block allows, of nearly equal sizes (784 keys, 13
  // granules, in 256-key blocks: 192, 192, 192, 208 rather than 256, 256, 256, 16, whose last block would cost
  // a whole panel and a rescale of every output row for 16 keys). Granules of 64, not of the table's panel
  // width, so that every table cuts the keys alike (bf16 rounds the probabilities against each block's max).
  QVL_CHECK(kGranule % tc == 0 && Bk_max % kGranule == 0);
  const int64_t granules = (n + kGranule - 1) / kGranule;
  const int64_t blocks = (granules * kGranule + Bk_max - 1) / Bk_max;
  const int64_t Bk = (granules + blocks - 1) / blocks * kGranule;  // the largest block: the score rows' stride
  if (bf16) {
    grow(s.kt2, heads * panels * hd * tc);
    grow(s.v2, heads * pairs * 2 * hd);
  } else {
    grow(s.kt, heads * panels * hd * tc);
    grow(s.v, heads * n * hd);
  }
  if (s.threads.size() < static_cast<size_t>(pool.size())) s.threads.resize(static_cast<size_t>(pool.size()));
  // Pack every head's keys and values, a few panels per task.
  const int64_t per_task = std::max<int64_t>(1, 256 / tc);
  const int64_t chunks = (panels + per_task - 1) / per_task;
  pool.parallel_for(heads * chunks, 1, [&](int th, int64_t c0, int64_t c1) {
    std::vector<uint16_t>& row = s.threads[static_cast<size_t>(th)].row;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t h = c / chunks, j0 = (c % chunks) * per_task * tc, j1 = std::min(panels * tc, j0 + per_task * tc);
      pack_keys(K, k, v, ld, n, hd, h, j0, j1, panels, bf16, s, row);
    }
  });
  // One head's q_block rows per task, consecutive tasks on the same head (its keys stay in the caches).
  const int64_t qblocks = (n + Bq - 1) / Bq;
  pool.parallel_for_dynamic(heads * qblocks, 1, [&](int th, int64_t t0, int64_t t1) {
    FlashThreadScratch& ts = s.threads[static_cast<size_t>(th)];
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / qblocks, q0 = (task % qblocks) * Bq;
      flash_rows(K, q, ld, n, hd, h, q0, std::min(Bq, n - q0), scale, out, ldo, bf16, Bq, Bk, blocks, granules, s, ts);
    }
  });
}

}  // namespace qvl
