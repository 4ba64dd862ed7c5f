// The AMX table's kernels (x86_amx.cpp) and its start-up check (x86_amx_check.cpp), for dispatch.cpp, which
// builds the table, and the tests. Each panel is the KernelTable entry of the same name; the _emulated ones
// run the same code on the tile emulator (amx_tiles.h).
#pragma once

#include <string>

#include "kernels/kernels.h"

namespace qvl {
namespace amx {

#define QVL_AMX_PANEL_DECLS(SUFFIX)                                                                               \
  void gemm_q8_0_panel##SUFFIX(const BlockQ8_0x8* w, int ngroups, const int8_t* xq, const float* xd,             \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy);              \
  void gemm_q4_0_panel##SUFFIX(const BlockQ4_0x8* w, int ngroups, const int8_t* xq, const float* xd,             \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy);              \
  void gemm_q4_k_panel##SUFFIX(const BlockQ4_Kx8* w, int ngroups, const int8_t* xq, const float* xd,             \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy);              \
  void gemm_q5_k_panel##SUFFIX(const BlockQ5_Kx8* w, int ngroups, const int8_t* xq, const float* xd,             \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy);              \
  void gemm_q6_k_panel##SUFFIX(const BlockQ6_Kx8* w, int ngroups, const int8_t* xq, const float* xd,             \
                               const int32_t* xsum, int64_t nb, int64_t n, float* y, int64_t ldy);
QVL_AMX_PANEL_DECLS()
QVL_AMX_PANEL_DECLS(_emulated)
#undef QVL_AMX_PANEL_DECLS

// Empty when the hardware panels agree with their slow twins on random blocks; else what went wrong (a
// disagreement, or the signal a tile instruction raised, caught). Only once the process holds the tile
// permission.
std::string check_panels();

}  // namespace amx
}  // namespace qvl
