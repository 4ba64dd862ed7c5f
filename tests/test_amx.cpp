// The AMX table: its panel GEMMs bit for bit against their slow twins and through the matmul driver, run
// on the hardware where this machine has AMX and everywhere with AVX-512 through the tile emulator (the
// same kernel code with the tile instructions in software); the emulator against a plain integer product
// and against what the hardware refuses; what the table needs, explained.
#include <gtest/gtest.h>

#include <csignal>

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#if defined(__x86_64__)
#include "kernels/x86_amx.h"
#endif
#include "util/thread_pool.h"

namespace qvl {

namespace {

std::vector<const KernelTable*> panel_tables() {
  std::vector<const KernelTable*> t;
  if (amx_emulated_kernels()) t.push_back(amx_emulated_kernels());
  if (amx_kernels()) t.push_back(amx_kernels());
  return t;
}

// Random blocks (interleaved or rows): every byte value, so every q8_0 value (-128 included), nibble and
// K-quant scale code, with valid f16 scales.
void set_f16(uint16_t& h, std::mt19937& rng) { h = f32_to_f16(std::uniform_real_distribution<float>(1e-3f, 0.1f)(rng)); }
template <class Block>
std::vector<Block> random_blocks(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<Block> v(static_cast<size_t>(count));
  for (Block& b : v) {
    auto* bytes = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
    if constexpr (std::is_array_v<decltype(b.d)>) {
      for (uint16_t& d : b.d) set_f16(d, rng);
      if constexpr (requires { b.dmin; })
        for (uint16_t& d : b.dmin) set_f16(d, rng);
    } else {
      set_f16(b.d, rng);
      if constexpr (requires { b.dmin; }) set_f16(b.dmin, rng);
    }
  }
  return v;
}

// Activation rows as quantize_act leaves them: int8 values, float scales, int32 block sums. `extreme`:
// every value -128 or 127 (the largest products; -128 never comes out of quantize_act but the panels
// must not care).
struct Acts {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};
Acts random_acts(int64_t n, int64_t nb, uint32_t seed, bool extreme) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 0.1f);
  Acts a{std::vector<int8_t>(n * nb * kQK), std::vector<float>(n * nb), std::vector<int32_t>(n * nb)};
  for (int64_t b = 0; b < n * nb; ++b) {
    int32_t s = 0;
    for (int j = 0; j < kQK; ++j) {
      const int v = extreme ? (byte(rng) < 128 ? -128 : 127) : byte(rng) - 128;
      s += a.q[b * kQK + j] = static_cast<int8_t>(v);
    }
    a.sum[b] = s;
    a.d[b] = scale(rng);
  }
  return a;
}

// One panel against its slow twin for every row count around the 16-row tiles, one group and two, random
// and extreme activations; outputs written into a wider y (ldy 24) whose other columns must stay as they
// were. A group is nb / kBlocksPer blocks.
template <class Block>
using Panel = void (*)(const Block*, int, const int8_t*, const float*, const int32_t*, int64_t, int64_t, float*, int64_t);
template <class Block, int kBlocksPer>
void check_panel(const char* type, Panel<Block> KernelTable::*entry, Panel<Block> ref, std::initializer_list<int64_t> nbs) {
  const auto tables = panel_tables();
  constexpr int64_t kLdy = 24;
  for (int64_t nb : nbs) {
    const auto w = random_blocks<Block>(2 * nb / kBlocksPer, static_cast<uint32_t>(100 + nb));
    for (bool extreme : {false, true}) {
      for (int64_t n : {1, 15, 16, 17, 33, 130}) {
        const Acts a = random_acts(n, nb, static_cast<uint32_t>(200 + n + nb), extreme);
        for (int ngroups : {1, 2}) {
          std::vector<float> want(n * kLdy, -7.0f);
          ref(w.data(), ngroups, a.q.data(), a.d.data(), a.sum.data(), nb, n, want.data(), kLdy);
          for (const KernelTable* t : tables) {
            std::vector<float> got(n * kLdy, -7.0f);
            (t->*entry)(w.data(), ngroups, a.q.data(), a.d.data(), a.sum.data(), nb, n, got.data(), kLdy);
            for (int64_t i = 0; i < n * kLdy; ++i)
              ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
                  << t->name << " " << type << " nb " << nb << " n " << n << " groups " << ngroups
                  << (extreme ? " extreme" : "") << " at row " << i / kLdy << " col " << i % kLdy << ": " << got[i]
                  << ", expected " << want[i];
          }
        }
      }
    }
  }
}

