// Chooses the kernel table once: on x86-64 CPUID for the instruction sets and XGETBV for the OS saving the
// registers, on ARM64 the kernel's HWCAP bits. Every table is known by name on every machine (QVL_ISA=avx2
// on an ARM server is refused with what it lacks); a table of the other architecture is never built.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

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
    t.gemm_f32_nn_panels = nullptr;  // not avx2's 16-column one: its callers loop over this tile
    t.gemm_f16_nn_panels = nullptr;  // likewise: its callers widen
    t.nn_rows = 6;
    t.nn_cols = 64;
    t.exp_scaled = avx512vnni::exp_scaled;
    t.exp_scaled_from = avx512vnni::exp_scaled_from;
    t.f32_to_bf16 = avx512vnni::f32_to_bf16;
    if (cpu_features().avx512bf16) {
      t.gemm_bf16_nn_tile = avx512bf16::gemm_bf16_nn_tile;
      t.exp_scaled_from_bf16 = avx512bf16::exp_scaled_from_bf16;
    }
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
    t.gemm_f32_tile = neon::gemm_f32_tile;
    t.gemm_w16_tile = neon::gemm_w16_tile;
    t.gemm_f32_nn_tile = neon::gemm_f32_nn_tile;
    t.exp_scaled = neon::exp_scaled;
    t.exp_scaled_from = neon::exp_scaled_from;
    t.gelu_tanh = neon::gelu_tanh;
    t.silu_mul = neon::silu_mul;
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
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avxvnni = a & (1u << 4);
    f.avx512bf16 = a & (1u << 5);
  }
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

namespace {

// The core by CPUID (leaf 0's vendor, leaf 1's family and model with their extended fields), and the
// sizes measured on it, if any.
struct CoreRow {
  const char* vendor;
  int family;
  int model_lo, model_hi;
  const char* name;
  bool measured;  // the sizes below were chosen by timing on this core (BENCHMARKS.md); else derived
  int q_block, kv_block, row_block;
};
const CoreRow kCores[] = {
    {"AuthenticAMD", 0x17, 0x00, 0x2F, "AMD Zen / Zen+", false, 0, 0, 0},
    // Zen 2 timed on a Rome (model 49): the flash blocks from 96x256 to 96x1024 and GEMM row blocks 64-256 all
    // within 3% (BENCHMARKS.md, "Large images on a Zen 2"); 96x512 is the size its 512 KiB L2 derives.
    {"AuthenticAMD", 0x17, 0x30, 0xAF, "AMD Zen 2", true, 96, 512, 128},
    // Zen 3 timed on a Milan (model 1), 512 KiB L2 like Zen 2: flash blocks 96x256 to 96x2048 and 120x768 within
    // the runs' noise (+-10 %), 144x512 ~8 % and 48x512 ~60 % slower at 3,072 patches; GEMM row blocks 64-256
    // within the noise (BENCHMARKS.md, "Zen 3: the avx2 table on a core with two vector-multiply pipes"). It keeps
    // the 96x512 its L2 derives. Models 0x20-0x5F (desktop and mobile Zen 3) were not timed.
    {"AuthenticAMD", 0x19, 0x00, 0x0F, "AMD Zen 3", true, 96, 512, 128},
    {"AuthenticAMD", 0x19, 0x20, 0x5F, "AMD Zen 3", false, 0, 0, 0},
    {"AuthenticAMD", 0x19, 0x10, 0x1F, "AMD Zen 4", false, 0, 0, 0},
    {"AuthenticAMD", 0x19, 0x60, 0xAF, "AMD Zen 4", false, 0, 0, 0},
    {"AuthenticAMD", 0x1A, 0x00, 0xFF, "AMD Zen 5", true, 96, 1024, 128},
    {"GenuineIntel", 6, 0x55, 0x55, "Intel Skylake-SP / Cascade Lake", false, 0, 0, 0},
    {"GenuineIntel", 6, 0x6A, 0x6C, "Intel Ice Lake-SP", false, 0, 0, 0},
    {"GenuineIntel", 6, 0x8F, 0x8F, "Intel Sapphire Rapids", false, 0, 0, 0},
    {"GenuineIntel", 6, 0xCF, 0xCF, "Intel Emerald Rapids", false, 0, 0, 0},
    {"GenuineIntel", 6, 0xAD, 0xAE, "Intel Granite Rapids", false, 0, 0, 0},
    {"GenuineIntel", 6, 0x97, 0x9A, "Intel Alder Lake", false, 0, 0, 0},
    {"GenuineIntel", 6, 0xB7, 0xBF, "Intel Raptor Lake", false, 0, 0, 0},
};

// Sizes for a core nobody timed, from its L2 (per core): the flash attention's score block (q_block x kv_block
// floats) and one key block of kᵀ and v (2 x kv_block x 64 floats) within 90% of it, as the sizes measured on
// Zen 5 (96 x 1024 in its 1 MiB) are; the GEMM row block as measured on the cores that were timed.
void derive_from_caches(TileChoice& t) {
  long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l1 <= 0) l1 = 32 * 1024;
  if (l2 <= 0) l2 = 1024 * 1024;
  int q = 96, kv = 1024;
  auto bytes = [&] { return 4L * q * kv + 2L * kv * 64 * 4; };
  while (kv > 64 && bytes() > l2 * 9 / 10) kv -= 64;
  while (q > 24 && bytes() > l2 * 9 / 10) q -= 24;
  t.attn_q_block = q;
  t.attn_kv_block = kv;
  t.gemm_row_block = 128;
  t.source = "derived from its caches (L1d " + std::to_string(l1 / 1024) + " KiB, L2 " + std::to_string(l2 / 1024) +
             " KiB); not timed on this core";
}

