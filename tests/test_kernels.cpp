// Every SIMD kernel against its scalar twin on awkward sizes, with tolerances from floating-point error
// bounds; the matmul driver against a plain float reference; the thread pool's coverage of ranges.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <thread>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>

#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/cpu_budget.h"
#include "util/thread_pool.h"

namespace qvl {
namespace {

constexpr double kEps = 1.0 / (1 << 24);  // float32 unit roundoff

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// m rows of k weights from wf, quantized to Q8_0 or Q4_0 by the reference, one row after another.
std::vector<uint8_t> quantized_rows(WeightType type, const std::vector<float>& wf, int64_t m, int64_t k) {
  std::vector<uint8_t> rows(m * row_bytes(type, k));
  for (int64_t r = 0; r < m; ++r) {
    void* dst = rows.data() + r * row_bytes(type, k);
    if (type == WeightType::kQ8_0) quantize_row_q8_0_ref(wf.data() + r * k, static_cast<BlockQ8_0*>(dst), k);
    else quantize_row_q4_0_ref(wf.data() + r * k, static_cast<BlockQ4_0*>(dst), k);
  }
  return rows;
}

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> t;
  if (neon_kernels()) t.push_back(neon_kernels());
  if (avx2_kernels()) t.push_back(avx2_kernels());
  if (avxvnni_kernels()) t.push_back(avxvnni_kernels());
  if (avx512vnni_kernels()) t.push_back(avx512vnni_kernels());
  if (amx_kernels()) t.push_back(amx_kernels());
  return t;
}

TEST(Kernels, DispatchPicksAvailableTable) {
  const KernelTable& k = kernels();
  const std::string name = k.name;
  EXPECT_TRUE(name == "generic" || name == "neon" || name == "avx2" || name == "avxvnni" || name == "avx512vnni" ||
              name == "amx") << name;
  // The best table the machine runs, unless QVL_ISA forces one.
  if (!std::getenv("QVL_ISA")) {
    const KernelTable* best = amx_kernels()         ? amx_kernels()
                              : avx512vnni_kernels() ? avx512vnni_kernels()
                              : avxvnni_kernels()   ? avxvnni_kernels()
                              : avx2_kernels()      ? avx2_kernels()
                              : neon_kernels()      ? neon_kernels()
                                                    : &generic_kernels();
    EXPECT_EQ(&k, best) << kernels_reason();
  }
  if (simd_tables().empty()) GTEST_SKIP() << "no SIMD table runs here: only the generic table is tested";
}

TEST(Kernels, RowToF32MatchesGenericExactly) {
  const KernelTable& g = generic_kernels();
  for (const KernelTable* t : simd_tables()) {
    for (int64_t cols : {32, 64, 96, 4096}) {
      const auto f = random_floats(static_cast<size_t>(cols), 1);
      std::vector<uint16_t> bf(cols), hf(cols);
      for (int64_t i = 0; i < cols; ++i) bf[i] = f32_to_bf16(f[i]), hf[i] = f32_to_f16(f[i]);
      std::vector<BlockQ8_0> q8(cols / kQK);
      std::vector<BlockQ4_0> q4(cols / kQK);
      quantize_row_q8_0_ref(f.data(), q8.data(), cols);
      quantize_row_q4_0_ref(f.data(), q4.data(), cols);
      const std::pair<WeightType, const void*> rows[] = {{WeightType::kF32, f.data()}, {WeightType::kBF16, bf.data()},
                                                         {WeightType::kF16, hf.data()}, {WeightType::kQ8_0, q8.data()},
                                                         {WeightType::kQ4_0, q4.data()}};
      for (auto [type, data] : rows) {
        std::vector<float> a(cols), b(cols);
        g.row_to_f32(type, data, a.data(), cols);
        t->row_to_f32(type, data, b.data(), cols);
        EXPECT_EQ(a, b) << t->name << " " << weight_type_name(type) << " cols " << cols;
      }
    }
    // Odd lengths for the float types (tails).
    for (int64_t cols : {1, 7, 9, 31, 33}) {
      std::vector<uint16_t> bf(cols);
      const auto f = random_floats(static_cast<size_t>(cols), 2);
      for (int64_t i = 0; i < cols; ++i) bf[i] = f32_to_bf16(f[i]);
      std::vector<float> a(cols), b(cols);
      g.row_to_f32(WeightType::kBF16, bf.data(), a.data(), cols);
      t->row_to_f32(WeightType::kBF16, bf.data(), b.data(), cols);
      EXPECT_EQ(a, b);
    }
  }
}

TEST(Kernels, GemmTileWithinRoundingBound) {
  const KernelTable& g = generic_kernels();
  for (const KernelTable* t : simd_tables()) {
    for (int64_t k : {1, 7, 8, 31, 33, 64, 1000, 4095}) {
      const auto x = random_floats(static_cast<size_t>(4 * k), 3), w = random_floats(static_cast<size_t>(3 * k), 4);
      for (int mr = 1; mr <= 4; ++mr)
        for (int nr = 1; nr <= 3; ++nr) {
          float ya[12], yb[12];
          g.gemm_f32_tile(x.data(), k, w.data(), k, k, ya, 3, mr, nr);
          t->gemm_f32_tile(x.data(), k, w.data(), k, k, yb, 3, mr, nr);
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) {
              double abs_sum = 0;
              for (int64_t u = 0; u < k; ++u) abs_sum += std::abs(double{x[i * k + u]} * w[j * k + u]);
              // Both sums carry at most k * eps * sum|x w| of rounding error each (Higham's gamma_k bound).
              const double bound = 2.0 * static_cast<double>(k) * kEps * abs_sum + 1e-30;
              EXPECT_LE(std::abs(double{ya[i * 3 + j]} - yb[i * 3 + j]), bound)
                  << t->name << " k " << k << " tile " << mr << "x" << nr;
            }
        }
    }
  }
}