TEST(Kernels, AmxPanelsBitIdenticalToTheirSlowTwins) {
  if (panel_tables().empty()) GTEST_SKIP() << "neither AMX nor AVX-512 (for the tile emulator) on this machine";
  check_panel<BlockQ8_0x8, 1>("q8_0", &KernelTable::gemm_q8_0_panel, gemm_q8_0_panel_ref, {1, 2, 5, 36});
  check_panel<BlockQ4_0x8, 1>("q4_0", &KernelTable::gemm_q4_0_panel, gemm_q4_0_panel_ref, {1, 2, 5, 36});
  check_panel<BlockQ4_Kx8, 8>("q4_k", &KernelTable::gemm_q4_k_panel, gemm_q4_k_panel_ref, {8, 24});
  check_panel<BlockQ5_Kx8, 8>("q5_k", &KernelTable::gemm_q5_k_panel, gemm_q5_k_panel_ref, {8, 24});
  check_panel<BlockQ6_Kx8, 8>("q6_k", &KernelTable::gemm_q6_k_panel, gemm_q6_k_panel_ref, {8, 24});
}

// The driver: every matmul of interleaved q8_0/q4_0/K-quant weights on the panel table equals the AVX-512 VNNI
// table's (whose tiles equal the generic ones), for row counts below, at and across the panel threshold
// and the 128-row blocks, an odd group count (a lone last group) and one group.
TEST(Matmul, AmxPanelsThroughTheDriverEqualTheTiles) {
  const auto tables = panel_tables();
  const KernelTable* tiles = avx512vnni_kernels();
  if (tables.empty() || !tiles) GTEST_SKIP() << "neither AMX nor AVX-512 (for the tile emulator) on this machine";
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{3, 24, 256}, {16, 8, 96}, {40, 24, 256}, {200, 56, 1536}, {129, 16, 64}}) {
    std::vector<float> x(n * k), wf(m * k);
    for (float& v : x) v = u(rng);
    for (float& v : wf) v = u(rng);
    for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
      if (is_kquant(type) && k % kQKK != 0) continue;
      std::vector<uint8_t> rows(m * row_bytes(type, k)), packed(rows.size());
      const auto fill = [&](const auto& blocks) { std::memcpy(rows.data(), blocks.data(), rows.size()); };
      const uint32_t seed = static_cast<uint32_t>(n + m + k);
      if (type == WeightType::kQ4_K) fill(random_blocks<BlockQ4_K>(m * k / kQKK, seed));
      else if (type == WeightType::kQ5_K) fill(random_blocks<BlockQ5_K>(m * k / kQKK, seed));
      else if (type == WeightType::kQ6_K) fill(random_blocks<BlockQ6_K>(m * k / kQKK, seed));
      for (int64_t r = 0; r < m && !is_kquant(type); ++r) {
        void* dst = rows.data() + r * row_bytes(type, k);
        if (type == WeightType::kQ8_0) quantize_row_q8_0_ref(wf.data() + r * k, static_cast<BlockQ8_0*>(dst), k);
        else quantize_row_q4_0_ref(wf.data() + r * k, static_cast<BlockQ4_0*>(dst), k);
      }
      const Mat w = interleave8(Mat{type, m, k, rows.data()}, packed.data());
      std::vector<float> want(n * m), bias(m, 0.25f);
      matmul_with(*tiles, pool, x.data(), n, w, bias.data(), want.data());
      for (const KernelTable* t : tables) {
        std::vector<float> got(n * m);
        matmul_with(*t, pool, x.data(), n, w, bias.data(), got.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << t->name << " " << weight_type_name(type) << " n " << n << " m " << m << " k " << k;
      }
    }
  }
}

