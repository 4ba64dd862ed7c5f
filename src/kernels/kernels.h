// The table of compute kernels, chosen once at start-up for the best instruction set the CPU and OS
// support (x86-64: CPUID + XGETBV; ARM64: HWCAP), overridable with
// QVL_ISA=generic|neon|avx2|avxvnni|avx512vnni|amx for tests and comparisons. Every entry of every table has a
// scalar twin in generic.cpp that defines what it must compute.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <cstdint>

#include "tensor/quant.h"

#include "util/status.h"

namespace qvl {

struct KernelTable {
  const char* name;

  // Converts one row of `cols` values of the given storage type to float32.
  void (*row_to_f32)(WeightType type, const void* row, float* out, int64_t cols);

  // y[i * ldy + j] = dot(x[i * ldx .. +k], w[j * ldw .. +k]) for i < mr <= 4, j < nr <= 3 (float32).
  void (*gemm_f32_tile)(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y,
                        int64_t ldy, int mr, int nr);
  // The same with 16-bit float weight rows, type kBF16 or kF16 (ldw in values), and nr <= 6 when mr <= 2: bit
  // for bit what row_to_f32 of the rows followed by this table's gemm_f32_tile (three rows at a time) gives
  // (for weights that are not NaN), and so the same for a row whatever mr and nr are.
  // The weights are widened in registers, so a product reads 2 bytes a weight, not 2 read + 4 written + 4
  // read again; and one or two activation rows (decode) run 6 weight rows at a time, whose independent sums
  // hide the FMA latency. A table that replaces gemm_f32_tile replaces this too.
  void (*gemm_w16_tile)(WeightType type, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k,
                        float* y, int64_t ldy, int mr, int nr);

  // c[i * ldc + j] = sum_t a[i * lda + t] * b[t * ldb + j] for i < mr <= nn_rows, j < nc <= nn_cols
  // (float32): a row tile of A times a column panel of B, the layout of attention's P·V (and of q·kᵀ with
  // k transposed). Full tiles (nn_rows x nn_cols) are the fast case.
  void (*gemm_f32_nn_tile)(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c,
                           int64_t ldc, int mr, int nc);
  int nn_rows, nn_cols;
  // `panels` full tiles along a row of panels: for p < panels, gemm_f32_nn_tile(a, lda, b + p * panel_stride,
  // ldb, k, c + p * nn_cols, ldc, mr, nn_cols), the same bits, the tile inlined in the loop rather than a call
  // per panel (flash attention's q · kᵀ: a row tile against a key block's panels, 32 of k = 64 for a 2b head in
  // 512-key blocks; vision attention at 3,072 patches 241 -> 238 ms on a Zen 2), and a tile of few rows (a
  // decode step's one) free to run several panels at once, whose FMA chains then hide each other's latency.
  // Panels are packed kᵀ (ldb = nn_cols, panel_stride = k nn_cols) or the column groups of rows (v: ldb = head_dim,
  // panel_stride = nn_cols). Null where a table has none: its callers run that loop, which is its slow twin.
  void (*gemm_f32_nn_panels)(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t panel_stride, int64_t k,
                             float* c, int64_t ldc, int mr, int64_t panels) = nullptr;
  // The same with B in f16 (the KV cache's keys and values, read as the cache holds them): bit for bit
  // gemm_f32_nn_panels on B widened to float32 first (the widening is exact), for mr <= nn_rows. A decode step
  // reads each 2-byte value once instead of widening the whole cache into buffers and reading those (2 + 4 + 4
  // bytes a value). Null where a table has none: its callers widen, which is its slow twin.
  void (*gemm_f16_nn_panels)(const float* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t panel_stride,
                             int64_t k, float* c, int64_t ldc, int mr, int64_t panels) = nullptr;

  // Element-wise: x[i] = exp(x[i] * scale - max_j x[j] * scale) in place, returning their sum (softmax
  // without the division, which its users fold into what follows); GELU (tanh form) in place;
  // gate = silu(gate) * up.
  float (*exp_scaled)(float* x, int64_t n, float scale);
  void (*gelu_tanh)(float* x, int64_t n);
  void (*silu_mul)(float* gate, const float* up, int64_t n);

  // Quantizes one activation row (cols % 32 == 0) to Q8_0 blocks.
  void (*quantize_q8_0)(const float* x, BlockQ8_0* out, int64_t cols);