// gemm_w16_tile is the table's own gemm_f32_tile on the rows row_to_f32 widens, to the bit: for bf16 and f16,
// every tile shape the contract allows (6 weight rows for 1 or 2 activation rows), tails of k, a weight stride
// wider than k (the last row ends the buffer: no slack to read past), a row of denormals alone and a row
// holding the type's largest finite value. A row's result is the same whatever mr and nr are, and nothing
// outside the mr x nr tile is written.
TEST(Kernels, W16TileIsTheF32TileOnWidenedRowsBitForBit) {
  std::vector<const KernelTable*> tables = simd_tables();
  tables.push_back(&generic_kernels());
  constexpr float kSentinel = -12345.0f;
  for (const KernelTable* t : tables) {
    ASSERT_NE(t->gemm_w16_tile, nullptr) << t->name;
    for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
      const bool bf = type == WeightType::kBF16;
      for (int64_t k : {1, 7, 8, 9, 31, 64, 333, 2048}) {
        const int64_t ldw = k + 3;
        const auto x = random_floats(static_cast<size_t>(4 * k), 21);
        const auto wf = random_floats(static_cast<size_t>(5 * ldw + k), 22, 4.0f);
        std::vector<uint16_t> w(wf.size());
        for (size_t i = 0; i < w.size(); ++i) w[i] = bf ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
        // Row 1: denormals of both signs only (a vector widening that flushed them would give 0).
        for (int64_t u = 0; u < k; ++u) w[static_cast<size_t>(ldw + u)] = static_cast<uint16_t>((u % 2 ? 0x8000 : 0) | (1 + u % 0x7F));
        // Row 4: the most negative finite value at its first place.
        w[static_cast<size_t>(4 * ldw)] = bf ? 0xFF7F : 0xFBFF;
        std::vector<float> widened(static_cast<size_t>(6 * k));
        for (int j = 0; j < 6; ++j) t->row_to_f32(type, w.data() + j * ldw, widened.data() + j * k, k);
        float alone[4][6];  // each (activation row, weight row) on a 1 x 1 tile
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 6; ++j) t->gemm_w16_tile(type, x.data() + i * k, k, w.data() + j * ldw, ldw, k, &alone[i][j], 1, 1, 1);
        for (int mr = 1; mr <= 4; ++mr)
          for (int nr = 1; nr <= (mr <= 2 ? 6 : 3); ++nr) {
            float want[4 * 7], got[4 * 7];  // ldy 7: a column past the widest tile
            std::fill(std::begin(want), std::end(want), kSentinel);
            std::fill(std::begin(got), std::end(got), kSentinel);
            // The reference: the f32 tile three rows at a time, as its contract allows.
            for (int j0 = 0; j0 < nr; j0 += 3)
              t->gemm_f32_tile(x.data(), k, widened.data() + j0 * k, k, k, want + j0, 7, mr, std::min(3, nr - j0));
            t->gemm_w16_tile(type, x.data(), k, w.data(), ldw, k, got, 7, mr, nr);
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 7; ++j) {
                const uint32_t g = std::bit_cast<uint32_t>(got[i * 7 + j]);
                if (i >= mr || j >= nr) {
                  ASSERT_EQ(g, std::bit_cast<uint32_t>(kSentinel)) << t->name << " wrote outside its " << mr << "x" << nr << " tile at (" << i << ", " << j << ")";
                  continue;
                }
                ASSERT_EQ(std::bit_cast<uint32_t>(want[i * 7 + j]), g)
                    << t->name << " " << weight_type_name(type) << " k " << k << " tile " << mr << "x" << nr << " at ("
                    << i << ", " << j << "): " << want[i * 7 + j] << " vs " << got[i * 7 + j];
                ASSERT_EQ(std::bit_cast<uint32_t>(alone[i][j]), g)
                    << t->name << " " << weight_type_name(type) << " k " << k << ": row (" << i << ", " << j
                    << ") differs between a 1x1 and a " << mr << "x" << nr << " tile";
              }
          }
      }
    }
  }
}

TEST(Kernels, PanelTileWithinRoundingBound) {
  const KernelTable& g = generic_kernels();
  for (const KernelTable* t : simd_tables()) {
    const int R = t->nn_rows, C = t->nn_cols;
    ASSERT_LE(R, 12);
    ASSERT_LE(C, 64);
    for (int64_t k : {1, 7, 64, 333}) {
      const int64_t ldb = C + 5;  // wider than the panel: the tile must read only its nc columns
      const auto a = random_floats(static_cast<size_t>(R * k), 11), b = random_floats(static_cast<size_t>(k * ldb), 12);
      for (int mr = 1; mr <= R; ++mr)
        for (int nc : {1, 5, 15, 16, 17, 31, 32, 33, 48, 63, 64}) {
          if (nc > C) continue;
          // Sentinels around the tile: nothing outside mr x nc may be written.
          std::vector<float> ca(12 * 64, -7.0f), cb(12 * 64, -7.0f);
          g.gemm_f32_nn_tile(a.data(), k, b.data(), ldb, k, ca.data(), 64, mr, nc);
          t->gemm_f32_nn_tile(a.data(), k, b.data(), ldb, k, cb.data(), 64, mr, nc);
          for (int i = 0; i < 12; ++i)
            for (int j = 0; j < 64; ++j) {
              if (i >= mr || j >= nc) {
                ASSERT_EQ(cb[i * 64 + j], -7.0f) << t->name << " wrote outside the " << mr << "x" << nc << " tile";
                continue;
              }
              double abs_sum = 0;
              for (int64_t u = 0; u < k; ++u) abs_sum += std::abs(double{a[i * k + u]} * b[u * ldb + j]);
              EXPECT_LE(std::abs(double{ca[i * 64 + j]} - cb[i * 64 + j]), 2.0 * k * kEps * abs_sum + 1e-30)
                  << t->name << " k " << k << " tile " << mr << "x" << nc;
            }
        }
    }
  }
}

// A row's sums do not depend on how many rows share its tile, how many columns (a partial panel's are the
// full panel's), or how many zero terms follow them: the text decoder reads a token in a prefill slice (up to
// nn_rows rows a tile, every row's products taken up to the slice's last key, zero past its own) and decodes it
// alone (one row, up to its own key), and the prefix cache needs the same bits from both.
TEST(Kernels, PanelTileRowIsTheSameBitsInEveryTileShape) {
  std::vector<const KernelTable*> tables = simd_tables();
  tables.insert(tables.begin(), &generic_kernels());
  for (const KernelTable* t : tables) {
    const int R = t->nn_rows, C = t->nn_cols;
    for (int64_t k : {1, 3, 7, 64, 333}) {
      const int64_t ldb = C + 5, kz = k + 29;  // kz: k then zeros in a
      std::vector<float> a = random_floats(static_cast<size_t>(R * kz), 31);
      const auto b = random_floats(static_cast<size_t>(kz * ldb), 32);
      for (int i = 0; i < R; ++i) std::fill(a.begin() + i * kz + k, a.begin() + (i + 1) * kz, 0.0f);
      std::vector<float> full(static_cast<size_t>(R * C), NAN);
      t->gemm_f32_nn_tile(a.data(), kz, b.data(), ldb, k, full.data(), C, R, C);
      for (int nc : {1, 5, C / 2, C - 1, C}) {
        std::vector<float> tile(static_cast<size_t>(R * C), NAN), row(static_cast<size_t>(C), NAN);
        t->gemm_f32_nn_tile(a.data(), kz, b.data(), ldb, kz, tile.data(), C, R, nc);
        for (int i = 0; i < R; ++i) {
          const std::string where = std::string(t->name) + " k " + std::to_string(k) + " nc " + std::to_string(nc) +
                                    " row " + std::to_string(i) + " of " + std::to_string(R);
          ASSERT_EQ(0, std::memcmp(full.data() + i * C, tile.data() + i * C, static_cast<size_t>(nc) * 4)) << where << ", zeros after";
          t->gemm_f32_nn_tile(a.data() + i * kz, kz, b.data(), ldb, k, row.data(), C, 1, nc);
          ASSERT_EQ(0, std::memcmp(full.data() + i * C, row.data(), static_cast<size_t>(nc) * 4)) << where << ", alone";
        }
      }
    }
  }
}

