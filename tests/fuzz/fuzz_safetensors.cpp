// Fuzz target: safetensors header parsing. The input is a whole .safetensors file (8-byte header length,
// JSON header, data), opened as a model directory's model.safetensors; an input starting with '{' is a
// model.safetensors.index.json instead, next to one small valid shard. Every tensor handed out must lie
// inside the data and have exactly numel × dtype_size bytes.
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "io/safetensors.h"

namespace {

// A valid shard for the index mode: {"a": F32 [2], "b": U8 [3]}.
void write_shard(const std::filesystem::path& path) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header + std::string(11, '\x01');
  qvl::fuzz::write_bytes(path, reinterpret_cast<const uint8_t*>(file.data()), file.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const bool index_mode = size > 0 && data[0] == '{';
  const fs::path dir = qvl::fuzz::scratch_dir() / (index_mode ? "index" : "single");
  static const bool once = [] {
    fs::create_directories(qvl::fuzz::scratch_dir() / "single");
    fs::create_directories(qvl::fuzz::scratch_dir() / "index");
    write_shard(qvl::fuzz::scratch_dir() / "index" / "model-00001-of-00001.safetensors");
    return true;
  }();
  (void)once;
  qvl::fuzz::write_bytes(dir / (index_mode ? "model.safetensors.index.json" : "model.safetensors"), data, size);

  auto model = qvl::SafetensorsModel::open(dir.string());
  if (!model.ok()) {
    QVL_CHECK(!model.status().message().empty());
    return 0;
  }
  uint64_t total = 0;
  unsigned sum = 0;
  for (const qvl::TensorView& t : model->tensors()) {
    QVL_CHECK(model->find(t.name) != nullptr);
    uint64_t n = qvl::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      QVL_CHECK(d >= 0);
      n *= static_cast<uint64_t>(d);
    }
    QVL_CHECK(n == t.nbytes);
    total += t.nbytes;
    QVL_CHECK(total <= model->mapped_bytes());
    // Touch every byte: a view past the mapping faults here (and ASan names the read).
    for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  }
  if (!index_mode) {
    // Data lies inside the one file, after its header.
    QVL_CHECK(size >= 8);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    QVL_CHECK(total <= size - 8 - header_len);
  }
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
