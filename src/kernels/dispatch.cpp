// Chooses the kernel table once: on x86-64 CPUID for the instruction sets and XGETBV for the OS saving the
// registers, on ARM64 the kernel's HWCAP bits. Every table is known by name on every machine (QVL_ISA=avx2
// on an ARM server is refused with what it lacks); a table of the other architecture is never built.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/x86_amx.h"
#include "kernels/x86_avx512vnni.h"
#include "kernels/x86_avxvnni.h"
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include "kernels/arm64_neon.h"
#endif

namespace qvl {

#if defined(__x86_64__)
constexpr long kArchGetXcompPerm = 0x1022;  // asm/prctl.h ARCH_GET_XCOMP_PERM
constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
constexpr long kXfeatureXtileData = 18;     // the XSAVE component of the tile data

// Why a table whose needs are all met is not used (its start-up check failed); empty otherwise.
std::string& amx_refusal() {
  static std::string why;
  return why;
}

const KernelTable* avxvnni_kernels() {
  const KernelTable* base = avx2_kernels();
  if (!base || !cpu_features().avxvnni) return nullptr;
  static const KernelTable table = [base] {
    KernelTable t = *base;
    t.name = "avxvnni";
    t.gemm_q8_0x8 = avxvnni::gemm_q8_0x8;
    t.gemm_q4_0x8 = avxvnni::gemm_q4_0x8;
    t.gemm_q8_0x16 = avxvnni::gemm_q8_0x16;
    t.gemm_q4_0x16 = avxvnni::gemm_q4_0x16;
    // Q6_K keeps the AVX2 tile (signed values times signed activations: maddubs with the sign trick).
    t.gemm_q4_kx8 = avxvnni::gemm_q4_kx8;
    t.gemm_q5_kx8 = avxvnni::gemm_q5_kx8;
    t.gemm_q4_kx16 = two_kgroups<BlockQ4_Kx8, avxvnni::gemm_q4_kx8>;
    t.gemm_q5_kx16 = two_kgroups<BlockQ5_Kx8, avxvnni::gemm_q5_kx8>;
    return t;
  }();
  return &table;
}

const KernelTable* avx512vnni_kernels() {
  const KernelTable* base = avx2_kernels();
  const CpuFeatures f = cpu_features();
  if (!base || !(f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.os_zmm)) return nullptr;
  static const KernelTable table = [base] {
    KernelTable t = *base;
    t.name = "avx512vnni";
    t.gemm_f32_nn_tile = avx512vnni::gemm_f32_nn_tile;
    t.nn_rows = 6;
    t.nn_cols = 64;
    t.exp_scaled = avx512vnni::exp_scaled;
    t.gemm_q8_0x16 = avx512vnni::gemm_q8_0x16;
    t.gemm_q4_0x16 = avx512vnni::gemm_q4_0x16;
    t.gemm_q8_0x32 = avx512vnni::gemm_q8_0x32;
    t.gemm_q4_0x32 = avx512vnni::gemm_q4_0x32;
    t.gemm_q4_kx8 = avx512vnni::gemm_q4_kx8;
    t.gemm_q5_kx8 = avx512vnni::gemm_q5_kx8;
    t.gemm_q6_kx8 = avx512vnni::gemm_q6_kx8;
    t.gemm_q4_kx16 = avx512vnni::gemm_q4_kx16;
    t.gemm_q5_kx16 = avx512vnni::gemm_q5_kx16;
    t.gemm_q6_kx16 = avx512vnni::gemm_q6_kx16;
    return t;
  }();
  return &table;
}

const KernelTable* amx_kernels() {
  const KernelTable* base = avx512vnni_kernels();
  const CpuFeatures f = cpu_features();
  if (!base || !(f.amx_tile && f.amx_int8 && f.os_amx && f.amx_palette)) return nullptr;
  static const KernelTable* table = [base]() -> const KernelTable* {
    // Linux 5.16+ hands out the tile data per process on request, asked for only now that the table is
    // wanted (a process with the permission pays for it in every signal frame); without it a tile
    // instruction faults.
    if (!cpu_features().amx_permitted) syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData);
    if (!cpu_features().amx_permitted) return nullptr;
    static KernelTable t = *base;
    t.name = "amx";
    t.gemm_q8_0_panel = amx::gemm_q8_0_panel;
    t.gemm_q4_0_panel = amx::gemm_q4_0_panel;
    t.gemm_q4_k_panel = amx::gemm_q4_k_panel;
    t.gemm_q5_k_panel = amx::gemm_q5_k_panel;
    t.gemm_q6_k_panel = amx::gemm_q6_k_panel;
    if (const std::string why = amx::check_panels(); !why.empty()) {
      amx_refusal() = why;
      std::fprintf(stderr, "qvl: not using the AMX kernels: %s\n", why.c_str());
      return nullptr;
    }
    return &t;
  }();
  return table;
}

