// Reading safetensors checkpoints by mmap (one file or a sharded model directory) and writing them by streaming.
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "util/file.h"

namespace qvl {

namespace {

// A header bigger than this is not a checkpoint header (the 2B model's is about 80 KB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel × element size, or false when a dimension is negative or the product overflows.
bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

// One header entry before it becomes a TensorView.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // relative to the start of the data area
};

// Checks one header entry: its fields have the right types, its dtype is one qvl reads, and its byte range
// matches its shape. Where the range lies in the file is checked later, with all entries at hand.
Result<Entry> parse_entry(const std::string& name, const nlohmann::json& v) {
  const std::string where = "tensor " + in_quotes(name);
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    return Status::Error(where + ": header entry must be an object with dtype, shape and data_offsets, got " +
                         v.dump().substr(0, 200));
  const auto& dt = v["dtype"];
  const auto& sh = v["shape"];
  const auto& off = v["data_offsets"];
  Entry e;
  e.name = name;
  if (!dt.is_string()) return Status::Error(where + ": dtype must be a string, got " + dt.dump());
  if (!dtype_from_name(dt.get<std::string>(), &e.dtype))
    return Status::Error(where + " has dtype " + dt.get<std::string>() +
                         ", expected F32, F16, BF16 or U8 (convert the checkpoint to BF16)");
  if (!sh.is_array()) return Status::Error(where + ": shape must be an array, got " + sh.dump());
  for (const auto& d : sh) {
    if (!d.is_number_unsigned())
      return Status::Error(where + ": shape must hold non-negative integers, got " + sh.dump());
    e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(d.get<uint64_t>(), uint64_t{1} << 62)));
  }
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    return Status::Error(where + ": data_offsets must be [begin, end] with non-negative integers, got " + off.dump());
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  uint64_t nbytes = 0;
  if (!checked_nbytes(e.shape, dtype_size(e.dtype), &nbytes))
    return Status::Error(where + ": shape " + sh.dump() + " is too large");
  if (e.end < e.begin || e.end - e.begin != nbytes)
    return Status::Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                         "] hold " + (e.end < e.begin ? std::string("a negative number of") : std::to_string(e.end - e.begin)) +
                         " bytes, expected " + std::to_string(nbytes) + " for " + dt.get<std::string>() + " " +
                         shape_string(e.shape) + " (the header does not match the data)");
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// SafetensorsFile

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file, expected a .safetensors file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return Status::Error(path + ": file is " + std::to_string(size) +
                         " bytes, too short for a safetensors header (at least 8 bytes expected)");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) return Status::Error(path + ": cannot mmap: " + std::strerror(map_errno));

  SafetensorsFile file;
  file.path_ = path;
  file.base_ = static_cast<const uint8_t*>(map);
  file.size_ = size;
  // From here on `file` owns the mapping, so every early return unmaps it.
  auto fail = [&](const std::string& what) { return Status::Error(path + ": " + what); };

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file.base_[i];  // little-endian u64
  if (header_len >= kMaxHeaderBytes || header_len > size - 8)
    return fail("header length " + std::to_string(header_len) + " is impossible for a file of " +
                std::to_string(size) + " bytes (expected under 100 MB and inside the file; is this a "
                ".safetensors file, and is it complete?)");
  const char* hbegin = reinterpret_cast<const char*>(file.base_ + 8);
  auto header = nlohmann::json::parse(hbegin, hbegin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return fail("header is not valid JSON (the file is damaged or not a .safetensors file)");
  if (!header.is_object()) return fail("header must be a JSON object, got " + std::string(header.type_name()));

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return fail("__metadata__ must be an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return fail("__metadata__ value of " + in_quotes(k) + " must be a string, got " + v.dump());
        file.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto e = parse_entry(name, value);
    if (!e.ok()) return e.status().with_context(path);
    if (e->end > data_size)
      return fail("tensor " + in_quotes(name) + " runs past the end of the file: its data ends at byte " +
                  std::to_string(data_start + e->end) + ", the file has " + std::to_string(size) +
                  " bytes (the file is truncated; copy or download it again)");
    entries.push_back(std::move(e).value());
  }

  // Tensors may leave gaps between them, but never share bytes.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      return fail("tensors " + in_quotes(entries[i - 1].name) + " and " + in_quotes(entries[i].name) +
                  " overlap: bytes [" + std::to_string(entries[i - 1].begin) + ", " + std::to_string(entries[i - 1].end) +
                  ") and [" + std::to_string(entries[i].begin) + ", " + std::to_string(entries[i].end) +
                  ") of the data area (expected disjoint data_offsets)");

  file.tensors_.reserve(entries.size());
  for (auto& e : entries) {
    file.index_[e.name] = file.tensors_.size();
    file.tensors_.push_back(TensorView{std::move(e.name), e.dtype, std::move(e.shape),
                                       file.base_ + data_start + e.begin, static_cast<size_t>(e.end - e.begin)});
  }
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    base_ = other.base_;
    size_ = other.size_;
    tensors_ = std::move(other.tensors_);  // the views keep pointing into the mapping, which does not move
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    other.base_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------------------------
// SafetensorsModel