TEST(Kernels, QuantizeQ8_0MatchesReferenceBitForBit) {
  for (const KernelTable* t : simd_tables()) {
    for (int64_t cols : {32, 64, 4096}) {
      auto x = random_floats(static_cast<size_t>(cols), 5, 3.0f);
      for (int i = 0; i < 32; ++i) x[i] = 0;  // an all-zero block
      if (cols > 32) x[40] = 1e6f;            // a huge outlier in the second block only
      std::vector<BlockQ8_0> a(cols / kQK), b(cols / kQK);
      quantize_row_q8_0_ref(x.data(), a.data(), cols);
      t->quantize_q8_0(x.data(), b.data(), cols);
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_EQ(a[j].d, b[j].d) << t->name << " block " << j;
        for (int i = 0; i < kQK; ++i) ASSERT_EQ(a[j].qs[i], b[j].qs[i]) << t->name << " block " << j << " value " << i;
      }
    }
  }
}

template <class Block>
void check_quant_dot(WeightType type) {
  const KernelTable& g = generic_kernels();
  for (const KernelTable* t : simd_tables()) {
    for (int64_t nb : {1, 3, 64, 192}) {
      const int64_t k = nb * kQK;
      const auto wf = random_floats(static_cast<size_t>(k), 6), xf = random_floats(static_cast<size_t>(4 * k), 7);
      std::vector<Block> w(nb);
      if constexpr (std::is_same_v<Block, BlockQ8_0>) quantize_row_q8_0_ref(wf.data(), w.data(), k);
      else quantize_row_q4_0_ref(wf.data(), w.data(), k);
      std::vector<BlockQ8_0> x(4 * nb);
      for (int i = 0; i < 4; ++i) quantize_row_q8_0_ref(xf.data() + i * k, x.data() + i * nb, k);
      for (int mr = 1; mr <= 4; ++mr) {
        float ya[4], yb[4];
        if constexpr (std::is_same_v<Block, BlockQ8_0>) {
          g.dot_q8_0_rows(w.data(), x.data(), nb, ya, 1, mr);
          t->dot_q8_0_rows(w.data(), x.data(), nb, yb, 1, mr);
        } else {
          g.dot_q4_0_rows(w.data(), x.data(), nb, ya, 1, mr);
          t->dot_q4_0_rows(w.data(), x.data(), nb, yb, 1, mr);
        }
        // Integer block sums are exact; only the float accumulation over nb blocks differs.
        std::vector<float> wd(k), xd(k);
        g.row_to_f32(type, w.data(), wd.data(), k);
        for (int i = 0; i < mr; ++i) {
          g.row_to_f32(WeightType::kQ8_0, x.data() + i * nb, xd.data(), k);
          double abs_sum = 0;
          for (int64_t u = 0; u < k; ++u) abs_sum += std::abs(double{wd[u]} * xd[u]);
          EXPECT_LE(std::abs(double{ya[i]} - yb[i]), 2.0 * (nb + 2) * kEps * abs_sum + 1e-30)
              << t->name << " " << weight_type_name(type) << " nb " << nb << " row " << i;
        }
      }
    }
  }
}

TEST(Kernels, DotQ8_0WithinRoundingBound) { check_quant_dot<BlockQ8_0>(WeightType::kQ8_0); }
TEST(Kernels, DotQ4_0WithinRoundingBound) { check_quant_dot<BlockQ4_0>(WeightType::kQ4_0); }

TEST(Kernels, InterleavedBlocksUnpackToTheRowsPacked) {
  for (int64_t nb : {1, 5}) {
    const int64_t k = nb * kQK;
    const auto wf = random_floats(static_cast<size_t>(8 * k), 11);
    std::vector<BlockQ8_0> r8(8 * nb), u8(nb);
    std::vector<BlockQ4_0> r4(8 * nb), u4(nb);
    for (int c = 0; c < 8; ++c) {
      quantize_row_q8_0_ref(wf.data() + c * k, r8.data() + c * nb, k);
      quantize_row_q4_0_ref(wf.data() + c * k, r4.data() + c * nb, k);
    }
    std::vector<BlockQ8_0x8> p8(nb);
    std::vector<BlockQ4_0x8> p4(nb);
    pack_q8_0x8(r8.data(), nb, p8.data());
    pack_q4_0x8(r4.data(), nb, p4.data());
    // Spot-check the documented layout, then the round trip of every row.
    EXPECT_EQ(p8[0].qs[32 * 2 + 4 * 3 + 1], r8[3 * nb].qs[4 * 2 + 1]);
    EXPECT_EQ(p4[0].qs[32 * 1 + 4 * 5 + 2], r4[5 * nb].qs[4 * 1 + 2]);
    for (int c = 0; c < 8; ++c) {
      unpack_q8_0x8(p8.data(), c, nb, u8.data());
      unpack_q4_0x8(p4.data(), c, nb, u4.data());
      EXPECT_EQ(0, std::memcmp(u8.data(), r8.data() + c * nb, nb * sizeof(BlockQ8_0))) << "q8_0 row " << c;
      EXPECT_EQ(0, std::memcmp(u4.data(), r4.data() + c * nb, nb * sizeof(BlockQ4_0))) << "q4_0 row " << c;
    }
  }
}

TEST(Kernels, QuantizeActMatchesReferenceBitForBit) {
  for (const KernelTable* t : simd_tables()) {
    for (int64_t cols : {32, 96, 4096}) {
      auto x = random_floats(static_cast<size_t>(cols), 12, 3.0f);
      for (int i = 0; i < 32; ++i) x[i] = 0;
      if (cols > 32) x[40] = -1e6f;
      const int64_t nb = cols / kQK;
      std::vector<int8_t> qa(cols), qb(cols);
      std::vector<float> da(nb), db(nb);
      std::vector<int32_t> sa(nb), sb(nb);
      quantize_row_act_ref(x.data(), cols, qa.data(), da.data(), sa.data());
      t->quantize_act(x.data(), cols, qb.data(), db.data(), sb.data());
      EXPECT_EQ(qa, qb) << t->name << " cols " << cols;
      EXPECT_EQ(da, db) << t->name << " cols " << cols;
      EXPECT_EQ(sa, sb) << t->name << " cols " << cols;
    }
  }
}

