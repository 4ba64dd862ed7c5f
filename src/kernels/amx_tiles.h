// The AMX tile instructions the AMX table uses, twice: on the hardware (AmxHardware, x86_amx.cpp only,
// which is compiled with -mamx-tile -mamx-int8) and in software (AmxEmulator, plain C++), each a class of
// static functions with the tile numbers as template arguments (the instructions take them as
// immediates). The AMX kernels are templates over the class, so the code that runs on Sapphire Rapids is
// the code the tests run here through the emulator, which reads and writes exactly the bytes the
// instructions would and refuses (throws std::logic_error) what the hardware faults on: a bad tile
// configuration (LDTILECFG's #GP), tiles used unconfigured or with shapes that do not fit (#UD).
//
// Palette 1 (Intel SDM vol. 1 ch. 18, ISE ch. 3): 8 tiles tmm0-7 of up to 16 rows x 64 bytes; the
// configuration and the tiles are per-thread state.
//
// AmxEmulator lives in an unnamed namespace and builds its messages with snprintf, not std::string: the
// file that instantiates the kernels is compiled for AVX-512, and an inline function or template it emitted
// with external linkage could be the copy the linker keeps for code that runs on any x86-64.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace qvl {

// LDTILECFG's 64-byte operand.
struct alignas(64) TileConfig {
  uint8_t palette_id = 0;  // 1: 8 tiles of up to 16 x 64 bytes
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row, per tile
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

constexpr int kAmxTiles = 8, kAmxMaxRows = 16, kAmxMaxColsb = 64;

namespace {

class AmxEmulator {
 public:
  // LDTILECFG: #GP where the palette is not 0 or 1, a reserved byte is not 0, a tile has more than 16 rows
  // or 64 bytes per row, rows without bytes or bytes without rows, or a tile beyond tmm7 is configured.
  // Palette 0 returns the tiles to the init state (as TILERELEASE). start_row is where an interrupted
  // TILELOADD/TILESTORED resumes; the next one starts there and leaves it 0.
  static void configure(const TileConfig& c) {
    State& s = state();
    if (c.palette_id > 1) fault("ldtilecfg", "palette %d; expected 0 or 1", c.palette_id);
    if (c.palette_id == 0) {
      release();
      return;
    }
    for (uint8_t r : c.reserved)
      if (r) fault("ldtilecfg", "a non-zero reserved byte");
    for (int t = 0; t < 16; ++t) {
      if (t >= kAmxTiles && (c.rows[t] || c.colsb[t])) fault("ldtilecfg", "tmm%d configured; palette 1 has 8 tiles", t);
      if (c.rows[t] > kAmxMaxRows) fault("ldtilecfg", "tmm%d has %d rows; at most 16", t, c.rows[t]);
      if (c.colsb[t] > kAmxMaxColsb) fault("ldtilecfg", "tmm%d has %d bytes per row; at most 64", t, c.colsb[t]);
      if ((c.rows[t] == 0) != (c.colsb[t] == 0)) fault("ldtilecfg", "tmm%d has rows without bytes or bytes without rows", t);
    }
    s.cfg = c;
    s.configured = true;
    std::memset(s.tile, 0, sizeof(s.tile));
  }

  // TILERELEASE: back to the init state; every tile instruction but LDTILECFG faults until the next one.
  static void release() {
    State& s = state();
    s.configured = false;
    s.cfg = TileConfig{};
    std::memset(s.tile, 0, sizeof(s.tile));
  }

  // TILELOADD: row r of tile T from p + r * stride (colsb bytes); the rest of the tile zeroed.
  template <int T>
  static void load(const void* p, int64_t stride) {
    static_assert(T >= 0 && T < kAmxTiles);
    State& s = state();
    need(s, T, "tileloadd");
    for (int r = s.cfg.start_row; r < kAmxMaxRows; ++r) std::memset(s.tile[T][r], 0, kAmxMaxColsb);
    for (int r = s.cfg.start_row; r < s.cfg.rows[T]; ++r)
      std::memcpy(s.tile[T][r], static_cast<const uint8_t*>(p) + r * stride, s.cfg.colsb[T]);
    s.cfg.start_row = 0;
  }

