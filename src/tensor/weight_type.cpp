// The weight-type table: each type's block, GGML id and reference conversions (tensor/quant.h and
// tensor/kquant.h hold the arithmetic).
#include "tensor/weight_type.h"

#include <cstring>
#include <iterator>

#include "tensor/kquant.h"
#include "tensor/quant.h"
#include "util/status.h"

namespace qvl {

namespace {

void f32_from_f32(const float* x, void* out, int64_t cols) { std::memcpy(out, x, static_cast<size_t>(cols) * 4); }
void f32_to_f32(const void* in, float* out, int64_t cols) { std::memcpy(out, in, static_cast<size_t>(cols) * 4); }

template <uint16_t (*Narrow)(float)>
void half_from_f32(const float* x, void* out, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) static_cast<uint16_t*>(out)[i] = Narrow(x[i]);
}
template <float (*Widen)(uint16_t)>
void half_to_f32(const void* in, float* out, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) out[i] = Widen(static_cast<const uint16_t*>(in)[i]);
}

// The typed block functions of quant.h and kquant.h behind the table's untyped pointers.
template <class Block, void (*F)(const float*, Block*, int64_t)>
void blocks_from_f32(const float* x, void* out, int64_t cols) {
  F(x, static_cast<Block*>(out), cols);
}
template <void (*F)(const float*, uint8_t*, int64_t)>
void kblocks_from_f32(const float* x, void* out, int64_t cols) {
  F(x, static_cast<uint8_t*>(out), cols);
}
template <class Block, void (*F)(const Block*, float*, int64_t)>
void blocks_to_f32(const void* in, float* out, int64_t cols) {
  F(static_cast<const Block*>(in), out, cols);
}
template <class Block, class Group, void (*F)(const Block*, int64_t, Group*)>
void pack(const void* rows, int64_t blocks, void* out) {
  F(static_cast<const Block*>(rows), blocks, static_cast<Group*>(out));
}
template <class Block, class Group, void (*F)(const Group*, int, int64_t, Block*)>
void unpack(const void* group, int c, int64_t blocks, void* row) {
  F(static_cast<const Group*>(group), c, blocks, static_cast<Block*>(row));
}

