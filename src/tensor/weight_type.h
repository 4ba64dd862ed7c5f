// The storage types of weight matrices and one table of what each is: its name, its block (values and
// bytes), its GGML id, and its reference conversions to and from float32 and to and from the 8-row
// interleaved layout of the integer GEMM tiles. The loaders, converters, exporters and the matmul driver
// read this table; a type is added here and in tensor/quant.h, not in a switch in every file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace qvl {

// The storage of a weight matrix: float types as in the checkpoint, quantized blocks of 32 along each row
// (Q8_0, Q4_0), or GGML K-quant super-blocks of 256 (Q4_K, Q5_K, Q6_K: bound as a GGUF file stores them).
enum class WeightType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };
constexpr int kNumWeightTypes = 8;

struct WeightTypeTraits {
  WeightType type;
  const char* name;     // "q8_0": qvl's options, safetensors metadata and llama-quantize spell it so
  uint32_t ggml_type;   // the GGUF file's type id (ggml.h)
  DType dtype;          // how a safetensors file stores it: the float dtype, or U8 rows of blocks
  int64_t block_values; // 1 (float types), 32 (Q8_0, Q4_0) or 256 (K-quants); a row is whole blocks
  int64_t block_bytes;
  bool load_target;     // a float matrix can be converted to it at load (--text-weights / --vision-weights)
  // The reference conversions of one row of `cols` values (slow twins of the kernels' row_to_f32 and
  // quantize_q8_0): float32 to the storage type (round to nearest, as ggml), and back.
  void (*from_f32)(const float* x, void* out, int64_t cols);
  void (*to_f32)(const void* in, float* out, int64_t cols);
  // The 8-row interleaved layout (BlockQ8_0x8, BlockQ4_Kx8, ...) of the integer GEMM tiles, null for the
  // float types: packs 8 rows of `blocks` blocks each (row c at rows + c * blocks) into one group, and
  // unpacks row c of a group.
  void (*pack_x8)(const void* rows, int64_t blocks, void* out);
  void (*unpack_x8)(const void* group, int c, int64_t blocks, void* row);
};

const WeightTypeTraits& weight_type_traits(WeightType t);
// The type of a GGML type id; false for the ids qvl does not read.
bool weight_type_from_ggml(uint32_t ggml_type, WeightType* out);

inline const char* weight_type_name(WeightType t) { return weight_type_traits(t).name; }
// Parses the name of a load target: "f32", "f16", "bf16", "q8_0", "q4_0"; false otherwise (the K-quants
// are bound from GGUF files, not converted to).
bool weight_type_from_name(const std::string& name, WeightType* out);

// Parses any type's name ("q6_k" too), as safetensors metadata names a stored matrix's type.
bool weight_type_from_any_name(const std::string& name, WeightType* out);

inline WeightType weight_type_of(DType t) {
  switch (t) {
    case DType::kF32: return WeightType::kF32;
    case DType::kF16: return WeightType::kF16;
    case DType::kBF16: return WeightType::kBF16;
    case DType::kU8: break;  // raw blocks: the type comes from the file's metadata
  }
  return WeightType::kF32;
}

// Blocks of 32 values with an f16 scale (Q8_0, Q4_0): the types a matrix is quantized to at load, and the
// ones with integer dot kernels for row-ordered matrices.
inline bool is_block32_quant(WeightType t) { return t == WeightType::kQ8_0 || t == WeightType::kQ4_0; }
// K-quant super-blocks of 256 (their own GEMM tiles).
inline bool is_kquant(WeightType t) { return t == WeightType::kQ4_K || t == WeightType::kQ5_K || t == WeightType::kQ6_K; }
// Types with an interleaved 8-row layout and integer GEMM tiles.
inline bool is_interleavable(WeightType t) { return weight_type_traits(t).pack_x8 != nullptr; }

// Bytes of one row of `cols` values (cols a multiple of the type's block).
inline size_t row_bytes(WeightType t, int64_t cols) {
  const WeightTypeTraits& w = weight_type_traits(t);
  return static_cast<size_t>(cols / w.block_values * w.block_bytes);
}

}  // namespace qvl
