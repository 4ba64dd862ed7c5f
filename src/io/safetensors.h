// Reading safetensors checkpoints by mmap (one file or a sharded model directory) and writing them by streaming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/dtype.h"
#include "util/status.h"

namespace qvl {

// One tensor inside a mapped file. `data` points into the mapping and lives as long as the file object.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// One .safetensors file, mapped read-only. Every header entry is checked when the file is opened, so a
// TensorView handed out afterwards always lies inside the file and has exactly numel × dtype_size bytes.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  // Tensors in the order of their data in the file.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  // A "__metadata__" value of any shard, or null.
  const std::string* metadata(const std::string& key) const;
  // The "__metadata__" entry, e.g. {"format": "pt"}.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void unmap();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A model directory's weights: `model.safetensors`, or the shards named by `model.safetensors.index.json`.
class SafetensorsModel {
 public:
  static Result<SafetensorsModel> open(const std::string& dir);
  // A checkpoint of tensors that live elsewhere (a GGUF file's mapping, buffers the caller owns and keeps
  // alive as long as this), with string metadata as a safetensors header's __metadata__ holds it.
  static SafetensorsModel from_views(std::vector<TensorView> tensors, std::map<std::string, std::string> metadata,
                                     uint64_t bytes);

  const TensorView* find(const std::string& name) const;
  // A "__metadata__" value of any shard, or null.
  const std::string* metadata(const std::string& key) const;
  // Every tensor of every shard, shard by shard (shards in name order), each in file order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The total size of the mapped files.
  uint64_t mapped_bytes() const;

  // Tells the kernel that a tensor's pages will not be read again (after it was converted into memory the
  // model owns), so they leave the resident set. Reading it again would still work: it is reloaded from
  // the file.
  static void release(const TensorView& t);
  static void release(const void* data, size_t bytes);

 private:
  std::vector<SafetensorsFile> files_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> extra_metadata_;  // from_views
  uint64_t extra_bytes_ = 0;                           // from_views: the size of what the views point into
  std::unordered_map<std::string, size_t> index_;
};

// A tensor to write. `fill(first, count, dst)` writes elements [first, first + count) of the tensor, in
// its dtype, to dst (count × dtype_size bytes); the writer asks for the tensor in pieces so a file of any
// size streams through a fixed buffer.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<void(int64_t first, int64_t count, uint8_t* dst)> fill;
};

// A TensorToWrite that copies from memory holding the whole tensor (numel × dtype_size bytes); the
// memory must outlive the write_safetensors call.
TensorToWrite tensor_from_memory(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);

// Called after each piece is written, with the bytes of tensor data written so far and the total.
using WriteProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Writes a .safetensors file the way the Python library does: data ordered by dtype (F32, BF16, F16) and
// then by name, contiguous; the header lists "__metadata__" first and the tensors in data order (for a
// single-dtype file that is sorted by name), and is padded with spaces to a multiple of 8 bytes. The file
// is written to `path`.tmp and renamed into place only when complete.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata, const WriteProgress& progress = {});

}  // namespace qvl