const KernelTable* amx_emulated_kernels() {
  const KernelTable* base = avx512vnni_kernels();
  if (!base) return nullptr;
  static const KernelTable table = [base] {
    KernelTable t = *base;
    t.name = "amx-emulated";
    t.gemm_q8_0_panel = amx::gemm_q8_0_panel_emulated;
    t.gemm_q4_0_panel = amx::gemm_q4_0_panel_emulated;
    t.gemm_q4_k_panel = amx::gemm_q4_k_panel_emulated;
    t.gemm_q5_k_panel = amx::gemm_q5_k_panel_emulated;
    t.gemm_q6_k_panel = amx::gemm_q6_k_panel_emulated;
    return t;
  }();
  return &table;
}

const KernelTable* neon_kernels() { return nullptr; }

#elif defined(__aarch64__)
const KernelTable* neon_kernels() {
  const CpuFeatures f = cpu_features();
  if (!(f.asimd && f.asimddp)) return nullptr;
  static const KernelTable table = [] {
    KernelTable t = generic_kernels();
    t.name = "neon";
    t.quantize_act = neon::quantize_act;
    t.gemm_q8_0x8 = neon::gemm_q8_0x8;
    t.gemm_q4_0x8 = neon::gemm_q4_0x8;
    t.gemm_q8_0x16 = two_groups<BlockQ8_0x8, neon::gemm_q8_0x8>;
    t.gemm_q4_0x16 = two_groups<BlockQ4_0x8, neon::gemm_q4_0x8>;
    t.gemm_q4_kx8 = neon::gemm_q4_kx8;
    t.gemm_q5_kx8 = neon::gemm_q5_kx8;
    t.gemm_q6_kx8 = neon::gemm_q6_kx8;
    t.gemm_q4_kx16 = two_kgroups<BlockQ4_Kx8, neon::gemm_q4_kx8>;
    t.gemm_q5_kx16 = two_kgroups<BlockQ5_Kx8, neon::gemm_q5_kx8>;
    t.gemm_q6_kx16 = two_kgroups<BlockQ6_Kx8, neon::gemm_q6_kx8>;
    return t;
  }();
  return &table;
}

const KernelTable* avx2_kernels() { return nullptr; }
const KernelTable* avxvnni_kernels() { return nullptr; }
const KernelTable* avx512vnni_kernels() { return nullptr; }
const KernelTable* amx_kernels() { return nullptr; }
const KernelTable* amx_emulated_kernels() { return nullptr; }

#else
const KernelTable* neon_kernels() { return nullptr; }
const KernelTable* avx2_kernels() { return nullptr; }
const KernelTable* avxvnni_kernels() { return nullptr; }
const KernelTable* avx512vnni_kernels() { return nullptr; }
const KernelTable* amx_kernels() { return nullptr; }
const KernelTable* amx_emulated_kernels() { return nullptr; }
#endif

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
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = a & (1u << 4);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
  }
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_amx = (lo & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA
  }
  // Palette 1: bytes_per_row (EBX 15:0), max_names (EBX 31:16), max_rows (ECX 15:0); the TMUL unit:
  // tmul_maxk rows of B (EBX 7:0), tmul_maxn bytes per row (EBX 23:8). The panels use 6 tiles of up to
  // 16 x 64 bytes and K of 8 rows.
  if (f.amx_tile && __get_cpuid_max(0, nullptr) >= 0x1E && __get_cpuid_count(0x1D, 1, &a, &b, &c, &d)) {
    f.amx_palette = (b & 0xFFFF) >= 64 && (b >> 16) >= 8 && (c & 0xFFFF) >= 16;
    if (__get_cpuid_count(0x1E, 0, &a, &b, &c, &d)) f.amx_palette = f.amx_palette && (b & 0xFF) >= 8 && ((b >> 8) & 0xFFFF) >= 64;
  }
  // Whether Linux has granted this process the tile data (amx_kernels() asks for it); a query only.
  if (f.amx_tile && f.os_amx) {
    unsigned long permitted = 0;
    f.amx_permitted = syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) == 0 && (permitted >> kXfeatureXtileData) & 1;
  }
