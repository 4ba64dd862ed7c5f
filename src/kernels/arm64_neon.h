// The NEON table's own kernels (arm64_neon.cpp, ARMv8.2-A with the dot-product extension), for
// dispatch.cpp, which builds the table on the generic one, and the tests. Each is the KernelTable entry
// of the same name.
#pragma once

#include "kernels/kernels.h"

namespace qvl {
namespace neon {

QVL_KERNEL(gemm_f32_tile);
QVL_KERNEL(gemm_w16_tile);
QVL_KERNEL(gemm_f32_nn_tile);
QVL_KERNEL(exp_scaled);
QVL_KERNEL(exp_scaled_from);
QVL_KERNEL(gelu_tanh);
QVL_KERNEL(silu_mul);
QVL_KERNEL(quantize_act);
QVL_KERNEL(gemm_q8_0x8);
QVL_KERNEL(gemm_q4_0x8);
QVL_KERNEL(gemm_q4_kx8);
QVL_KERNEL(gemm_q5_kx8);
QVL_KERNEL(gemm_q6_kx8);

}  // namespace neon
}  // namespace qvl
