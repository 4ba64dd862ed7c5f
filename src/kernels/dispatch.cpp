// Chooses the kernel table once: CPUID for the instruction sets, XGETBV for the OS saving the registers.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

namespace {

// The features a table needs that this machine lacks, by their CPUID / XCR0 names; empty: it can run it.
std::vector<std::string> missing_for(const std::string& table, const CpuFeatures& f) {
  std::vector<std::string> m;
  if (table == "generic") return m;
  if (!f.avx2) m.push_back("AVX2");
  if (!f.fma) m.push_back("FMA");
  if (!f.f16c) m.push_back("F16C");
  if (!f.os_ymm) m.push_back("OS-saved YMM state (XCR0)");
  if (table == "avx512vnni") {
    if (!f.avx512f) m.push_back("AVX512F");
    if (!f.avx512vl) m.push_back("AVX512VL");
    if (!f.avx512vnni) m.push_back("AVX512_VNNI");
    if (!f.os_zmm) m.push_back("OS-saved ZMM and opmask state (XCR0)");
  }
  return m;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

const char* const kTables[] = {"generic", "avx2", "avx512vnni"};
const char* const kNeeds[] = {"nothing", "AVX2, FMA and F16C with the OS saving the YMM registers",
                              "AVX2, FMA, F16C, AVX512F, AVX512VL and AVX512_VNNI with the OS saving the ZMM registers"};

struct Choice {
  const KernelTable* table;
  std::string reason;
};

const Choice& choice() {
  static const Choice c = [] {
    const CpuFeatures f = cpu_features();
    const KernelTable* avx2 = avx2_kernels();
    const KernelTable* vnni = avx512vnni_kernels();
    const KernelTable* best = vnni ? vnni : avx2 ? avx2 : &generic_kernels();
    std::string why = std::string(best->name) + ": the best table this machine runs";
    if (best == vnni) {
      why += " (CPUID has AVX2, FMA, F16C, AVX512F, AVX512VL and AVX512_VNNI; the OS saves the ZMM registers)";
    } else if (best == avx2) {
      why += " (CPUID has AVX2, FMA and F16C; the OS saves the YMM registers); avx512vnni not: lacks " +
             joined(missing_for("avx512vnni", f));
    } else {
      why += "; avx2 not: lacks " + joined(missing_for("avx2", f));
    }
    const char* want = std::getenv("QVL_ISA");
    if (want && *want) {
      const KernelTable* forced = !std::strcmp(want, "generic") ? &generic_kernels()
                                  : !std::strcmp(want, "avx2") ? avx2
                                  : !std::strcmp(want, "avx512vnni") ? vnni
                                                                     : nullptr;
      if (forced) return Choice{forced, std::string(forced->name) + ": forced by QVL_ISA=" + want};
      std::fprintf(stderr, "qvl: %s; using %s\n", check_isa_request().message().c_str(), best->name);
    }
    return Choice{best, why};
  }();
  return c;
}

}  // namespace

const KernelTable& kernels() { return *choice().table; }

const std::string& kernels_reason() { return choice().reason; }

Status check_isa_request() {
  const char* want = std::getenv("QVL_ISA");
  if (!want || !*want) return Status::Ok();
  // Whether a table runs is the table's own decision (its constructor returns null); missing_for only
  // explains a refusal.
  const KernelTable* const tables[] = {&generic_kernels(), avx2_kernels(), avx512vnni_kernels()};
  for (size_t i = 0; i < sizeof(kTables) / sizeof(kTables[0]); ++i) {
    if (std::strcmp(want, kTables[i]) != 0) continue;
    if (tables[i]) return Status::Ok();
    return Status::Error(std::string("QVL_ISA=") + want + ": this machine cannot run the " + want + " kernels: they need " +
                         kNeeds[i] + ", and it lacks " + joined(missing_for(kTables[i], cpu_features())) +
                         "; unset QVL_ISA for the best table it runs");
  }
  return Status::Error(std::string("QVL_ISA='") + want + "' names no kernel table: expected generic, avx2 or avx512vnni");
}

}  // namespace qvl