// The emulated TDPBSSD against a plain integer product on random tiles of every shape the configuration
// allows, accumulating into what C held, and wrapping as int32 does.
TEST(Kernels, AmxEmulatorMatchesAPlainIntegerProduct) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto [rows, kq, cols] : {std::tuple<int, int, int>{16, 16, 16}, {1, 8, 16}, {5, 3, 7}, {16, 1, 1}}) {
    TileConfig c;
    c.palette_id = 1;
    c.rows[0] = static_cast<uint8_t>(rows), c.colsb[0] = static_cast<uint16_t>(4 * kq);  // A
    c.rows[1] = static_cast<uint8_t>(kq), c.colsb[1] = static_cast<uint16_t>(4 * cols);  // B
    c.rows[7] = static_cast<uint8_t>(rows), c.colsb[7] = static_cast<uint16_t>(4 * cols);  // C
    AmxEmulator::configure(c);
    std::vector<int8_t> a(rows * 4 * kq), b(kq * 4 * cols);
    std::vector<int32_t> cin(rows * cols), cout(rows * cols);
    for (auto& v : a) v = static_cast<int8_t>(byte(rng) - 128);
    for (auto& v : b) v = static_cast<int8_t>(byte(rng) - 128);
    for (auto& v : cin) v = static_cast<int32_t>(rng());
    cin[0] = 2147483647;  // + a positive product wraps
    a[0] = a[1] = a[2] = a[3] = 127;
    b[0] = b[1] = b[2] = b[3] = 127;
    AmxEmulator::load<0>(a.data(), 4 * kq);
    AmxEmulator::load<1>(b.data(), 4 * cols);
    AmxEmulator::load<7>(cin.data(), 4 * cols);
    AmxEmulator::dpbssd<7, 0, 1>();
    AmxEmulator::store<7>(cout.data(), 4 * cols);
    for (int m = 0; m < rows; ++m)
      for (int n = 0; n < cols; ++n) {
        uint32_t want = static_cast<uint32_t>(cin[m * cols + n]);
        for (int t = 0; t < 4 * kq; ++t) want += static_cast<uint32_t>(a[m * 4 * kq + t] * b[(t / 4) * 4 * cols + 4 * n + t % 4]);
        ASSERT_EQ(static_cast<uint32_t>(cout[m * cols + n]), want) << rows << "x" << kq << "x" << cols << " at " << m << "," << n;
      }
    AmxEmulator::release();
  }
}

// What LDTILECFG and the tile instructions fault on, the emulator refuses: so a kernel that passes under
// emulation configures and uses the tiles as the hardware accepts.
TEST(Kernels, AmxEmulatorRefusesWhatTheHardwareRefuses) {
  const auto refused = [](TileConfig c) {
    try {
      AmxEmulator::configure(c);
    } catch (const std::logic_error&) {
      return true;
    }
    return false;
  };
  TileConfig ok;
  ok.palette_id = 1;
  ok.rows[0] = 16, ok.colsb[0] = 64;
  EXPECT_FALSE(refused(ok));
  TileConfig bad = ok;
  bad.palette_id = 2;
  EXPECT_TRUE(refused(bad));
  bad = ok, bad.rows[0] = 17;
  EXPECT_TRUE(refused(bad));
  bad = ok, bad.colsb[0] = 68;
  EXPECT_TRUE(refused(bad));
  bad = ok, bad.reserved[3] = 1;
  EXPECT_TRUE(refused(bad));
  bad = ok, bad.start_row = 1;  // where an interrupted load or store resumes: not a fault
  EXPECT_FALSE(refused(bad));
  {
    int8_t rows[16 * 64];
    std::memset(rows, 5, sizeof(rows));
    AmxEmulator::load<0>(rows, 64);  // rows 1-15 only, and start_row back to 0
    int8_t back[16 * 64];
    AmxEmulator::store<0>(back, 64);
    EXPECT_EQ(back[0], 0);
    EXPECT_EQ(back[64], 5);
  }
  bad = ok, bad.rows[1] = 4;  // rows without bytes
  EXPECT_TRUE(refused(bad));
  bad = ok, bad.rows[9] = 1, bad.colsb[9] = 4;  // palette 1 has 8 tiles
  EXPECT_TRUE(refused(bad));

  // Shapes TDPBSSD does not accept: A's rows differ from C's, A's K from B's rows, B's width from C's.
  const auto dp_refused = [](int arows, int acolsb, int brows, int bcolsb, int crows, int ccolsb) {
    TileConfig c;
    c.palette_id = 1;
    c.rows[0] = static_cast<uint8_t>(arows), c.colsb[0] = static_cast<uint16_t>(acolsb);
    c.rows[1] = static_cast<uint8_t>(brows), c.colsb[1] = static_cast<uint16_t>(bcolsb);
    c.rows[2] = static_cast<uint8_t>(crows), c.colsb[2] = static_cast<uint16_t>(ccolsb);
    AmxEmulator::configure(c);
    try {
      AmxEmulator::dpbssd<2, 0, 1>();
    } catch (const std::logic_error&) {
      return true;
    }
    return false;
  };
  EXPECT_FALSE(dp_refused(16, 32, 8, 64, 16, 64));
  EXPECT_TRUE(dp_refused(15, 32, 8, 64, 16, 64));
  EXPECT_TRUE(dp_refused(16, 32, 4, 64, 16, 64));
  EXPECT_TRUE(dp_refused(16, 32, 8, 32, 16, 64));
  EXPECT_TRUE(dp_refused(16, 32, 8, 62, 16, 62));  // widths must be whole dwords

  // Nothing runs unconfigured: before any LDTILECFG on a thread, after TILERELEASE, or on a tile the
  // configuration left out.
  AmxEmulator::release();
  int8_t buf[64] = {};
  EXPECT_THROW(AmxEmulator::load<0>(buf, 64), std::logic_error);
  AmxEmulator::configure(ok);
  EXPECT_NO_THROW(AmxEmulator::load<0>(buf, 0));  // stride 0: every row from buf
  EXPECT_THROW(AmxEmulator::zero<3>(), std::logic_error);
  std::thread([&] { EXPECT_THROW(AmxEmulator::store<0>(buf, 64), std::logic_error); }).join();
  AmxEmulator::release();
}