  // TILESTORED: row r of tile T to p + r * stride (colsb bytes).
  template <int T>
  static void store(void* p, int64_t stride) {
    static_assert(T >= 0 && T < kAmxTiles);
    State& s = state();
    need(s, T, "tilestored");
    for (int r = s.cfg.start_row; r < s.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, s.tile[T][r], s.cfg.colsb[T]);
    s.cfg.start_row = 0;
  }

  // TILEZERO.
  template <int T>
  static void zero() {
    static_assert(T >= 0 && T < kAmxTiles);
    State& s = state();
    need(s, T, "tilezero");
    std::memset(s.tile[T], 0, sizeof(s.tile[T]));
    s.cfg.start_row = 0;
  }

  // TDPBSSD C += A · B on signed bytes: C[m][n] += sum over k < A.colsb / 4 and j < 4 of A[m][4k + j] *
  // B[k][4n + j], int32 wrapping. #UD unless the three tiles differ, are configured, their widths are whole
  // dwords, and A.rows == C.rows, A.colsb == 4 B.rows, B.colsb == C.colsb.
  template <int C, int A, int B>
  static void dpbssd() {
    static_assert(C >= 0 && C < kAmxTiles && A >= 0 && A < kAmxTiles && B >= 0 && B < kAmxTiles);
    static_assert(C != A && C != B && A != B, "tdpbssd: the three tiles must differ");
    State& s = state();
    need(s, C, "tdpbssd");
    need(s, A, "tdpbssd");
    need(s, B, "tdpbssd");
    const TileConfig& g = s.cfg;
    for (int t : {A, B, C})
      if (g.colsb[t] % 4) fault("tdpbssd", "tmm%d has %d bytes per row; expected a multiple of 4", t, g.colsb[t]);
    if (g.rows[A] != g.rows[C]) fault("tdpbssd", "A has %d rows, C %d; expected equal", g.rows[A], g.rows[C]);
    if (g.colsb[A] != 4 * g.rows[B])
      fault("tdpbssd", "A has %d bytes per row; expected 4 x B's %d rows", g.colsb[A], g.rows[B]);
    if (g.colsb[B] != g.colsb[C]) fault("tdpbssd", "B has %d bytes per row, C %d; expected equal", g.colsb[B], g.colsb[C]);
    for (int m = 0; m < g.rows[C]; ++m)
      for (int n = 0; n < g.colsb[C] / 4; ++n) {
        uint32_t acc;
        std::memcpy(&acc, &s.tile[C][m][4 * n], 4);
        for (int k = 0; k < g.colsb[A] / 4; ++k)
          for (int j = 0; j < 4; ++j)
            acc += static_cast<uint32_t>(int32_t{static_cast<int8_t>(s.tile[A][m][4 * k + j])} *
                                         int32_t{static_cast<int8_t>(s.tile[B][k][4 * n + j])});
        std::memcpy(&s.tile[C][m][4 * n], &acc, 4);
      }
    s.cfg.start_row = 0;
  }

 private:
  struct State {
    bool configured = false;
    TileConfig cfg;
    uint8_t tile[kAmxTiles][kAmxMaxRows][kAmxMaxColsb] = {};
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void need(const State& s, int t, const char* insn) {
    if (!s.configured) fault(insn, "the tiles are not configured (no LDTILECFG since the last TILERELEASE)");
    if (s.cfg.rows[t] == 0) fault(insn, "tmm%d is not configured", t);
  }
  [[noreturn]] __attribute__((format(printf, 2, 3))) static void fault(const char* insn, const char* fmt, ...) {
    char what[160];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(what, sizeof(what), fmt, args);
    va_end(args);
    char msg[200];
    std::snprintf(msg, sizeof(msg), "AMX emulation: %s: %s", insn, what);
    throw std::logic_error(msg);
  }
};

}  // namespace
}  // namespace qvl