// In WeightType's order (checked below).
constexpr WeightTypeTraits kTraits[] = {
    {.type = WeightType::kF32, .name = "f32", .ggml_type = 0, .dtype = DType::kF32, .block_values = 1,
     .block_bytes = 4, .load_target = true, .from_f32 = f32_from_f32, .to_f32 = f32_to_f32,
     .pack_x8 = nullptr, .unpack_x8 = nullptr},
    {.type = WeightType::kF16, .name = "f16", .ggml_type = 1, .dtype = DType::kF16, .block_values = 1,
     .block_bytes = 2, .load_target = true, .from_f32 = half_from_f32<f32_to_f16>,
     .to_f32 = half_to_f32<f16_to_f32>, .pack_x8 = nullptr, .unpack_x8 = nullptr},
    {.type = WeightType::kBF16, .name = "bf16", .ggml_type = 30, .dtype = DType::kBF16, .block_values = 1,
     .block_bytes = 2, .load_target = true, .from_f32 = half_from_f32<f32_to_bf16>,
     .to_f32 = half_to_f32<bf16_to_f32>, .pack_x8 = nullptr, .unpack_x8 = nullptr},
    {.type = WeightType::kQ8_0, .name = "q8_0", .ggml_type = 8, .dtype = DType::kU8, .block_values = kQK,
     .block_bytes = sizeof(BlockQ8_0), .load_target = true,
     .from_f32 = blocks_from_f32<BlockQ8_0, quantize_row_q8_0_ref>,
     .to_f32 = blocks_to_f32<BlockQ8_0, dequantize_row_q8_0_ref>,
     .pack_x8 = pack<BlockQ8_0, BlockQ8_0x8, pack_q8_0x8>, .unpack_x8 = unpack<BlockQ8_0, BlockQ8_0x8, unpack_q8_0x8>},
    {.type = WeightType::kQ4_0, .name = "q4_0", .ggml_type = 2, .dtype = DType::kU8, .block_values = kQK,
     .block_bytes = sizeof(BlockQ4_0), .load_target = true,
     .from_f32 = blocks_from_f32<BlockQ4_0, quantize_row_q4_0_ref>,
     .to_f32 = blocks_to_f32<BlockQ4_0, dequantize_row_q4_0_ref>,
     .pack_x8 = pack<BlockQ4_0, BlockQ4_0x8, pack_q4_0x8>, .unpack_x8 = unpack<BlockQ4_0, BlockQ4_0x8, unpack_q4_0x8>},
    {.type = WeightType::kQ4_K, .name = "q4_k", .ggml_type = 12, .dtype = DType::kU8, .block_values = kQKK,
     .block_bytes = sizeof(BlockQ4_K), .load_target = false, .from_f32 = kblocks_from_f32<quantize_row_q4_k>,
     .to_f32 = blocks_to_f32<BlockQ4_K, dequantize_row_q4_k_ref>,
     .pack_x8 = pack<BlockQ4_K, BlockQ4_Kx8, pack_q4_kx8>, .unpack_x8 = unpack<BlockQ4_K, BlockQ4_Kx8, unpack_q4_kx8>},
    {.type = WeightType::kQ5_K, .name = "q5_k", .ggml_type = 13, .dtype = DType::kU8, .block_values = kQKK,
     .block_bytes = sizeof(BlockQ5_K), .load_target = false, .from_f32 = kblocks_from_f32<quantize_row_q5_k>,
     .to_f32 = blocks_to_f32<BlockQ5_K, dequantize_row_q5_k_ref>,
     .pack_x8 = pack<BlockQ5_K, BlockQ5_Kx8, pack_q5_kx8>, .unpack_x8 = unpack<BlockQ5_K, BlockQ5_Kx8, unpack_q5_kx8>},
    {.type = WeightType::kQ6_K, .name = "q6_k", .ggml_type = 14, .dtype = DType::kU8, .block_values = kQKK,
     .block_bytes = sizeof(BlockQ6_K), .load_target = false, .from_f32 = kblocks_from_f32<quantize_row_q6_k>,
     .to_f32 = blocks_to_f32<BlockQ6_K, dequantize_row_q6_k_ref>,
     .pack_x8 = pack<BlockQ6_K, BlockQ6_Kx8, pack_q6_kx8>, .unpack_x8 = unpack<BlockQ6_K, BlockQ6_Kx8, unpack_q6_kx8>},
};
static_assert(std::size(kTraits) == kNumWeightTypes, "one row per WeightType");
constexpr bool in_enum_order() {
  for (int i = 0; i < kNumWeightTypes; ++i)
    if (kTraits[i].type != static_cast<WeightType>(i)) return false;
  return true;
}
static_assert(in_enum_order(), "kTraits[i] describes WeightType i");

}  // namespace

const WeightTypeTraits& weight_type_traits(WeightType t) {
  const int i = static_cast<int>(t);
  QVL_CHECK(i >= 0 && i < kNumWeightTypes);
  return kTraits[i];
}

bool weight_type_from_ggml(uint32_t ggml_type, WeightType* out) {
  for (const WeightTypeTraits& w : kTraits)
    if (w.ggml_type == ggml_type) {
      *out = w.type;
      return true;
    }
  return false;
}

bool weight_type_from_any_name(const std::string& name, WeightType* out) {
  for (const WeightTypeTraits& w : kTraits)
    if (name == w.name) {
      *out = w.type;
      return true;
    }
  return false;
}

bool weight_type_from_name(const std::string& name, WeightType* out) {
  for (const WeightTypeTraits& w : kTraits)
    if (w.load_target && name == w.name) {
      *out = w.type;
      return true;
    }
  return false;
}

}  // namespace qvl
