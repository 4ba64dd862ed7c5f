// Chooses the kernel table once: CPUID for the instruction sets, XGETBV for the OS saving the registers.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace qvl {

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_ymm = (lo & 0x6) == 0x6;  // SSE and AVX state enabled by the OS
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
  }
#endif
  return f;
}

const KernelTable& kernels() {
  static const KernelTable* chosen = [] {
    const KernelTable* best = avx2_kernels();
    const char* want = std::getenv("QVL_ISA");
    if (want && *want) {
      if (!std::strcmp(want, "generic")) return &generic_kernels();
      if (!std::strcmp(want, "avx2")) {
        if (best) return best;
        std::fprintf(stderr, "qvl: QVL_ISA=avx2 but this CPU/OS cannot run AVX2+FMA+F16C; using generic kernels\n");
        return &generic_kernels();
      }
      std::fprintf(stderr, "qvl: QVL_ISA=%s is not one of generic, avx2; ignoring it\n", want);
    }
    return best ? best : &generic_kernels();
  }();
  return *chosen;
}

}  // namespace qvl
