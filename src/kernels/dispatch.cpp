// Chooses the kernel table once: CPUID for the instruction sets, XGETBV for the OS saving the registers.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace qvl {

namespace avx512vnni {  // x86_avx512vnni.cpp
void gemm_f32_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
                      int mr, int nc);
float exp_scaled(float* x, int64_t n, float scale);
void gemm_q8_0x16(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr);
void gemm_q4_0x16(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr);
}  // namespace avx512vnni

const KernelTable* avx512vnni_kernels() {
  const KernelTable* base = avx2_kernels();
  const CpuFeatures f = cpu_features();
  if (!base || !(f.avx512f && f.avx512vl && f.avx512vnni && f.os_zmm)) return nullptr;
  static const KernelTable table = [base] {
    KernelTable t = *base;
    t.name = "avx512vnni";
    t.gemm_f32_nn_tile = avx512vnni::gemm_f32_nn_tile;
    t.nn_rows = 12;
    t.nn_cols = 32;
    t.exp_scaled = avx512vnni::exp_scaled;
    t.gemm_q8_0x16 = avx512vnni::gemm_q8_0x16;
    t.gemm_q4_0x16 = avx512vnni::gemm_q4_0x16;
    return t;
  }();
  return &table;
}

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
    f.os_ymm = (lo & 0x6) == 0x6;    // SSE and AVX state enabled by the OS
    f.os_zmm = (lo & 0xE6) == 0xE6;  // and the AVX-512 opmask and upper registers
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
  }
#endif
  return f;
}

const KernelTable& kernels() {
  static const KernelTable* chosen = [] {
    const KernelTable* avx2 = avx2_kernels();
    const KernelTable* vnni = avx512vnni_kernels();
    const KernelTable* best = vnni ? vnni : avx2;
    const char* want = std::getenv("QVL_ISA");
    if (want && *want) {
      if (!std::strcmp(want, "generic")) return &generic_kernels();
      if (!std::strcmp(want, "avx2") || !std::strcmp(want, "avx512vnni")) {
        const KernelTable* t = !std::strcmp(want, "avx2") ? avx2 : vnni;
        if (t) return t;
        std::fprintf(stderr, "qvl: QVL_ISA=%s but this CPU/OS cannot run it; using %s kernels\n", want,
                     best ? best->name : "generic");
      } else {
        std::fprintf(stderr, "qvl: QVL_ISA=%s is not one of generic, avx2, avx512vnni; ignoring it\n", want);
      }
    }
    return best ? best : &generic_kernels();
  }();
  return *chosen;
}

}  // namespace qvl
