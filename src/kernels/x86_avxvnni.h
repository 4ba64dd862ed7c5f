// The AVX-VNNI table's own kernels (x86_avxvnni.cpp), for dispatch.cpp, which builds the table on the AVX2
// one, and the tests. Each is the KernelTable entry of the same name.
#pragma once

#include "kernels/kernels.h"

namespace qvl {
namespace avxvnni {

QVL_KERNEL(gemm_q8_0x8);
QVL_KERNEL(gemm_q4_0x8);
QVL_KERNEL(gemm_q8_0x16);
QVL_KERNEL(gemm_q4_0x16);
QVL_KERNEL(gemm_q4_kx8);
QVL_KERNEL(gemm_q5_kx8);

}  // namespace avxvnni
}  // namespace qvl
