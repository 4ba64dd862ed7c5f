// The AMX table's start-up check: tile code that no test of this project's machines could run is checked
// where it runs, once, before it is trusted. Its panels must equal their slow twins bit for bit on random
// blocks, and a fault while they run (a CPU or hypervisor that advertises AMX and does not run it) is
// caught and reported instead of killing the process. Compiled for baseline x86-64, like dispatch.cpp.
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace qvl {
namespace amx {  // x86_amx.cpp
void gemm_q8_0_panel(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q4_0_panel(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q4_k_panel(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q5_k_panel(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q6_k_panel(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                     int64_t nb, int64_t n, float* y, int64_t ldy);

namespace {

// The check's buffers, owned outside the part a fault jumps out of (so nothing leaks then).
struct Buffers {
  std::vector<int8_t> xq;
  std::vector<float> xd, got, want;
  std::vector<int32_t> xsum;
  std::vector<uint8_t> w;
};

// count blocks of random bytes (every value, so every q8_0 value, nibble and scale code) with valid f16
// scales, in b.w.
template <class Block>
const Block* random_blocks(Buffers& b, int64_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  b.w.resize(static_cast<size_t>(count) * sizeof(Block));
  for (uint8_t& v : b.w) v = static_cast<uint8_t>(byte(rng));
  Block* blocks = reinterpret_cast<Block*>(b.w.data());
  for (int64_t i = 0; i < count; ++i) {
    for (uint16_t& d : blocks[i].d) d = f32_to_f16(scale(rng));
    if constexpr (requires { blocks[i].dmin; })
      for (uint16_t& d : blocks[i].dmin) d = f32_to_f16(scale(rng));
  }
  return blocks;
}

template <class Block>
using Panel = void (*)(const Block*, int, const int8_t*, const float*, const int32_t*, int64_t, int64_t, float*, int64_t);

// One panel against its slow twin on two full 16-row tiles and a tail of 5, one group and two.
template <class Block>
bool panel_matches(Buffers& b, Panel<Block> panel, Panel<Block> ref, int64_t nb, int64_t blocks_per_group, std::mt19937& rng) {
  constexpr int64_t n = 37, ldy = 16;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  b.xq.resize(static_cast<size_t>(n * nb * kQK));
  b.xd.resize(static_cast<size_t>(n * nb));
  b.xsum.resize(static_cast<size_t>(n * nb));
  for (int64_t i = 0; i < n * nb; ++i) {
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) sum += b.xq[static_cast<size_t>(i * kQK + j)] = static_cast<int8_t>(byte(rng) - 128);
    b.xsum[static_cast<size_t>(i)] = sum;
    b.xd[static_cast<size_t>(i)] = scale(rng);
  }
  const Block* w = random_blocks<Block>(b, 2 * blocks_per_group, rng);
  for (int ngroups : {1, 2}) {
    b.got.assign(static_cast<size_t>(n * ldy), -1.0f);
    b.want.assign(static_cast<size_t>(n * ldy), -1.0f);
    panel(w, ngroups, b.xq.data(), b.xd.data(), b.xsum.data(), nb, n, b.got.data(), ldy);
    ref(w, ngroups, b.xq.data(), b.xd.data(), b.xsum.data(), nb, n, b.want.data(), ldy);
    if (std::memcmp(b.got.data(), b.want.data(), b.got.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

bool panels_match(Buffers& b) {
  std::mt19937 rng(20261201);
  for (int64_t nb : {3, 4}) {  // an odd and an even block count
    if (!panel_matches<BlockQ8_0x8>(b, gemm_q8_0_panel, gemm_q8_0_panel_ref, nb, nb, rng)) return false;
    if (!panel_matches<BlockQ4_0x8>(b, gemm_q4_0_panel, gemm_q4_0_panel_ref, nb, nb, rng)) return false;
  }
  constexpr int64_t nb = 16;  // two super-blocks
  return panel_matches<BlockQ4_Kx8>(b, gemm_q4_k_panel, gemm_q4_k_panel_ref, nb, nb / 8, rng) &&
         panel_matches<BlockQ5_Kx8>(b, gemm_q5_k_panel, gemm_q5_k_panel_ref, nb, nb / 8, rng) &&
         panel_matches<BlockQ6_Kx8>(b, gemm_q6_k_panel, gemm_q6_k_panel_ref, nb, nb / 8, rng);
}

// A fault on the checking thread jumps back out of the check; one on any other thread is not ours and
// gets the default action.
thread_local sigjmp_buf* t_probe = nullptr;
void on_fault(int sig) {
  if (t_probe) siglongjmp(*t_probe, sig);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

// Empty when the panels agree with their twins; else what went wrong. Call only once the process holds the
// tile permission (amx_kernels() asks for it): without it the first tile instruction faults.
std::string check_panels() {
  constexpr int kSignals[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
  struct sigaction old[4], sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_fault;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &sa, &old[i]);
  Buffers buffers;
  sigjmp_buf jump;
  const char* disagree = nullptr;
  std::string result;
  if (const int sig = sigsetjmp(jump, 1); sig == 0) {
    t_probe = &jump;
    if (!panels_match(buffers)) disagree = "its panel GEMMs disagree with their scalar twins on this machine";
    t_probe = nullptr;
    if (disagree) result = disagree;
  } else {
    result = std::string("its panel GEMMs raised ") + (sig == SIGILL ? "SIGILL" : sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGFPE") +
             " on this machine";
  }
  t_probe = nullptr;
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &old[i], nullptr);
  return result;
}

}  // namespace amx
}  // namespace qvl