  // y[i * ldy] = dot(w_row, x_i) for i < mr <= 4 activation rows of nb Q8_0 blocks each (x rows nb apart);
  // w_row is nb blocks of Q8_0 or Q4_0.
  void (*dot_q8_0_rows)(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr);
  void (*dot_q4_0_rows)(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr);

  // Quantizes one activation row (cols % 32 == 0) exactly as quantize_row_act_ref: int8 values, float32
  // block scales d and int32 block sums of q.
  void (*quantize_act)(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum);

  // The integer GEMM tile: y[i * ldy + c] = dot(row c of the interleaved weight group w, activation row i)
  // for i < mr <= 4 and the group's 8 rows c, over nb blocks. Activation row i is xq + i * nb * 32 with
  // scales xd + i * nb and sums xsum + i * nb (quantize_act's output, rows one after another). Per block
  // the integer dot is exact and then acc = fma(d_w * d_x, isum, acc), so every table agrees bit for bit.
  void (*gemm_q8_0x8)(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                      float* y, int64_t ldy, int mr);
  void (*gemm_q4_0x8)(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                      float* y, int64_t ldy, int mr);
  // The same for two consecutive groups (w and w + nb: 16 output columns y[i * ldy + 0 .. 15]), which
  // 512-bit registers hold at once; elsewhere two calls of the tile above.
  void (*gemm_q8_0x16)(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr);
  void (*gemm_q4_0x16)(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr);

  // K-quants (GGML's Q4_K, Q5_K, Q6_K) in interleaved groups of 8 rows (BlockQ4_Kx8 ...), nb blocks of 32
  // (nb % 8 == 0), activations and outputs as above: y[i * ldy + c] for i < mr <= 4, c < 8. Per row, per
  // block b in order (sub-block j = b % 8 of super-block b / 8) the integer sum is exact — Q4_K/Q5_K:
  // isum = sc_j * sum(q * x), msum = m_j * xsum_b; Q6_K: isum = the sum over its two sub-blocks of 16 of
  // scale * sum((q - 32) * x) (|isum| < 2^24, so float(isum) is exact too) — and then acc = fma(d * xd_b,
  // isum, acc), for Q4_K/Q5_K followed by acc = fma(-(dmin * xd_b), msum, acc). Every table agrees bit for
  // bit.
  void (*gemm_q4_kx8)(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                      float* y, int64_t ldy, int mr);
  void (*gemm_q5_kx8)(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                      float* y, int64_t ldy, int mr);
  void (*gemm_q6_kx8)(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                      float* y, int64_t ldy, int mr);
  // The same for two consecutive groups (w and w + nb / 8: 16 output columns), as gemm_q*_0x16.
  void (*gemm_q4_kx16)(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr);
  void (*gemm_q5_kx16)(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr);
  void (*gemm_q6_kx16)(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr);

  // Panel GEMMs for many activation rows: y[i * ldy + c] for every i < n and c < 8 * ngroups (ngroups 1
  // or 2: the groups w and w + nb), the tiles' arithmetic and bit-identical to them (their slow twins:
  // gemm_q*_0_panel_ref). Null in tables without them: the driver runs the tiles 4 rows at a time. Only
  // the AMX table has them; they pay a fixed cost per call (the weights staged in tile layout), so the
  // driver uses them from kPanelMinRows rows.
  void (*gemm_q8_0_panel)(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t n, float* y, int64_t ldy) = nullptr;
  void (*gemm_q4_0_panel)(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t n, float* y, int64_t ldy) = nullptr;
  // The same for K-quants (the groups w and w + nb / 8; nb % 8 == 0).
  void (*gemm_q4_k_panel)(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t n, float* y, int64_t ldy) = nullptr;
  void (*gemm_q5_k_panel)(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t n, float* y, int64_t ldy) = nullptr;
  void (*gemm_q6_k_panel)(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t n, float* y, int64_t ldy) = nullptr;

  // The Q8_0/Q4_0 tiles for four consecutive groups (w + g * nb for g < 4: 32 output columns
  // y[i * ldy + 0 .. 31]), where an activation broadcast can feed two 512-bit registers of weights. Null in
  // tables without them: the driver then takes pairs. Their slow twin: the one-group tile on each group.
  void (*gemm_q8_0x32)(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr) = nullptr;
  void (*gemm_q4_0x32)(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                       float* y, int64_t ldy, int mr) = nullptr;

