// Reading and writing NumPy .npy files (version 1.0, little-endian float32 / int32 / uint8, C order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

struct NpyArray {
  std::string dtype;  // "<f4", "<i4", "|u1" or "<i8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian bytes, C order

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

Status write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
                 const void* data, size_t bytes);
Result<NpyArray> read_npy(const std::string& path);

}  // namespace qvl