// The generic interleaved GEMM tile against the plain definition (dequantized weights times dequantized
// activations, in double) within a float32 rounding bound, and every SIMD tile against it bit for bit.
void check_interleaved_gemm(WeightType type) {
  const KernelTable& g = generic_kernels();
  for (int64_t nb : {1, 3, 64, 192}) {
    const int64_t k = nb * kQK;
    const auto wf = random_floats(static_cast<size_t>(8 * k), 13), xf = random_floats(static_cast<size_t>(4 * k), 14, 5.0f);
    std::vector<uint8_t> rows = quantized_rows(type, wf, 8, k), packed(rows.size());
    const Mat w = interleave8(Mat{type, 8, k, rows.data()}, packed.data());
    std::vector<int8_t> q(4 * k);
    std::vector<float> d(4 * nb);
    std::vector<int32_t> s(4 * nb);
    for (int i = 0; i < 4; ++i) quantize_row_act_ref(xf.data() + i * k, k, q.data() + i * k, d.data() + i * nb, s.data() + i * nb);
    for (int mr = 1; mr <= 4; ++mr) {
      float ya[4 * 8], yb[4 * 8];
      auto run = [&](const KernelTable& t, float* y) {
        if (type == WeightType::kQ8_0) t.gemm_q8_0x8(static_cast<const BlockQ8_0x8*>(w.group(0)), q.data(), d.data(), s.data(), nb, y, 8, mr);
        else t.gemm_q4_0x8(static_cast<const BlockQ4_0x8*>(w.group(0)), q.data(), d.data(), s.data(), nb, y, 8, mr);
      };
      run(g, ya);
      std::vector<float> wrow(k);
      for (int c = 0; c < 8; ++c) {
        row_to_f32(Mat{type, 8, k, rows.data()}, c, wrow.data());
        for (int i = 0; i < mr; ++i) {
          double want = 0, abs_sum = 0;
          for (int64_t u = 0; u < k; ++u) {
            const double xv = double{d[i * nb + u / kQK]} * q[i * k + u];
            want += wrow[u] * xv;
            abs_sum += std::abs(wrow[u] * xv);
          }
          EXPECT_LE(std::abs(want - ya[i * 8 + c]), 4.0 * (nb + 2) * kEps * abs_sum + 1e-30)
              << weight_type_name(type) << " nb " << nb << " row " << i << " col " << c;
        }
      }
      for (const KernelTable* t : simd_tables()) {
        run(*t, yb);
        for (int i = 0; i < mr * 8; ++i) ASSERT_EQ(ya[i], yb[i]) << t->name << " " << weight_type_name(type) << " nb " << nb << " mr " << mr << " at " << i;
      }
    }
  }
}

// The two- and four-group tiles: bit-identical to one-group tiles of the generic table on each group.
void check_interleaved_gemm_groups(WeightType type) {
  const KernelTable& g = generic_kernels();
  for (int64_t nb : {1, 3, 64}) {
    const int64_t k = nb * kQK;
    const auto wf = random_floats(static_cast<size_t>(32 * k), 17), xf = random_floats(static_cast<size_t>(4 * k), 18, 5.0f);
    std::vector<uint8_t> rows = quantized_rows(type, wf, 32, k), packed(rows.size());
    const Mat w = interleave8(Mat{type, 32, k, rows.data()}, packed.data());
    std::vector<int8_t> q(4 * k);
    std::vector<float> d(4 * nb);
    std::vector<int32_t> s(4 * nb);
    for (int i = 0; i < 4; ++i) quantize_row_act_ref(xf.data() + i * k, k, q.data() + i * k, d.data() + i * nb, s.data() + i * nb);
    const auto* w8 = static_cast<const BlockQ8_0x8*>(w.group(0));
    const auto* w4 = static_cast<const BlockQ4_0x8*>(w.group(0));
    for (int mr = 1; mr <= 4; ++mr) {
      // Outputs with a row stride of 40 (past the widest tile): columns 32-39 must stay untouched.
      std::vector<float> want(4 * 40, -7.0f);
      for (int grp = 0; grp < 4; ++grp) {
        if (type == WeightType::kQ8_0) g.gemm_q8_0x8(w8 + grp * nb, q.data(), d.data(), s.data(), nb, want.data() + 8 * grp, 40, mr);
        else g.gemm_q4_0x8(w4 + grp * nb, q.data(), d.data(), s.data(), nb, want.data() + 8 * grp, 40, mr);
      }
      for (const KernelTable* t : simd_tables()) {
        for (int groups : {2, 4}) {
          auto tile = type == WeightType::kQ8_0 ? (groups == 2 ? t->gemm_q8_0x16 : t->gemm_q8_0x32) : nullptr;
          auto tile4 = type == WeightType::kQ4_0 ? (groups == 2 ? t->gemm_q4_0x16 : t->gemm_q4_0x32) : nullptr;
          if (!tile && !tile4) continue;  // a table without four-group tiles
          std::vector<float> got(4 * 40, -7.0f);
          if (tile) tile(w8, q.data(), d.data(), s.data(), nb, got.data(), 40, mr);
          else tile4(w4, q.data(), d.data(), s.data(), nb, got.data(), 40, mr);
          for (int i = 0; i < 4; ++i) {
            for (int c = 0; c < 40; ++c) {
              const bool written = i < mr && c < 8 * groups;
              ASSERT_EQ(written ? want[i * 40 + c] : -7.0f, got[i * 40 + c])
                  << t->name << " " << weight_type_name(type) << " " << groups << " groups, nb " << nb << " mr " << mr
                  << " row " << i << " column " << c;
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, InterleavedGemmPairsAndQuadsBitIdenticalToGeneric) {
  check_interleaved_gemm_groups(WeightType::kQ8_0);
  check_interleaved_gemm_groups(WeightType::kQ4_0);
}

// The four-group tiles exist where 512-bit registers make them pay (so the test above is not empty there).
TEST(Kernels, FourGroupTilesInTheAvx512Tables) {
  for (const KernelTable* t : simd_tables()) {
    const bool avx512 = std::string(t->name) == "avx512vnni" || std::string(t->name) == "amx";
    EXPECT_EQ(avx512, t->gemm_q8_0x32 != nullptr) << t->name;
    EXPECT_EQ(avx512, t->gemm_q4_0x32 != nullptr) << t->name;
  }
}

// The driver on every table equals the generic table bit for bit, for group counts that split into quads,
// pairs and a lone group in different ways (1 to 37 groups), rows in and across the 128-row blocks, and
// a thread pool of 2 and 3 (other chunkings of the groups).
TEST(Matmul, InterleavedDriverEqualsGenericOnEveryTable) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    // (The last two shapes, 128 and 258 groups, give chunks of 8 and 16 groups.)
    for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 64}, {5, 40, 96}, {4, 56, 64}, {7, 24, 128},
                           {131, 296, 64}, {9, 264, 256}, {2, 72, 32}, {5, 1024, 32}, {3, 2064, 32}}) {
      const auto x = random_floats(static_cast<size_t>(n * k), 21, 3.0f), wf = random_floats(static_cast<size_t>(m * k), 22);
      for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0}) {
        std::vector<uint8_t> rows = quantized_rows(type, wf, m, k), packed(rows.size());
        const Mat w = interleave8(Mat{type, m, k, rows.data()}, packed.data());
        std::vector<float> want(n * m);
        matmul_with(generic_kernels(), pool, x.data(), n, w, nullptr, want.data());
        for (const KernelTable* t : simd_tables()) {
          std::vector<float> got(n * m, -7.0f);
          matmul_with(*t, pool, x.data(), n, w, nullptr, got.data());
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << t->name << " " << weight_type_name(type) << " n " << n << " m " << m << " k " << k << " threads " << threads;
        }
      }
    }
  }
}