  // Flash attention's online softmax step (kernels/attention.cpp): m = max(*running_max, max_j x[j] * scale),
  // x[j] = exp(x[j] * scale - m) in place, *running_max = m; returns the sum of the new x. exp_scaled is this
  // from a running max of -inf. Every table has it.
  float (*exp_scaled_from)(float* x, int64_t n, float scale, float* running_max) = nullptr;

  // bfloat16 (the upper 16 bits of a float32), rounded to nearest even: out[i] = bf16(x[i]); NaN stays NaN.
  // Every table has it; bit-identical in all.
  void (*f32_to_bf16)(const float* x, uint16_t* out, int64_t n) = nullptr;

  // The bf16 panel tile (vdpbf16ps): c[i * ldc + j] = sum over kp pairs t of a[i][2t] * b[2t][j] + a[i][2t + 1] *
  // b[2t + 1][j], for i < mr <= nn_rows, j < nc <= nn_cols. Values are bf16 (bf16.h), in pairs: row i's pair t
  // of A at a[i * lda + 2t] and a[i * lda + 2t + 1], column j's pair t of B at b[t * ldb + 2j] and
  // b[t * ldb + 2j + 1] (lda, ldb in values; b 4-byte aligned). Each product of two bf16 values is exact in
  // float32 and added in float32, per pair the odd element's first (Intel's order; a CPU may round the pair's
  // sum once, and flushes denormals: tables agree to float32 rounding, not bits). Null where the CPU has no
  // bf16 dot product (the generic table too): --vision-attention bf16 then runs in float32. Its slow twin is
  // in bf16_twin_kernels().
  void (*gemm_bf16_nn_tile)(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t kp, float* c,
                            int64_t ldc, int mr, int nc) = nullptr;
  // bf16 attention's softmax step: exp_scaled_from's max and exponentials, written as bf16 to out[j] (x left as
  // it was); returns the float32 sum. Rounded to nearest even (a CPU's own conversion may flush denormals).
  // Set with gemm_bf16_nn_tile.
  float (*exp_scaled_from_bf16)(const float* x, int64_t n, float scale, float* running_max, uint16_t* out) = nullptr;
};

// Declares one instruction set's kernel with the type of the table entry it fills: QVL_KERNEL(gemm_q8_0x8);
// inside namespace qvl::avxvnni (kernels/x86_avxvnni.h) declares avxvnni::gemm_q8_0x8, whose definition must
// then match the entry. A kernel's prototype is written once, in KernelTable above.
#define QVL_KERNEL(entry) std::remove_pointer_t<decltype(::qvl::KernelTable::entry)> entry

// The panels' slow twins: the generic tiles on 4 rows at a time.
void gemm_q8_0_panel_ref(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q4_0_panel_ref(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q4_k_panel_ref(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q5_k_panel_ref(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy);
void gemm_q6_k_panel_ref(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd, const int32_t* xsum,
                         int64_t nb, int64_t n, float* y, int64_t ldy);

// gemm_q*_0x16 for tables without 512-bit registers: the one-group tile on each of the two groups.
template <class Block, void (*Tile)(const Block*, const int8_t*, const float*, const int32_t*, int64_t, float*, int64_t, int)>
void two_groups(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                int64_t ldy, int mr) {
  Tile(w, xq, xd, xsum, nb, y, ldy, mr);
  Tile(w + nb, xq, xd, xsum, nb, y + 8, ldy, mr);
}

// Calls f(std::integral_constant<int, MR>{}) for mr = 1, 2, 3 and 4 (and larger): a tile's activation row
// count as a template argument.
template <class F>
inline void with_rows(int mr, F&& f) {
  switch (mr) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

// gemm_q*_kx16 for tables without 512-bit registers: the one-group tile on each of the two groups (a group
// is nb / 8 super-blocks).
template <class Block, void (*Tile)(const Block*, const int8_t*, const float*, const int32_t*, int64_t, float*, int64_t, int)>
void two_kgroups(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  Tile(w, xq, xd, xsum, nb, y, ldy, mr);
  Tile(w + nb / 8, xq, xd, xsum, nb, y + 8, ldy, mr);
}

const KernelTable& generic_kernels();
// Tests: the generic table with the bf16 entries' scalar twins (gemm_bf16_nn_tile, exp_scaled_from_bf16), which
// no table in use carries (bf16 attention without a bf16 dot product runs in f32).
const KernelTable& bf16_twin_kernels();
// Null when the machine (CPU or OS) cannot run AVX2 + FMA + F16C.
const KernelTable* avx2_kernels();
// The generic table with NEON's own kernels (ARM64 with the dot-product extension): sdot integer GEMM tiles,
// the activation quantizer, the float GEMM and attention panel tiles, the exponentials, GELU and SiLU; null
// elsewhere.
const KernelTable* neon_kernels();
// The AVX2 table with AVX-VNNI integer GEMM tiles (VEX vpdpbusd, 256-bit); null without AVX2 or AVX_VNNI.
const KernelTable* avxvnni_kernels();
// The AVX2 table with AVX-512 VNNI integer GEMM tiles (512-bit vpdpbusd, two groups at once); null without AVX2, AVX-512F/BW/
// VL/VNNI or the OS's AVX-512 state.
const KernelTable* avx512vnni_kernels();

// The AVX-512 VNNI table with AMX panel GEMMs (TDPBSSD on 16 x 16 tiles); null without AVX-512 VNNI,
// AMX-TILE and AMX-INT8, the OS's tile state, palette 1's 8 tiles of 16 x 64 bytes, the kernel's
// permission to use them (asked for once, ARCH_REQ_XCOMP_PERM), or when its panels, run once on random
// blocks, disagree with their slow twins.
const KernelTable* amx_kernels();
// Tests: the AMX table with the tile instructions emulated (kernels/amx_tiles.h), the same kernel code on
// machines without AMX; null without the AVX-512 VNNI table.
const KernelTable* amx_emulated_kernels();

// The table in use: the best available, or the one QVL_ISA names (an unavailable one: check_isa_request()
// refuses it at start-up; a library user that skips the check gets the best table and a warning).
const KernelTable& kernels();

// Why kernels() is the table it is, in one line: "avx2: the CPU has AVX2, FMA and F16C and the OS saves the
// YMM registers; avx512vnni not: CPUID lacks AVX512F, AVX512VL, AVX512_VNNI" or "generic: QVL_ISA=generic".
const std::string& kernels_reason();

// QVL_ISA checked: Ok when unset or naming a table this CPU and OS can run (generic, neon, avx2, avxvnni, avx512vnni, amx); else
// what is wrong (an unknown name, or the table, what it needs and which of it this machine lacks). Every qvl
// command checks it before any work, so a forced table is never silently replaced.
Status check_isa_request();

// Block sizes chosen per core (microarchitecture), not per instruction set: made once from CPUID's vendor,
// family and model (the cores measured have their own rows; any other core gets sizes derived from its
// cache sizes), overridable with QVL_TILES=q_block,kv_block,row_block for tuning; qvl bench prints it.
struct TileChoice {
  std::string core;          // "AMD Zen 5 (family 26 model 2)", "Intel Sapphire Rapids (family 6 model 143)", ...
  int attn_q_block = 96;     // flash attention: query rows per task (a multiple of 6, every table's nn_rows)
  int attn_kv_block = 1024;  // flash attention: the most keys per block (a multiple of 64, every table's nn_cols)
  int gemm_row_block = 128;  // integer GEMMs: activation rows multiplied with a thread's weight groups at once
  std::string source;        // where the sizes come from: "measured on this core", "derived from ...", "QVL_TILES"
};
const TileChoice& tile_choice();
// Parses QVL_TILES's value into t (the three sizes, checked); an error says what is wrong.
Status parse_tiles(const std::string& text, TileChoice& t);

// What the CPU and OS support.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avxvnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
  bool os_ymm = false, os_zmm = false;
  bool amx_tile = false, amx_int8 = false;
  bool os_amx = false;       // XCR0: the OS saves the tile configuration and data (XTILECFG, XTILEDATA)
  bool amx_palette = false;  // CPUID 0x1D: palette 1 has 8 tiles of 16 rows x 64 bytes
  bool amx_permitted = false;  // Linux granted this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM)
  bool avx512bf16 = false;  // AVX512_BF16: vdpbf16ps, vcvtne2ps2bf16
  bool asimd = false, asimddp = false;  // ARM64: NEON and its dot-product extension (sdot)
};
CpuFeatures cpu_features();

// The features named table needs that a machine with features f lacks (CPUID / XCR0 names); empty: none.
std::vector<std::string> kernel_table_lacks(const std::string& table, const CpuFeatures& f);

}  // namespace qvl
