// GGUF files (llama.cpp's model format, version 3; 2 is read too): the header, the metadata and the tensor
// table, every field validated before use — this parser faces downloaded files. A file is mapped read-only;
// tensors point into the mapping. The GGML types qvl reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)
// are dequantized to float exactly as ggml defines them (gguf_dequantize_row); other types are refused
// with their name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

// GGML type ids (ggml.h), the ones qvl reads.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};
const char* ggml_type_name(uint32_t type);  // "Q4_K", or "type 23" for one qvl does not read
bool ggml_type_supported(uint32_t type);
int64_t ggml_block_values(GgmlType t);  // values per block: 1, 32 or 256
int64_t ggml_block_bytes(GgmlType t);   // bytes per block

// A metadata value. Arrays hold scalars (as numbers, bools or strings) of one type; nested arrays are refused.
struct GgufValue {
  enum class Kind { kUint, kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kUint;
  uint32_t gguf_type = 0;  // the file's value type (0..12); for arrays, the element type
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> array;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the innermost (the columns of a row-major matrix)
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  const uint8_t* data = nullptr;
  // The shape as numpy / transformers write it (ne reversed): a Linear's weight is [out, in].
  std::vector<int64_t> shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }
  int64_t numel() const;
};

class GgufFile {
 public:
  // Maps and parses `path`; errors start with the path and name the field, what was expected and what was found.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes the caller keeps alive (tests, fuzzing); `name` prefixes errors.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Typed lookups: an error names the key and what it held.
  Result<std::string> get_string(const std::string& key) const;
  Result<uint64_t> get_uint(const std::string& key) const;  // any non-negative integer type
  Result<double> get_float(const std::string& key) const;   // any number
  Result<std::vector<int64_t>> get_ints(const std::string& key) const;  // an array of integers (or bools)
  Result<std::vector<double>> get_floats(const std::string& key) const;
  Result<std::vector<std::string>> get_strings(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  std::string name_;
  const uint8_t* map_ = nullptr;  // owned mapping (open), or null (parse)
  uint64_t map_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
  friend struct GgufParser;
};

// Writes a GGUF v3 file: metadata in the order added, then the tensor table and the data, each tensor
// aligned to 32 bytes (general.alignment's default) and padded with zeros, as gguf-py and ggml write them.
class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_bool_array(const std::string& key, const std::vector<bool>& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  // `shape` as transformers writes it ([out, in] for a Linear); the bytes are the type's rows of blocks.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type, std::vector<uint8_t> bytes);
  Status write(const std::string& path) const;

 private:
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<Tensor> tensors_;
};

// Dequantizes `n` values of one row of type `type` (n a multiple of the type's block) to float, exactly as
// ggml's dequantize_row_* (float arithmetic in its order). The scalar reference every fast path is tested on.
Status gguf_dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);

}  // namespace qvl