TileChoice make_tile_choice() {
  TileChoice t;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
  }
  int family = 0, model = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    family = static_cast<int>((a >> 8) & 0xF);
    model = static_cast<int>((a >> 4) & 0xF);
    if (family == 0xF) family += static_cast<int>((a >> 20) & 0xFF);
    if (family == 0x6 || family >= 0xF) model += static_cast<int>((a >> 16) & 0xF) << 4;
  }
  const std::string fm = " (family " + std::to_string(family) + " model " + std::to_string(model) + ")";
  t.core = std::string(vendor[0] ? vendor : "unknown x86-64") + fm;
  const CoreRow* row = nullptr;
  for (const CoreRow& r : kCores)
    if (!std::strcmp(vendor, r.vendor) && family == r.family && model >= r.model_lo && model <= r.model_hi) row = &r;
  if (row) t.core = row->name + fm;
  if (row && row->measured) {
    t.attn_q_block = row->q_block;
    t.attn_kv_block = row->kv_block;
    t.gemm_row_block = row->row_block;
    t.source = "measured on this core (BENCHMARKS.md)";
  } else {
    derive_from_caches(t);
  }
#elif defined(__aarch64__)
  t.core = "ARM64";
  derive_from_caches(t);
#else
  t.core = "unknown";
  derive_from_caches(t);
#endif
  if (const char* env = std::getenv("QVL_TILES"); env && *env) {
    TileChoice forced = t;
    if (const Status st = parse_tiles(env, forced); st.ok()) {
      forced.source = std::string("QVL_TILES=") + env;
      t = forced;
    } else {
      std::fprintf(stderr, "qvl: %s; keeping %d,%d,%d\n", st.message().c_str(), t.attn_q_block, t.attn_kv_block,
                   t.gemm_row_block);
    }
  }
  return t;
}

}  // namespace

Status parse_tiles(const std::string& text, TileChoice& t) {
  int q = 0, kv = 0, rows = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d,%d,%d%c", &q, &kv, &rows, &tail) != 3)
    return Status::Error("QVL_TILES='" + text + "': expected three numbers q_block,kv_block,row_block (e.g. 96,1024,128)");
  if (q < 6 || q > 1536 || q % 6 != 0)
    return Status::Error("QVL_TILES: q_block " + std::to_string(q) + " must be a multiple of 6 in 6..1536");
  if (kv < 64 || kv > 8192 || kv % 64 != 0)
    return Status::Error("QVL_TILES: kv_block " + std::to_string(kv) + " must be a multiple of 64 in 64..8192");
  if (rows < 4 || rows > 4096 || rows % 4 != 0)
    return Status::Error("QVL_TILES: row_block " + std::to_string(rows) + " must be a multiple of 4 in 4..4096");
  t.attn_q_block = q;
  t.attn_kv_block = kv;
  t.gemm_row_block = rows;
  return Status::Ok();
}

const TileChoice& tile_choice() {
  static const TileChoice t = make_tile_choice();
  return t;
}

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