TEST(Kernels, InterleavedGemmQ8_0ExactAndBitIdenticalToGeneric) { check_interleaved_gemm(WeightType::kQ8_0); }
TEST(Kernels, InterleavedGemmQ4_0ExactAndBitIdenticalToGeneric) { check_interleaved_gemm(WeightType::kQ4_0); }

TEST(Matmul, InterleavedQuantizedMatchesAPlainFloatProduct) {
  ThreadPool pool(2);
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 64}, {7, 24, 96}, {70, 40, 1024}, {131, 16, 64}}) {
    const auto x = random_floats(static_cast<size_t>(n * k), 15), wf = random_floats(static_cast<size_t>(m * k), 16);
    for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0}) {
      std::vector<uint8_t> rows = quantized_rows(type, wf, m, k), packed(rows.size());
      const Mat w = interleave8(Mat{type, m, k, rows.data()}, packed.data());
      std::vector<float> y(n * m), wrow(k), wrow2(k);
      matmul(pool, x.data(), n, w, nullptr, y.data());
      double max_ref = 0, max_err = 0;
      for (int64_t j = 0; j < m; ++j) {
        row_to_f32(w, j, wrow.data());
        row_to_f32(Mat{type, m, k, rows.data()}, j, wrow2.data());
        ASSERT_EQ(wrow, wrow2) << "row " << j << " reads back differently once interleaved";
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int64_t u = 0; u < k; ++u) s += double{x[i * k + u]} * wrow[u];
          max_ref = std::max(max_ref, std::abs(s));
          max_err = std::max(max_err, std::abs(s - y[i * m + j]));
        }
      }
      // Activation quantization (8-bit, 32 values per scale) is the only approximation.
      EXPECT_LE(max_err / max_ref, 2e-2) << weight_type_name(type) << " n " << n << " m " << m << " k " << k;
    }
  }
}

TEST(Matmul, MatchesAPlainFloatProductForEveryWeightType) {
  ThreadPool pool(2);
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 64}, {5, 33, 96}, {13, 50, 128}, {64, 17, 1024}}) {
    const auto x = random_floats(static_cast<size_t>(n * k), 8), wf = random_floats(static_cast<size_t>(m * k), 9);
    const auto bias = random_floats(static_cast<size_t>(m), 10);
    std::vector<uint16_t> wb(m * k), wh(m * k);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i]), wh[i] = f32_to_f16(wf[i]);
    std::vector<BlockQ8_0> w8(m * k / kQK);
    std::vector<BlockQ4_0> w4(m * k / kQK);
    for (int64_t r = 0; r < m; ++r) {
      quantize_row_q8_0_ref(wf.data() + r * k, w8.data() + r * k / kQK, k);
      quantize_row_q4_0_ref(wf.data() + r * k, w4.data() + r * k / kQK, k);
    }
    struct Case { Mat w; double tol; } cases[] = {
        {{WeightType::kF32, m, k, wf.data()}, 1e-5},  // rounding only
        {{WeightType::kBF16, m, k, wb.data()}, 1e-5},  // against the same bf16 values widened
        {{WeightType::kF16, m, k, wh.data()}, 1e-5},   // n 13 and 64 on both sides of the f16 fusion's limit
        {{WeightType::kQ8_0, m, k, w8.data()}, 2e-2},  // activation quantization (8-bit) on top
        {{WeightType::kQ4_0, m, k, w4.data()}, 2e-2},
    };
    for (const Case& c : cases) {
      std::vector<float> y(n * m), want(n * m), wrow(k);
      matmul(pool, x.data(), n, c.w, bias.data(), y.data());
      double max_ref = 0, max_err = 0;
      for (int64_t j = 0; j < m; ++j) {
        row_to_f32(c.w, j, wrow.data());
        for (int64_t i = 0; i < n; ++i) {
          double s = bias[j];
          for (int64_t u = 0; u < k; ++u) s += double{x[i * k + u]} * wrow[u];
          want[i * m + j] = static_cast<float>(s);
          max_ref = std::max(max_ref, std::abs(s));
          max_err = std::max(max_err, std::abs(s - y[i * m + j]));
        }
      }
      EXPECT_LE(max_err / max_ref, c.tol) << weight_type_name(c.w.type) << " n " << n << " m " << m << " k " << k;
    }
  }
}

// ---- K-quant rows ---------------------------------------------------------------------------------------

// Rows of K-quant super-blocks. kRandom: random bytes (every scale code, Q6_K's -128 included) under a
// finite f16 scale; kAllOnes: every byte 0xFF, the largest values and 6-bit scales and mins the types have
// (Q6_K: q = 63, scale -1); kMostNegative: Q6_K's largest products, q = 0 (w = -32) under scale -128
// (other types: as kAllOnes).
enum class Fill { kRandom, kAllOnes, kMostNegative };
std::vector<uint8_t> kquant_rows(WeightType type, int64_t rows, int64_t k, uint32_t seed, Fill fill) {
  std::vector<uint8_t> out(rows * row_bytes(type, k));
  std::mt19937 rng(seed);
  const bool q6_extreme = fill == Fill::kMostNegative && type == WeightType::kQ6_K;
  for (auto& b : out) b = fill == Fill::kRandom ? static_cast<uint8_t>(rng()) : q6_extreme ? 0x00 : 0xFF;
  const size_t bytes = row_bytes(type, kQKK);
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  for (size_t off = 0; off < out.size(); off += bytes) {
    const uint16_t d = f32_to_f16(u(rng)), dmin = f32_to_f16(u(rng));
    if (type == WeightType::kQ6_K) {
      if (q6_extreme) std::memset(&out[off + 192], 0x80, 16);
      std::memcpy(&out[off + 208], &d, 2);
    } else {
      std::memcpy(&out[off], &d, 2);
      std::memcpy(&out[off + 2], &dmin, 2);
    }
  }
  return out;
}

