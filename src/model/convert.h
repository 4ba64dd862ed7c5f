// Converting weight matrices at load time to the storage type the user chose (e.g. bf16 -> q4_0), into
// memory the model owns; the checkpoint's mapping is then no longer touched for those matrices.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/weights.h"
#include "util/thread_pool.h"

namespace qvl {

struct WeightTypes {
  std::optional<WeightType> text;    // nullopt: keep the checkpoint's type
  std::optional<WeightType> vision;
};

// The storage types qvl uses unless told otherwise, chosen from the accuracy table in BENCHMARKS.md.
WeightTypes default_weight_types();

// One float row stored as `type` (the conversion's own quantizers: a matrix narrowed here and one converted by
// convert_matrix hold the same bytes).
void narrow_row(const float* in, WeightType type, void* out, int64_t cols);

// Owns converted matrices.
using WeightArena = std::vector<std::unique_ptr<uint8_t[]>>;

// Converts `m` to `type` (rows widened to float32, then narrowed/quantized), storing the result in `arena`;
// quantized results with rows % 8 == 0 are interleaved (Layout::kInterleaved8). Quantized types need
// cols % 32 == 0; returns an error naming `name` otherwise.
// release_source: let the source's pages go afterwards (a file mapping's pages are read again if needed; other
// memory would come back zeroed, so a source still in use, the tied embedding table, is not released).
Result<Mat> convert_matrix(const Mat& m, WeightType type, const std::string& name, ThreadPool& pool, WeightArena& arena,
                           bool release_source = true);

// A row-ordered quantized matrix with rows % 8 == 0 copied into the interleaved layout (Layout::
// kInterleaved8) the integer GEMM reads; anything else is returned as it is.
Result<Mat> interleave_matrix(const Mat& m, ThreadPool& pool, WeightArena& arena, bool release_source = true);

// The matrices conversion applies to, with their checkpoint tensor names: the text decoder's attention and
// MLP matrices and the LM head ("lm_head.weight"), the vision tower's patch embedding, blocks and mergers.
std::vector<std::pair<std::string, Mat*>> convertible_matrices(TextW& text, VisionW& vision, bool with_text,
                                                                bool with_vision);

// Converts every matrix of the text decoder (attention, MLP, LM head; the embedding table itself stays as
// stored for row lookups) and of the vision tower (patch embedding, blocks, mergers).
// A matrix whose width is not a multiple of the 32-value quantization block (Qwen3-VL-8B's vision MLP: 4304
// inputs) cannot take a quantized type: it keeps its stored type, and its name is added to `kept`.
// `keep`: memory that is not a file mapping and is still read after conversion (a GGUF embedding table
// expanded at load, which a tied LM head shares): never released.
Status convert_weights(TextW& text, VisionW& vision, const WeightTypes& types, ThreadPool& pool, WeightArena& arena,
                       std::vector<std::string>* kept = nullptr, const void* keep = nullptr);

}  // namespace qvl
