// The AVX-512 VNNI table's own kernels (x86_avx512vnni.cpp), for dispatch.cpp, which builds the table on
// the AVX2 one, and the tests. Each is the KernelTable entry of the same name.
#pragma once

#include "kernels/kernels.h"

namespace qvl {
namespace avx512vnni {

QVL_KERNEL(gemm_f32_nn_tile);
QVL_KERNEL(exp_scaled);
QVL_KERNEL(exp_scaled_from);
QVL_KERNEL(f32_to_bf16);
QVL_KERNEL(gemm_q8_0x16);
QVL_KERNEL(gemm_q4_0x16);
QVL_KERNEL(gemm_q8_0x32);
QVL_KERNEL(gemm_q4_0x32);
QVL_KERNEL(gemm_q4_kx8);
QVL_KERNEL(gemm_q5_kx8);
QVL_KERNEL(gemm_q6_kx8);
QVL_KERNEL(gemm_q4_kx16);
QVL_KERNEL(gemm_q5_kx16);
QVL_KERNEL(gemm_q6_kx16);

}  // namespace avx512vnni

// The AVX512_BF16 tile (x86_avx512bf16.cpp), added to the AVX-512 VNNI table where the CPU has the instructions.
namespace avx512bf16 {

QVL_KERNEL(gemm_bf16_nn_tile);
QVL_KERNEL(exp_scaled_from_bf16);

}  // namespace avx512bf16
}  // namespace qvl