// The K-quant test patterns: 0, random blocks and activations; 1, 2: all-0xFF blocks with activations all
// +127, all -127 (the integer sums' bounds); 3, 4: Q6_K's most negative blocks with the same.
constexpr int kKquantPatterns = 5;
Fill kquant_fill(int pattern) { return pattern == 0 ? Fill::kRandom : pattern <= 2 ? Fill::kAllOnes : Fill::kMostNegative; }
std::vector<float> kquant_activations(int64_t n, int pattern) {
  std::vector<float> x = random_floats(static_cast<size_t>(n), 19, 5.0f);
  if (pattern > 0) std::fill(x.begin(), x.end(), pattern % 2 ? 1.0f : -1.0f);
  return x;
}

void run_kquant(const KernelTable& t, WeightType type, const void* w, const int8_t* q, const float* d,
                const int32_t* s, int64_t nb, float* y, int64_t ldy, int mr) {
  switch (type) {
    case WeightType::kQ4_K: return t.gemm_q4_kx8(static_cast<const BlockQ4_Kx8*>(w), q, d, s, nb, y, ldy, mr);
    case WeightType::kQ5_K: return t.gemm_q5_kx8(static_cast<const BlockQ5_Kx8*>(w), q, d, s, nb, y, ldy, mr);
    default: return t.gemm_q6_kx8(static_cast<const BlockQ6_Kx8*>(w), q, d, s, nb, y, ldy, mr);
  }
}

// The generic K-quant tile against the plain definition (ggml's dequantized weights of each of the 8 rows
// times the dequantized activations, in double) within a float32 rounding bound, and every SIMD table
// against it bit for bit, on 1 to 48 super-blocks, 1 to 4 activation rows, random and saturating blocks and
// activations.
void check_kquant_gemm(WeightType type) {
  const KernelTable& g = generic_kernels();
  for (int64_t ns : {1, 2, 3, 8, 48}) {
    const int64_t k = ns * kQKK, nb = k / kQK;
    for (int pattern = 0; pattern < kKquantPatterns; ++pattern) {
      SCOPED_TRACE(std::string(weight_type_name(type)) + " super-blocks " + std::to_string(ns) + " pattern " +
                   std::to_string(pattern));
      const auto rows = kquant_rows(type, 8, k, static_cast<uint32_t>(100 + ns + pattern), kquant_fill(pattern));
      std::vector<uint8_t> packed(rows.size());
      const Mat w = interleave8(Mat{type, 8, k, rows.data()}, packed.data());
      const std::vector<float> xf = kquant_activations(4 * k, pattern);
      std::vector<int8_t> q(4 * k);
      std::vector<float> d(4 * nb);
      std::vector<int32_t> s(4 * nb);
      for (int i = 0; i < 4; ++i)
        quantize_row_act_ref(xf.data() + i * k, k, q.data() + i * k, d.data() + i * nb, s.data() + i * nb);
      for (int mr = 1; mr <= 4; ++mr) {
        float ya[4 * 8], yb[4 * 8];
        run_kquant(g, type, w.group(0), q.data(), d.data(), s.data(), nb, ya, 8, mr);
        std::vector<float> wrow(k);
        for (int c = 0; c < 8; ++c) {
          g.row_to_f32(type, rows.data() + c * row_bytes(type, k), wrow.data(), k);
          for (int i = 0; i < mr; ++i) {
            double want = 0, abs_sum = 0;
            for (int64_t u = 0; u < k; ++u) {
              const double xv = double{d[i * nb + u / kQK]} * q[i * k + u];
              want += wrow[u] * xv;
              abs_sum += std::abs(double{wrow[u]} * xv);
            }
            // ggml's float dequantization rounds each value (d * sc then * q, minus dmin * m): a few ulps per
            // value on top of the per-block accumulation.
            EXPECT_LE(std::abs(want - ya[i * 8 + c]), 8.0 * (nb + 8) * kEps * abs_sum + 1e-30) << "row " << i << " col " << c;
          }
        }
        for (const KernelTable* t : simd_tables()) {
          run_kquant(*t, type, w.group(0), q.data(), d.data(), s.data(), nb, yb, 8, mr);
          for (int i = 0; i < mr * 8; ++i) ASSERT_EQ(ya[i], yb[i]) << t->name << " mr " << mr << " at " << i;
        }
      }
    }
  }
}

