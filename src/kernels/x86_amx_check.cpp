// The AMX table's start-up check: tile code that no test of this project's machines could run is checked
// where it runs, once, before it is trusted. Its panels must equal their slow twins bit for bit on random
// blocks, and a fault while they run (a CPU or hypervisor that advertises AMX and does not run it) is
// caught and reported instead of killing the process. Compiled for baseline x86-64, like dispatch.cpp.
#include <xmmintrin.h>

#include <csetjmp>
#include <csignal>
#include <cstring>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kernels/x86_amx.h"

namespace qvl {
namespace amx {
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

// One thread's faults (raised by its own instructions, not sent by kill) jump back to where guarded() was
// called; any other fault goes to the handler that was there before. One check at a time: the handlers are
// the process's.
constexpr int kSignals[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
struct sigaction g_previous[std::size(kSignals)];
std::mutex g_checking;
thread_local sigjmp_buf* t_probe = nullptr;

void on_fault(int sig, siginfo_t* info, void* context) {
  if (t_probe && info->si_code > 0) siglongjmp(*t_probe, sig);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if (prev.sa_flags & SA_SIGINFO) {
      prev.sa_sigaction(sig, info, context);
    } else if (prev.sa_handler == SIG_DFL) {
      std::signal(sig, SIG_DFL);  // the faulting instruction runs again and takes the default action
    } else if (prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
    }
  }
}

// Runs call(arg) and returns 0, or the signal its instructions raised. Nothing here is changed between
// sigsetjmp and the jump back.
int guarded(void (*call)(void*), void* arg) {
  sigjmp_buf jump;
  if (const int sig = sigsetjmp(jump, 1); sig != 0) {
    t_probe = nullptr;
    return sig;
  }
  t_probe = &jump;
  call(arg);
  t_probe = nullptr;
  return 0;
}

template <class Block>
struct PanelCall {
  Panel<Block> panel;
  const Block* w;
  int ngroups;
  Buffers* b;
  int64_t nb, n, ldy;
  static void run(void* self) {
    const PanelCall& c = *static_cast<PanelCall*>(self);
    c.panel(c.w, c.ngroups, c.b->xq.data(), c.b->xd.data(), c.b->xsum.data(), c.nb, c.n, c.b->got.data(), c.ldy);
  }
};

// One panel against its slow twin on two full 16-row tiles and a tail of 5, one group and two: 0 when
// they agree, -1 when they differ, else the signal the panel raised. Only the panel runs guarded.
template <class Block>
int panel_matches(Buffers& b, Panel<Block> panel, Panel<Block> ref, int64_t nb, int64_t blocks_per_group, std::mt19937& rng) {
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
    ref(w, ngroups, b.xq.data(), b.xd.data(), b.xsum.data(), nb, n, b.want.data(), ldy);
    PanelCall<Block> call{panel, w, ngroups, &b, nb, n, ldy};
    if (const int sig = guarded(PanelCall<Block>::run, &call)) return sig;
    if (std::memcmp(b.got.data(), b.want.data(), b.got.size() * sizeof(float)) != 0) return -1;
  }
  return 0;
}

int panels_match(Buffers& b) {
  std::mt19937 rng(20261201);
  for (int64_t nb : {3, 4}) {  // an odd and an even block count
    if (const int r = panel_matches<BlockQ8_0x8>(b, gemm_q8_0_panel, gemm_q8_0_panel_ref, nb, nb, rng)) return r;
    if (const int r = panel_matches<BlockQ4_0x8>(b, gemm_q4_0_panel, gemm_q4_0_panel_ref, nb, nb, rng)) return r;
  }
  constexpr int64_t nb = 16;  // two super-blocks
  if (const int r = panel_matches<BlockQ4_Kx8>(b, gemm_q4_k_panel, gemm_q4_k_panel_ref, nb, nb / 8, rng)) return r;
  if (const int r = panel_matches<BlockQ5_Kx8>(b, gemm_q5_k_panel, gemm_q5_k_panel_ref, nb, nb / 8, rng)) return r;
  return panel_matches<BlockQ6_Kx8>(b, gemm_q6_k_panel, gemm_q6_k_panel_ref, nb, nb / 8, rng);
}

}  // namespace

// amx_kernels() asks for the tile permission first: without it the first tile instruction faults. A caught
// fault skips the kernel's return from the handler, so the floating-point control state is put back here.
std::string check_panels() {
  const std::lock_guard<std::mutex> lock(g_checking);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    std::memset(&g_previous[i], 0, sizeof(g_previous[i]));
    sigaction(kSignals[i], &sa, &g_previous[i]);
  }
  const unsigned mxcsr = _mm_getcsr();
  uint16_t x87;
  asm volatile("fnstcw %0" : "=m"(x87));
  Buffers buffers;
  const int r = panels_match(buffers);
  _mm_setcsr(mxcsr);
  asm volatile("fldcw %0" ::"m"(x87));
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  if (r == 0) return "";
  if (r < 0) return "the panel GEMMs disagree with their scalar twins on this machine";
  const char* name = r == SIGILL ? "SIGILL" : r == SIGSEGV ? "SIGSEGV" : r == SIGBUS ? "SIGBUS" : "SIGFPE";
  return std::string("the panel GEMMs raised ") + name + " on this machine";
}

}  // namespace amx
}  // namespace qvl