#if defined(__x86_64__)
// The start-up check runs the tile code once under fault handlers: where AMX works it passes; on a CPU
// without AMX the first tile instruction raises SIGILL, which the check reports instead of dying, and the
// process goes on with its previous handlers.
TEST(Dispatch, AmxStartupCheckSurvivesAFault) {
  if (amx_kernels()) {
    EXPECT_EQ(amx::check_panels(), "");
    return;
  }
  if (cpu_features().amx_tile) GTEST_SKIP() << "AMX present but refused here: " << kernels_reason();
  // Without AVX-512 the fault could come from the staging code instead, anywhere: skip rather than guess.
  if (!avx512vnni_kernels()) GTEST_SKIP() << "no AVX-512 here: the panels' staging code would fault first";
  constexpr int kSignals[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
  struct sigaction before[4], after[4];
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], nullptr, &before[i]);
  const std::string why = amx::check_panels();
  EXPECT_EQ(why, "the panel GEMMs raised SIGILL on this machine");
  for (int i = 0; i < 4; ++i) {
    sigaction(kSignals[i], nullptr, &after[i]);
    EXPECT_EQ(before[i].sa_handler, after[i].sa_handler) << "signal " << kSignals[i];
    EXPECT_EQ(before[i].sa_flags & SA_SIGINFO, after[i].sa_flags & SA_SIGINFO) << "signal " << kSignals[i];
  }
  EXPECT_EQ(amx::check_panels(), why) << "a second check after a caught fault";
}
#endif

// What the AMX table needs, explained for a Sapphire Rapids server, one whose kernel withholds the tiles
// (older than 5.16, or a sandbox), and this machine; a refused QVL_ISA=amx names what is missing.
TEST(Dispatch, AmxNeedsAreExplained) {
  CpuFeatures spr;
  spr.avx2 = spr.fma = spr.f16c = spr.os_ymm = true;
  spr.avx512f = spr.avx512bw = spr.avx512vl = spr.avx512vnni = spr.os_zmm = true;
  spr.amx_tile = spr.amx_int8 = spr.os_amx = spr.amx_palette = spr.amx_permitted = true;
  EXPECT_TRUE(kernel_table_lacks("amx", spr).empty());
  CpuFeatures withheld = spr;
  withheld.amx_permitted = false;
  const auto lacks = kernel_table_lacks("amx", withheld);
  ASSERT_EQ(lacks.size(), 1u);
  EXPECT_NE(lacks[0].find("ARCH_REQ_XCOMP_PERM"), std::string::npos) << lacks[0];
  CpuFeatures icelake = spr;
  icelake.amx_tile = icelake.amx_int8 = icelake.os_amx = icelake.amx_palette = icelake.amx_permitted = false;
  EXPECT_EQ(kernel_table_lacks("amx", icelake).size(), 5u);

  const char* saved = std::getenv("QVL_ISA");
  const std::string keep = saved ? saved : "";
  setenv("QVL_ISA", "amx", 1);
  const Status s = check_isa_request();
  EXPECT_EQ(s.ok(), amx_kernels() != nullptr) << s.message();
  if (!s.ok() && !cpu_features().amx_tile) EXPECT_NE(s.message().find("AMX-TILE"), std::string::npos) << s.message();
  if (saved) setenv("QVL_ISA", keep.c_str(), 1);
  else unsetenv("QVL_ISA");
}

}  // namespace
}  // namespace qvl