// The two-group tiles: bit-identical to two one-group tiles of the generic table.
TEST(Kernels, KQuantGemmPairsBitIdenticalToGeneric) {
  const KernelTable& g = generic_kernels();
  for (WeightType type : {WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    for (int64_t ns : {1, 3}) {
      const int64_t k = ns * kQKK, nb = k / kQK;
     for (int pattern = 0; pattern < kKquantPatterns; ++pattern) {
      const auto rows = kquant_rows(type, 16, k, static_cast<uint32_t>(40 + ns), kquant_fill(pattern));
      std::vector<uint8_t> packed(rows.size());
      const Mat w = interleave8(Mat{type, 16, k, rows.data()}, packed.data());
      const std::vector<float> xf = kquant_activations(4 * k, pattern);
      std::vector<int8_t> q(4 * k);
      std::vector<float> d(4 * nb);
      std::vector<int32_t> s(4 * nb);
      for (int i = 0; i < 4; ++i)
        quantize_row_act_ref(xf.data() + i * k, k, q.data() + i * k, d.data() + i * nb, s.data() + i * nb);
      for (int mr = 1; mr <= 4; ++mr) {
        float want[4 * 16], got[4 * 16];
        for (int half = 0; half < 2; ++half)
          run_kquant(g, type, w.group(half), q.data(), d.data(), s.data(), nb, want + 8 * half, 16, mr);
        std::vector<const KernelTable*> tables = simd_tables();
        tables.push_back(&g);
        for (const KernelTable* t : tables) {
          if (type == WeightType::kQ4_K) t->gemm_q4_kx16(static_cast<const BlockQ4_Kx8*>(w.group(0)), q.data(), d.data(), s.data(), nb, got, 16, mr);
          if (type == WeightType::kQ5_K) t->gemm_q5_kx16(static_cast<const BlockQ5_Kx8*>(w.group(0)), q.data(), d.data(), s.data(), nb, got, 16, mr);
          if (type == WeightType::kQ6_K) t->gemm_q6_kx16(static_cast<const BlockQ6_Kx8*>(w.group(0)), q.data(), d.data(), s.data(), nb, got, 16, mr);
          for (int i = 0; i < mr * 16; ++i)
            ASSERT_EQ(want[i], got[i]) << t->name << " " << weight_type_name(type) << " ns " << ns << " pattern "
                                       << pattern << " mr " << mr << " at " << i;
        }
      }
     }
    }
  }
}

TEST(Kernels, GemmQ4_KExactAndBitIdenticalToGeneric) { check_kquant_gemm(WeightType::kQ4_K); }
TEST(Kernels, GemmQ5_KExactAndBitIdenticalToGeneric) { check_kquant_gemm(WeightType::kQ5_K); }
TEST(Kernels, GemmQ6_KExactAndBitIdenticalToGeneric) { check_kquant_gemm(WeightType::kQ6_K); }

// Interleaving 8 K-quant rows and unpacking each again gives back its bytes.
TEST(Kernels, KQuantInterleavedBlocksUnpackToTheRowsPacked) {
  for (WeightType type : {WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    const int64_t k = 3 * kQKK;
    const auto rows = kquant_rows(type, 16, k, 31, Fill::kRandom);
    std::vector<uint8_t> packed(rows.size());
    const Mat w = interleave8(Mat{type, 16, k, rows.data()}, packed.data());
    EXPECT_NE(packed, rows);
    std::vector<float> a(k), b(k);
    for (int64_t r = 0; r < 16; ++r) {
      row_to_f32(Mat{type, 16, k, rows.data()}, r, a.data());
      row_to_f32(w, r, b.data());
      ASSERT_EQ(a, b) << weight_type_name(type) << " row " << r;
    }
    const size_t rb = row_bytes(type, k);
    std::vector<uint8_t> back(rb);
    for (int c = 0; c < 8; ++c) {
      const void* g1 = w.group(1);
      if (type == WeightType::kQ4_K) unpack_q4_kx8(static_cast<const BlockQ4_Kx8*>(g1), c, 3, reinterpret_cast<BlockQ4_K*>(back.data()));
      if (type == WeightType::kQ5_K) unpack_q5_kx8(static_cast<const BlockQ5_Kx8*>(g1), c, 3, reinterpret_cast<BlockQ5_K*>(back.data()));
      if (type == WeightType::kQ6_K) unpack_q6_kx8(static_cast<const BlockQ6_Kx8*>(g1), c, 3, reinterpret_cast<BlockQ6_K*>(back.data()));
      EXPECT_EQ(0, std::memcmp(back.data(), rows.data() + (8 + c) * rb, rb)) << weight_type_name(type) << " row " << 8 + c;
    }
  }
}

// K-quant rows read back as every table reads them: exactly the reference dequantization.
TEST(Kernels, KQuantRowToF32MatchesReference) {
  for (WeightType type : {WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    const int64_t k = 3 * kQKK;
    const auto w = kquant_rows(type, 1, k, 7, Fill::kRandom);
    std::vector<float> want(k), got(k);
    if (type == WeightType::kQ4_K) dequantize_row_q4_k_ref(reinterpret_cast<const BlockQ4_K*>(w.data()), want.data(), k);
    if (type == WeightType::kQ5_K) dequantize_row_q5_k_ref(reinterpret_cast<const BlockQ5_K*>(w.data()), want.data(), k);
    if (type == WeightType::kQ6_K) dequantize_row_q6_k_ref(reinterpret_cast<const BlockQ6_K*>(w.data()), want.data(), k);
    std::vector<const KernelTable*> tables = simd_tables();
    tables.push_back(&generic_kernels());
    for (const KernelTable* t : tables) {
      t->row_to_f32(type, w.data(), got.data(), k);
      EXPECT_EQ(want, got) << t->name << " " << weight_type_name(type);
    }
  }
}

// The matmul driver on K-quant matrices (interleaved: threads over groups, blocks of activation rows, tails
// of 1-3 rows; rows not a multiple of 8: widened to float) against a plain float product of the dequantized
// weights.
TEST(Matmul, KQuantMatchesAPlainFloatProduct) {
  ThreadPool pool(2);
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 256}, {7, 24, 512}, {133, 40, 1024}, {5, 9, 256}}) {
    const auto x = random_floats(static_cast<size_t>(n * k), 21);
    for (WeightType type : {WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
      const auto rows = kquant_rows(type, m, k, 22, Fill::kRandom);
      std::vector<uint8_t> packed(rows.size());
      const Mat plain{type, m, k, rows.data()};
      const Mat w = m % 8 == 0 ? interleave8(plain, packed.data()) : plain;
      std::vector<float> y(n * m), wrow(k);
      matmul(pool, x.data(), n, w, nullptr, y.data());
      double max_ref = 0, max_err = 0;
      for (int64_t j = 0; j < m; ++j) {
        row_to_f32(plain, j, wrow.data());
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int64_t u = 0; u < k; ++u) s += double{x[i * k + u]} * wrow[u];
          max_ref = std::max(max_ref, std::abs(s));
          max_err = std::max(max_err, std::abs(s - y[i * m + j]));
        }
      }
      EXPECT_LE(max_err / max_ref, 2e-2) << weight_type_name(type) << " n " << n << " m " << m << " k " << k;
    }
  }
}

TEST(ThreadPool, PinsEachThreadToOneAllowedCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(allowed), &allowed));
  std::thread t([&] {  // a thread of its own, so the test runner's affinity stays as it was
    ThreadPool pool(3);
    auto cpus = pool.pin_to_cores();
    ASSERT_TRUE(cpus.ok()) << cpus.status().message();
    ASSERT_EQ(cpus->size(), 3u);
    std::vector<int> seen(3, -1);
    pool.run_on_all([&](int i) {
      cpu_set_t mine;
      CPU_ZERO(&mine);
      if (pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine) == 0 && CPU_COUNT(&mine) == 1)
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &mine)) seen[static_cast<size_t>(i)] = c;
    });
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(seen[static_cast<size_t>(i)], (*cpus)[static_cast<size_t>(i)]) << "thread " << i;
      EXPECT_TRUE(CPU_ISSET((*cpus)[static_cast<size_t>(i)], &allowed)) << "thread " << i << " left the allowed CPUs";
    }
    // Distinct CPUs while there are cores to spare (all CPUs allowed, at least 2 cores).
    if (CPU_COUNT(&allowed) == static_cast<int>(std::thread::hardware_concurrency()) && allowed_core_cpus().size() >= 2) {
      EXPECT_NE((*cpus)[0], (*cpus)[1]);
    }
  });
  t.join();
}

TEST(ThreadPool, DynamicParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (auto [n, chunk_size] : {std::pair<int64_t, int64_t>{0, 4}, {1, 4}, {7, 1}, {1000, 7}, {1000, 2000}}) {
    const int64_t chunk = chunk_size;  // clang 14 cannot capture a structured binding
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for_dynamic(n, chunk, [&](int t, int64_t b, int64_t e) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, 3);
      EXPECT_LE(e - b, chunk);
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
  }
}

