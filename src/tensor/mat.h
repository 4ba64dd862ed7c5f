// A weight matrix as the forward pass sees it: its storage type, shape and layout, not owned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/weight_type.h"

namespace qvl {

// How a matrix's storage is ordered: row after row, or (quantized types, rows % 8 == 0) groups of 8 rows
// whose blocks are interleaved (BlockQ8_0x8, BlockQ4_0x8, BlockQ4_Kx8, ...) for the integer GEMM kernels.
enum class Layout { kRows, kInterleaved8 };

// A weight matrix [rows, cols] (PyTorch's [out_features, in_features]), not owned: float rows as in the
// checkpoint, rows of quantized blocks, or interleaved groups of 8 such rows. Its rows as float32:
// row_to_f32 (kernels/ops.h), on the kernel table in use.
struct Mat {
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  Layout layout = Layout::kRows;

  bool empty() const { return data == nullptr; }
  // Row r's storage (Layout::kRows only).
  const void* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes(type, cols);
  }
  // The interleaved blocks of rows 8g .. 8g+7 (Layout::kInterleaved8 only): 8 rows' worth of bytes.
  const void* group(int64_t g) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(8 * g) * row_bytes(type, cols);
  }
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes(type, cols); }
};

}  // namespace qvl