#elif defined(__aarch64__)
  const unsigned long hw = getauxval(AT_HWCAP);
  f.asimd = hw & HWCAP_ASIMD;
  f.asimddp = hw & HWCAP_ASIMDDP;
#endif
  return f;
}

namespace {

// What a table needs, by the CPUID / XCR0 names of its features, and the ones this machine lacks.
struct Need {
  const char* what;
  bool CpuFeatures::*have;
};
const Need kAvx2Needs[] = {{"AVX2", &CpuFeatures::avx2},
                           {"FMA", &CpuFeatures::fma},
                           {"F16C", &CpuFeatures::f16c},
                           {"OS-saved YMM state (XCR0)", &CpuFeatures::os_ymm}};
const Need kAvxVnniNeeds[] = {{"AVX_VNNI", &CpuFeatures::avxvnni}};
const Need kNeonNeeds[] = {{"ASIMD", &CpuFeatures::asimd}, {"ASIMDDP (sdot)", &CpuFeatures::asimddp}};
const Need kAvx512VnniNeeds[] = {{"AVX512F", &CpuFeatures::avx512f},
                                 {"AVX512BW", &CpuFeatures::avx512bw},
                                 {"AVX512VL", &CpuFeatures::avx512vl},
                                 {"AVX512_VNNI", &CpuFeatures::avx512vnni},
                                 {"OS-saved ZMM and opmask state (XCR0)", &CpuFeatures::os_zmm}};
const Need kAmxNeeds[] = {{"AMX-TILE", &CpuFeatures::amx_tile},
                          {"AMX-INT8", &CpuFeatures::amx_int8},
                          {"OS-saved tile state (XCR0 XTILECFG, XTILEDATA)", &CpuFeatures::os_amx},
                          {"tile palette 1 of 8 tiles x 16 rows x 64 bytes and a TMUL of K 8 x N 64 (CPUID 0x1D, 0x1E)",
                           &CpuFeatures::amx_palette},
                          {"the kernel's permission to use the tiles (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+)",
                           &CpuFeatures::amx_permitted}};

// The tables from the least to the most preferred within an architecture: each x86 table needs the AVX2
// set and its own; the AMX table the AVX-512 VNNI set too (it is that table plus the tile panels).
enum class Arch { kAny, kX86, kArm64 };
struct TableSpec {
  const char* name;
  Arch arch;
  const KernelTable* (*make)();  // null where the machine cannot run it: the one test of whether it can
  const Need* own;
  size_t own_count;
  bool needs_avx2;
  bool needs_avx512 = false;
};
const KernelTable* generic_ptr() { return &generic_kernels(); }
const TableSpec kSpecs[] = {
    {"generic", Arch::kAny, generic_ptr, nullptr, 0, false},
    {"neon", Arch::kArm64, neon_kernels, kNeonNeeds, std::size(kNeonNeeds), false},
    {"avx2", Arch::kX86, avx2_kernels, nullptr, 0, true},
    {"avxvnni", Arch::kX86, avxvnni_kernels, kAvxVnniNeeds, std::size(kAvxVnniNeeds), true},
    {"avx512vnni", Arch::kX86, avx512vnni_kernels, kAvx512VnniNeeds, std::size(kAvx512VnniNeeds), true},
    {"amx", Arch::kX86, amx_kernels, kAmxNeeds, std::size(kAmxNeeds), true, true},
};

std::vector<const Need*> needs_of(const TableSpec& t) {
  std::vector<const Need*> n;
  if (t.needs_avx2)
    for (const Need& x : kAvx2Needs) n.push_back(&x);
  if (t.needs_avx512)
    for (const Need& x : kAvx512VnniNeeds) n.push_back(&x);
  for (size_t i = 0; i < t.own_count; ++i) n.push_back(&t.own[i]);
  return n;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
  return s;
}

// "AVX2, FMA, F16C and AVX_VNNI" (the CPUID bits) plus what the OS must save, or "nothing".
std::string needs_text(const TableSpec& t) {
  std::vector<std::string> v;
  for (const Need* n : needs_of(t)) v.push_back(n->what);
  return v.empty() ? "nothing" : joined(v);
}

std::vector<std::string> missing(const TableSpec& t, const CpuFeatures& f) {
  std::vector<std::string> m;
  for (const Need* n : needs_of(t))
    if (!(f.*(n->have))) m.push_back(n->what);
  return m;
}

// Why a table the machine cannot run is refused: "lacks AVX_VNNI", or where it has everything the table
// needs, "failed its start-up check: ..." (the AMX panels against their slow twins).
std::string why_not(const TableSpec& t, const CpuFeatures& f) {
  const std::vector<std::string> m = missing(t, f);
  if (!m.empty()) return "lacks " + joined(m);
#if defined(__x86_64__)
  if (!std::strcmp(t.name, "amx") && !amx_refusal().empty()) return "failed its start-up check: " + amx_refusal();
#endif
  return "failed its start-up check";
}

struct Choice {
  const KernelTable* table;
  std::string reason;
};

const Choice& choice() {
  static const Choice c = [] {
    // A forced table is the only one made: another table's start-up (AMX asks the kernel for its tiles and
    // runs its kernels once) is not what the user asked for.
    const char* want = std::getenv("QVL_ISA");
    if (want && *want)
      for (const TableSpec& t : kSpecs)
        if (!std::strcmp(want, t.name) && t.make()) return Choice{t.make(), std::string(t.name) + ": forced by QVL_ISA=" + want};
    size_t best = 0;
    for (size_t i = 0; i < std::size(kSpecs); ++i)
      if (kSpecs[i].make()) best = i;
    const CpuFeatures f = cpu_features();  // after make(): the AMX table asks for the tiles' permission
    std::string why = std::string(kSpecs[best].name) + ": the best table this machine runs";
    if (best > 0) why += " (it has " + needs_text(kSpecs[best]) + ")";
#if defined(__aarch64__)
    const Arch here = Arch::kArm64;
#else
    const Arch here = Arch::kX86;
#endif
    for (size_t i = best + 1; i < std::size(kSpecs); ++i)
      if (kSpecs[i].arch == here) why += std::string("; ") + kSpecs[i].name + " not: " + why_not(kSpecs[i], f);
    const KernelTable* table = kSpecs[best].make();
    if (want && *want) std::fprintf(stderr, "qvl: %s; using %s\n", check_isa_request().message().c_str(), table->name);
    return Choice{table, why};
  }();
  return c;
}

}  // namespace

std::vector<std::string> kernel_table_lacks(const std::string& table, const CpuFeatures& f) {
  for (const TableSpec& t : kSpecs)
    if (table == t.name) return missing(t, f);
  return {"a table of that name"};
}

const KernelTable& kernels() { return *choice().table; }

const std::string& kernels_reason() { return choice().reason; }

Status check_isa_request() {
  const char* want = std::getenv("QVL_ISA");
  if (!want || !*want) return Status::Ok();
  std::vector<std::string> names;
  for (const TableSpec& t : kSpecs) {
    names.push_back(t.name);
    if (std::strcmp(want, t.name) != 0) continue;
    // Whether a table runs is the table's own decision (make() returns null); the needs only explain it.
    if (t.make()) return Status::Ok();
    return Status::Error(std::string("QVL_ISA=") + want + ": this machine cannot run the " + want + " kernels: they need " +
                         needs_text(t) + ", and it " + why_not(t, cpu_features()) +
                         "; unset QVL_ISA for the best table it runs");
  }
  return Status::Error(std::string("QVL_ISA='") + want + "' names no kernel table: expected " + joined(names));
}

}  // namespace qvl