// 64 threads, more than this machine's CPUs as a rule: calls that need two threads (the rest left out and not
// waited for) between calls that need all of them, so that a left-out thread may wake to a generation after
// the next call has replaced the job. Every index once per call, no thread past the call's count, and each
// thread at most once per call.
TEST(ThreadPool, ManyThreadsCallsThatUseFewLeaveTheRestOut) {
  ThreadPool pool(64);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(pool.oversubscribed(), 64 > CPU_COUNT(&set));
  for (int round = 0; round < 300; ++round) {
    const int64_t n = round % 3 == 2 ? 640 : 2;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::vector<std::atomic<int>> calls(64);
    pool.parallel_for(n, round % 3 == 2 ? 10 : 1, [&](int t, int64_t b, int64_t e) {
      calls[static_cast<size_t>(t)]++;
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "round " << round;
    for (int t = 0; t < 64; ++t) {
      ASSERT_LE(calls[static_cast<size_t>(t)].load(), 1) << "round " << round << " thread " << t;
      if (n == 2 && t >= 2) ASSERT_EQ(calls[static_cast<size_t>(t)].load(), 0) << "round " << round << " thread " << t;
    }
    std::atomic<int64_t> sum{0};
    pool.parallel_for_dynamic(n, 3, [&](int t, int64_t b, int64_t e) {
      EXPECT_LT(t, std::min<int64_t>(64, (n + 2) / 3));
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), n * (n - 1) / 2) << "round " << round;
  }
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 5, 31, 1000}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, grain, [&](int, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace qvl

namespace qvl {
namespace {

TEST(Kernels, ElementwiseMatchGenericWithinTolerance) {
  const KernelTable& g = generic_kernels();
  for (const KernelTable* t : simd_tables()) {
    for (int64_t n : {1, 7, 8, 9, 33, 4095}) {
      auto x = random_floats(static_cast<size_t>(n), 13, 12.0f);
      x[0] = -100.0f;  // deep in the tails
      if (n > 1) x[1] = 100.0f;
      const auto up = random_floats(static_cast<size_t>(n), 14);
      for (float scale : {1.0f, 0.125f}) {
        auto a = x, b = x;
        const float sa = g.exp_scaled(a.data(), n, scale), sb = t->exp_scaled(b.data(), n, scale);
        EXPECT_NEAR(sa, sb, 2e-6 * sa) << t->name << " exp sum n " << n;
        for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], 1e-6 + 2e-6 * a[i]) << t->name << " exp n " << n;
        EXPECT_FLOAT_EQ(*std::max_element(a.begin(), a.end()), 1.0f) << "the largest term is exp(0)";
      }
      auto a = x, b = x;
      g.gelu_tanh(a.data(), n);
      t->gelu_tanh(b.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], 1e-6 + 1e-6 * std::abs(a[i])) << t->name << " gelu x " << x[i];
      a = x, b = x;
      g.silu_mul(a.data(), up.data(), n);
      t->silu_mul(b.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], 1e-6 + 1e-6 * std::abs(a[i])) << t->name << " silu x " << x[i];
    }
  }
}

}  // namespace
}  // namespace qvl

namespace qvl {
namespace {

// QVL_ISA: a table the machine runs is accepted, one it cannot is refused with what it lacks, an unknown
// name is refused; the reason for the table in use names it.
TEST(Dispatch, IsaRequestsAreCheckedAgainstTheMachine) {
  const char* saved = std::getenv("QVL_ISA");
  const std::string keep = saved ? saved : "";
  setenv("QVL_ISA", "generic", 1);
  EXPECT_TRUE(check_isa_request().ok());
  setenv("QVL_ISA", "avx2", 1);
  EXPECT_EQ(check_isa_request().ok(), avx2_kernels() != nullptr) << check_isa_request().message();
  setenv("QVL_ISA", "avx512vnni", 1);
  const Status vnni = check_isa_request();
  EXPECT_EQ(vnni.ok(), avx512vnni_kernels() != nullptr) << vnni.message();
  if (!vnni.ok()) {
    EXPECT_NE(vnni.message().find("lacks"), std::string::npos) << vnni.message();
    const CpuFeatures f = cpu_features();
    if (!f.avx512vnni) {
      EXPECT_NE(vnni.message().find("AVX512_VNNI"), std::string::npos) << vnni.message();
    }
  }
  setenv("QVL_ISA", "avxvnni", 1);
  EXPECT_EQ(check_isa_request().ok(), avxvnni_kernels() != nullptr) << check_isa_request().message();
  setenv("QVL_ISA", "sse9", 1);
  const Status bad = check_isa_request();
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("sse9"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("avxvnni"), std::string::npos) << bad.message();
  unsetenv("QVL_ISA");
  EXPECT_TRUE(check_isa_request().ok());
  if (saved) setenv("QVL_ISA", keep.c_str(), 1);
  EXPECT_EQ(kernels_reason().rfind(kernels().name, 0), 0u) << kernels_reason();
}

// What each table needs, explained for machines this one may not be: a Zen 3 (AVX2 only), an Alder Lake
// laptop (AVX-VNNI, no AVX-512), an Ice Lake server (AVX-512 VNNI, no AVX-VNNI), an OS without AVX state.
TEST(Dispatch, TableNeedsAreExplainedPerMachine) {
  CpuFeatures zen3;
  zen3.avx2 = zen3.fma = zen3.f16c = zen3.os_ymm = true;
  EXPECT_TRUE(kernel_table_lacks("avx2", zen3).empty());
  EXPECT_EQ(kernel_table_lacks("avxvnni", zen3), std::vector<std::string>{"AVX_VNNI"});
  EXPECT_EQ(kernel_table_lacks("avx512vnni", zen3).size(), 5u);
  CpuFeatures alder = zen3;
  alder.avxvnni = true;
  EXPECT_TRUE(kernel_table_lacks("avxvnni", alder).empty());
  CpuFeatures icelake = zen3;
  icelake.avx512f = icelake.avx512bw = icelake.avx512vl = icelake.avx512vnni = icelake.os_zmm = true;
  EXPECT_TRUE(kernel_table_lacks("avx512vnni", icelake).empty());
  EXPECT_EQ(kernel_table_lacks("avxvnni", icelake), std::vector<std::string>{"AVX_VNNI"});
  CpuFeatures no_os = icelake;
  no_os.os_ymm = no_os.os_zmm = false;
  const auto lacks = kernel_table_lacks("avx512vnni", no_os);
  ASSERT_EQ(lacks.size(), 2u);
  EXPECT_NE(lacks[0].find("YMM"), std::string::npos);
  EXPECT_NE(lacks[1].find("ZMM"), std::string::npos);
  EXPECT_TRUE(kernel_table_lacks("generic", CpuFeatures{}).empty());
  CpuFeatures graviton;
  graviton.asimd = graviton.asimddp = true;
  EXPECT_TRUE(kernel_table_lacks("neon", graviton).empty());
  EXPECT_EQ(kernel_table_lacks("avx2", graviton).size(), 4u);
  CpuFeatures pi4;  // Cortex-A72: NEON without sdot
  pi4.asimd = true;
  EXPECT_EQ(kernel_table_lacks("neon", pi4), std::vector<std::string>{"ASIMDDP (sdot)"});
  EXPECT_FALSE(kernel_table_lacks("sse9", zen3).empty());
}

}  // namespace
}  // namespace qvl
