// Fuzz target: GGUF parsing (header, metadata, tensor table) and dequantization. Every tensor handed out
// must lie inside the input and hold exactly its blocks' bytes; its first row is dequantized.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = qvl::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!f.ok()) return 0;
  (void)f->get_string("general.architecture");
  (void)f->get_uint("general.alignment");
  (void)f->get_ints("qwen3vl.rope.dimension_sections");
  std::vector<float> row;
  size_t n = 0;
  for (const qvl::GgufTensor& t : f->tensors()) {
    if (t.data < data || t.data + t.bytes > data + size) std::abort();
    if (++n > 16 || t.ne[0] > 65536) continue;
    const int64_t rows = t.numel() / t.ne[0];
    if (rows <= 0 || t.bytes % static_cast<uint64_t>(rows) != 0) std::abort();
    row.resize(static_cast<size_t>(t.ne[0]));
    if (!qvl::gguf_dequantize_row(t.type, t.data, row.data(), t.ne[0]).ok()) std::abort();
  }
  return 0;
}