Result<SafetensorsModel> SafetensorsModel::open(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  SafetensorsModel model;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::Error(dir + ": not a directory; expected a model directory holding model.safetensors "
                         "(or model.safetensors.index.json and its shards)");

  if (fs::exists(single, ec)) {
    QVL_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single.string()));
    model.files_.push_back(std::move(f));
  } else if (fs::exists(index_path, ec)) {
    const std::string where = index_path.string();
    QVL_ASSIGN_OR_RETURN(std::string text, read_file_text(where, 64 << 20));
    auto index = nlohmann::json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return Status::Error(where + ": expected a JSON object with a \"weight_map\" object (tensor name -> shard file)");
    // weight_map: tensor name -> shard file name. Open every shard once.
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) return Status::Error(where + ": weight_map entry " + in_quotes(name) + " must be a file name");
      const std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s.find('\\') != std::string::npos || s == "." || s == "..")
        return Status::Error(where + ": weight_map entry " + in_quotes(name) + " names shard " + in_quotes(s) +
                             ", expected a plain file name in the model directory");
      by_shard[s].push_back(name);
    }
    for (const auto& [shard, names] : by_shard) {
      const std::string shard_path = (fs::path(dir) / shard).string();
      auto f = SafetensorsFile::open(shard_path);
      if (!f.ok())
        return f.status().with_context(where + " names shard " + shard + " for " + std::to_string(names.size()) +
                                       " tensors (e.g. " + in_quotes(names.front()) + "), which cannot be read");
      for (const auto& name : names)
        if (!f->find(name))
          return Status::Error(where + ": tensor " + in_quotes(name) + " is listed in shard " + shard +
                               " but that shard does not hold it (the index and the shards do not match)");
      model.files_.push_back(std::move(f).value());
    }
  } else {
    return Status::Error(dir + ": no model.safetensors or model.safetensors.index.json found (expected a Hugging "
                         "Face model directory; try `qvl make-test-model` to create one for tests)");
  }

  for (const auto& f : model.files_) {
    for (const auto& t : f.tensors()) {
      auto [it, inserted] = model.index_.emplace(t.name, model.tensors_.size());
      if (!inserted)
        return Status::Error(dir + ": tensor " + in_quotes(t.name) + " appears in two files (" +
                             f.path() + " and another shard); expected each tensor once");
      model.tensors_.push_back(t);
    }
  }
  return model;
}

const TensorView* SafetensorsModel::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsModel SafetensorsModel::from_views(std::vector<TensorView> tensors, std::map<std::string, std::string> metadata,
                                              uint64_t bytes) {
  SafetensorsModel m;
  m.tensors_ = std::move(tensors);
  for (size_t i = 0; i < m.tensors_.size(); ++i) m.index_.emplace(m.tensors_[i].name, i);
  m.extra_metadata_ = std::move(metadata);
  m.extra_bytes_ = bytes;
  return m;
}

const std::string* SafetensorsModel::metadata(const std::string& key) const {
  if (auto it = extra_metadata_.find(key); it != extra_metadata_.end()) return &it->second;
  for (const SafetensorsFile& f : files_) {
    auto it = f.metadata().find(key);
    if (it != f.metadata().end()) return &it->second;
  }
  return nullptr;
}

void SafetensorsModel::release(const TensorView& t) { release(t.data, t.nbytes); }

void SafetensorsModel::release(const void* data, size_t bytes) {
  // Only whole pages inside the range: a neighbour tensor sharing an edge page stays resident.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

uint64_t SafetensorsModel::mapped_bytes() const {
  uint64_t n = extra_bytes_;
  for (const auto& f : files_) n += f.file_size();
  return n;
}

// ---------------------------------------------------------------------------------------------------------
// Writing

TensorToWrite tensor_from_memory(std::string name, DType dtype, std::vector<int64_t> shape, const void* data) {
  const size_t elem = dtype_size(dtype);
  const uint8_t* src = static_cast<const uint8_t*>(data);
  return TensorToWrite{std::move(name), dtype, std::move(shape), [src, elem](int64_t first, int64_t count, uint8_t* dst) {
                         std::memcpy(dst, src + first * elem, static_cast<size_t>(count) * elem);
                       }};
}

namespace {

// The Python library sorts tensors by dtype, largest alignment first, then by name.
int dtype_rank(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kBF16: return 1;
    case DType::kF16: return 2;
    case DType::kU8: return 3;
  }
  return 4;
}

// Tensor data streams through a buffer of this size: big enough that each write is one large sequential
// write, small enough not to matter next to a 4 GB model.
constexpr size_t kWriteBufferBytes = 64u << 20;

class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)), f_(std::fopen(path_.c_str(), "wb")) {}
  ~OutFile() {
    if (f_) {
      std::fclose(f_);
      std::remove(path_.c_str());  // not closed through close(): an error path, drop the partial file
    }
  }
  bool is_open() const { return f_ != nullptr; }
  bool write(const void* p, size_t n) { return n == 0 || std::fwrite(p, 1, n, f_) == n; }
  bool close() {
    bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    return ok;
  }

 private:
  std::string path_;
  FILE* f_;
};

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata, const WriteProgress& progress) {
  // Check the request, then lay the data out in the Python library's order.
  std::set<std::string> names;
  std::vector<size_t> order(tensors.size());
  std::vector<uint64_t> nbytes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__")
      return Status::Error(path + ": cannot write a tensor named " + in_quotes(t.name));
    if (!names.insert(t.name).second) return Status::Error(path + ": tensor " + in_quotes(t.name) + " is given twice");
    if (!checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes[i]))
      return Status::Error(path + ": tensor " + in_quotes(t.name) + " has an invalid shape " + shape_string(t.shape));
    if (!t.fill) return Status::Error(path + ": tensor " + in_quotes(t.name) + " has no fill function");
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = dtype_rank(tensors[a].dtype), rb = dtype_rank(tensors[b].dtype);
    return ra != rb ? ra < rb : tensors[a].name < tensors[b].name;
  });

  // Header: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}, compact JSON
  // in the field order serde writes, padded with spaces to a multiple of 8.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = dtype_name(tensors[i].dtype);
    e["shape"] = tensors[i].shape;
    e["data_offsets"] = {offset, offset + nbytes[i]};
    header[tensors[i].name] = e;
    offset += nbytes[i];
  }
  const uint64_t total_data = offset;
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  OutFile out(tmp);
  if (!out.is_open()) return Status::Error(tmp + ": cannot create: " + std::strerror(errno));
  auto write_failed = [&] { return Status::Error(tmp + ": write failed: " + std::strerror(errno) + " (is the disk full?)"); };
  uint8_t len_bytes[8];
  for (int b = 0; b < 8; ++b) len_bytes[b] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * b));
  if (!out.write(len_bytes, 8) || !out.write(header_text.data(), header_text.size())) return write_failed();

  std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(kWriteBufferBytes, std::max<uint64_t>(total_data, 1))));
  uint64_t done = 0;
  for (size_t i : order) {
    const TensorToWrite& t = tensors[i];
    const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
    const int64_t numel = static_cast<int64_t>(nbytes[i]) / elem;
    const int64_t per_piece = std::max<int64_t>(1, static_cast<int64_t>(buffer.size()) / elem);
    for (int64_t first = 0; first < numel; first += per_piece) {
      const int64_t count = std::min(per_piece, numel - first);
      t.fill(first, count, buffer.data());
      if (!out.write(buffer.data(), static_cast<size_t>(count * elem))) return write_failed();
      done += static_cast<uint64_t>(count * elem);
      if (progress) progress(done, total_data);
    }
  }
  if (!out.close()) return write_failed();
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Status::Error(path + ": cannot move the finished file into place: " + ec.message());
  }
  return Status::Ok();
}

}  // namespace qvl
