// GGUF parsing and GGML dequantization (gguf.h). Every count, length, offset and size is checked against the
// bytes that are actually there before it is used, so a truncated or hostile file is refused with a message,
// never read out of bounds, and never makes this allocate more than the file could describe.
#include "io/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/dtype.h"
#include "tensor/weight_type.h"
#include "tensor/quant.h"

namespace qvl {

namespace {

constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKeys = uint64_t{1} << 20;
constexpr uint64_t kMaxName = 64;  // GGML_MAX_NAME: tensor names are at most 63 bytes
constexpr uint64_t kMaxKeyLength = uint64_t{1} << 16;
// Metadata array elements in all, each held as a GgufValue (~100 bytes): a model's vocabulary and merges are
// ~300k; this bounds what a hostile file's arrays can cost (~1.6 GB) whatever the file's size.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* value_type_name(uint32_t t) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
                                "string", "array", "uint64", "int64", "float64"};
  return t <= kF64 ? names[t] : "unknown";
}

}  // namespace

// The cursor over the file's bytes; `fail` builds "<name>: <what> (at byte N)".
struct GgufParser {
  std::span<const uint8_t> b;
  uint64_t pos = 0;
  std::string name;
  uint64_t array_elements = 0;  // so far, against kMaxArrayElements

  Status fail(const std::string& what) const {
    return Status::Error(name + ": " + what + " (at byte " + std::to_string(pos) + " of " + std::to_string(b.size()) + ")");
  }
  bool have(uint64_t n) const { return n <= b.size() - pos; }
  template <typename T>
  Result<T> read(const char* what) {
    if (!have(sizeof(T)))
      return fail(std::string("the file ends inside ") + what + ", expected " + std::to_string(sizeof(T)) + " more bytes");
    T v;
    std::memcpy(&v, b.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  Result<std::string> string(const std::string& what, uint64_t max_len) {
    QVL_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>((what + "'s length").c_str()));
    if (n > max_len) return fail(what + " is " + std::to_string(n) + " bytes long, expected at most " + std::to_string(max_len));
    if (!have(n)) return fail(what + " claims " + std::to_string(n) + " bytes but the file ends first");
    std::string s(reinterpret_cast<const char*>(b.data() + pos), n);
    pos += n;
    return s;
  }

  Result<GgufValue> value(uint32_t type, const std::string& key, bool in_array) {
    GgufValue v;
    v.gguf_type = type;
    switch (type) {
      case kU8: { QVL_ASSIGN_OR_RETURN(uint8_t x, read<uint8_t>("a uint8")); v.kind = GgufValue::Kind::kUint; v.u = x; break; }
      case kU16: { QVL_ASSIGN_OR_RETURN(uint16_t x, read<uint16_t>("a uint16")); v.kind = GgufValue::Kind::kUint; v.u = x; break; }
      case kU32: { QVL_ASSIGN_OR_RETURN(uint32_t x, read<uint32_t>("a uint32")); v.kind = GgufValue::Kind::kUint; v.u = x; break; }
      case kU64: { QVL_ASSIGN_OR_RETURN(uint64_t x, read<uint64_t>("a uint64")); v.kind = GgufValue::Kind::kUint; v.u = x; break; }
      case kI8: { QVL_ASSIGN_OR_RETURN(int8_t x, read<int8_t>("an int8")); v.kind = GgufValue::Kind::kInt; v.i = x; break; }
      case kI16: { QVL_ASSIGN_OR_RETURN(int16_t x, read<int16_t>("an int16")); v.kind = GgufValue::Kind::kInt; v.i = x; break; }
      case kI32: { QVL_ASSIGN_OR_RETURN(int32_t x, read<int32_t>("an int32")); v.kind = GgufValue::Kind::kInt; v.i = x; break; }
      case kI64: { QVL_ASSIGN_OR_RETURN(int64_t x, read<int64_t>("an int64")); v.kind = GgufValue::Kind::kInt; v.i = x; break; }
      case kF32: { QVL_ASSIGN_OR_RETURN(float x, read<float>("a float32")); v.kind = GgufValue::Kind::kFloat; v.f = x; break; }
      case kF64: { QVL_ASSIGN_OR_RETURN(double x, read<double>("a float64")); v.kind = GgufValue::Kind::kFloat; v.f = x; break; }
      case kBool: {
        QVL_ASSIGN_OR_RETURN(uint8_t x, read<uint8_t>("a bool"));
        if (x > 1) return fail("metadata " + key + ": a bool of value " + std::to_string(x) + ", expected 0 or 1");
        v.kind = GgufValue::Kind::kBool;
        v.b = x == 1;
        break;
      }
      case kString: {
        QVL_ASSIGN_OR_RETURN(v.s, string("metadata " + key + "'s string", b.size()));
        v.kind = GgufValue::Kind::kString;
        break;
      }
      case kArray: {
        if (in_array) return fail("metadata " + key + ": an array inside an array, which GGUF readers refuse");
        QVL_ASSIGN_OR_RETURN(uint32_t et, read<uint32_t>("an array's element type"));
        if (et > kF64 || et == kArray)
          return fail("metadata " + key + ": array element type " + std::to_string(et) + ", expected 0..12 but not 9 (array)");
        QVL_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>("an array's length"));
        // Every element takes at least one byte (a string at least 8): a count beyond that is a lie.
        const uint64_t least = et == kString ? 8 : (et == kU8 || et == kI8 || et == kBool) ? 1 : (et == kU16 || et == kI16) ? 2
                             : (et == kU64 || et == kI64 || et == kF64) ? 8 : 4;
        if (n > (b.size() - pos) / least)
          return fail("metadata " + key + ": an array of " + std::to_string(n) + " " + value_type_name(et) +
                      " values, more than the rest of the file can hold");
        array_elements += n;
        if (array_elements > kMaxArrayElements)
          return fail("metadata " + key + ": arrays of " + std::to_string(array_elements) + " values in all, over the limit of " +
                      std::to_string(kMaxArrayElements));
        v.kind = GgufValue::Kind::kArray;
        v.gguf_type = et;
        v.array.reserve(static_cast<size_t>(std::min<uint64_t>(n, 1 << 16)));
        for (uint64_t k = 0; k < n; ++k) {
          QVL_ASSIGN_OR_RETURN(GgufValue e, value(et, key, true));
          v.array.push_back(std::move(e));
        }
        break;
      }
      default:
        return fail("metadata " + key + ": value type " + std::to_string(type) + ", expected 0..12");
    }
    return v;
  }
};

const char* ggml_type_name(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
  }
  static const char* others[] = {nullptr, nullptr, nullptr, "Q4_1", nullptr, nullptr, "Q5_0", "Q5_1", nullptr,
                                 "Q8_1", "Q2_K", "Q3_K", nullptr, nullptr, nullptr, "Q8_K", "IQ2_XXS", "IQ2_XS",
                                 "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",
                                 "I64", "F64", "IQ1_M"};
  if (type < sizeof(others) / sizeof(others[0]) && others[type]) return others[type];
  thread_local std::string s;
  s = "type " + std::to_string(type);
  return s.c_str();
}

bool ggml_type_supported(uint32_t t) {
  WeightType w;
  return weight_type_from_ggml(t, &w);
}

namespace {
const WeightTypeTraits& traits_of(GgmlType t) {
  WeightType w = WeightType::kF32;
  QVL_CHECK(weight_type_from_ggml(static_cast<uint32_t>(t), &w));
  return weight_type_traits(w);
}
}  // namespace

int64_t ggml_block_values(GgmlType t) { return traits_of(t).block_values; }

int64_t ggml_block_bytes(GgmlType t) { return traits_of(t).block_bytes; }

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  GgufParser p{bytes, 0, name, 0};
  GgufFile f;
  f.name_ = name;
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0)
    return p.fail("not a GGUF file: it does not start with the magic \"GGUF\"");
  p.pos = 4;
  QVL_ASSIGN_OR_RETURN(f.version_, p.read<uint32_t>("the version"));
  if (f.version_ != 2 && f.version_ != 3)
    return p.fail("GGUF version " + std::to_string(f.version_) + ", expected 3 (or 2)");
  QVL_ASSIGN_OR_RETURN(uint64_t n_tensors, p.read<uint64_t>("the tensor count"));
  QVL_ASSIGN_OR_RETURN(uint64_t n_kv, p.read<uint64_t>("the metadata count"));
  if (n_tensors > kMaxTensors) return p.fail(std::to_string(n_tensors) + " tensors, expected at most " + std::to_string(kMaxTensors));
  if (n_kv > kMaxKeys) return p.fail(std::to_string(n_kv) + " metadata keys, expected at most " + std::to_string(kMaxKeys));

  for (uint64_t k = 0; k < n_kv; ++k) {
    QVL_ASSIGN_OR_RETURN(std::string key, p.string("metadata key " + std::to_string(k), kMaxKeyLength));
    if (key.empty()) return p.fail("metadata key " + std::to_string(k) + " is empty");
    if (f.kv_.count(key)) return p.fail("metadata key " + key + " appears twice");
    QVL_ASSIGN_OR_RETURN(uint32_t type, p.read<uint32_t>("a metadata value type"));
    QVL_ASSIGN_OR_RETURN(GgufValue v, p.value(type, key, false));
    f.kv_.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->gguf_type != kU32 || a->kind != GgufValue::Kind::kUint || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 20))
      return p.fail("general.alignment must be a uint32 power of two up to 1048576, got " +
                    std::string(value_type_name(a->gguf_type)) + " " + std::to_string(a->u));
    f.alignment_ = a->u;
  }

  f.tensors_.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, (bytes.size() - p.pos) / 24 + 1)));
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensor x;
    const std::string which = "tensor " + std::to_string(t);
    QVL_ASSIGN_OR_RETURN(x.name, p.string(which + "'s name", kMaxName - 1));
    if (x.name.empty()) return p.fail(which + " has an empty name");
    if (f.index_.count(x.name)) return p.fail(which + " '" + x.name + "' appears twice");
    QVL_ASSIGN_OR_RETURN(uint32_t n_dims, p.read<uint32_t>("a tensor's dimension count"));
    if (n_dims < 1 || n_dims > 4)
      return p.fail(which + " '" + x.name + "' has " + std::to_string(n_dims) + " dimensions, expected 1 to 4");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      QVL_ASSIGN_OR_RETURN(uint64_t ne, p.read<uint64_t>("a tensor dimension"));
      if (ne == 0 || ne > (uint64_t{1} << 40) || static_cast<uint64_t>(numel) > (uint64_t{1} << 50) / ne)
        return p.fail(which + " '" + x.name + "' dimension " + std::to_string(d) + " is " + std::to_string(ne) +
                      ", expected 1 or more and a total under 2^50 values");
      numel *= static_cast<int64_t>(ne);
      x.ne.push_back(static_cast<int64_t>(ne));
    }
    QVL_ASSIGN_OR_RETURN(x.type, p.read<uint32_t>("a tensor type"));
    QVL_ASSIGN_OR_RETURN(x.offset, p.read<uint64_t>("a tensor offset"));
    if (!ggml_type_supported(x.type))
      return p.fail(which + " '" + x.name + "' has GGML type " + ggml_type_name(x.type) +
                    ", which qvl does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
    const GgmlType gt = static_cast<GgmlType>(x.type);
    if (x.ne[0] % ggml_block_values(gt) != 0)
      return p.fail(which + " '" + x.name + "' has rows of " + std::to_string(x.ne[0]) + " values, not a multiple of " +
                    ggml_type_name(x.type) + "'s block of " + std::to_string(ggml_block_values(gt)));
    x.bytes = static_cast<uint64_t>(numel / ggml_block_values(gt)) * static_cast<uint64_t>(ggml_block_bytes(gt));
    if (x.offset % f.alignment_ != 0)
      return p.fail(which + " '" + x.name + "' starts at offset " + std::to_string(x.offset) +
                    ", not a multiple of the alignment " + std::to_string(f.alignment_));
    f.index_.emplace(x.name, f.tensors_.size());
    f.tensors_.push_back(std::move(x));
  }
  // The data section starts at the next multiple of the alignment; every tensor must lie inside the file.
  const uint64_t data_start = (p.pos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (data_start > bytes.size() && !f.tensors_.empty())
    return p.fail("the file ends before its data section (expected at byte " + std::to_string(data_start) + ")");
  const uint64_t data_size = data_start <= bytes.size() ? bytes.size() - data_start : 0;
  for (GgufTensor& x : f.tensors_) {
    if (x.offset > data_size || x.bytes > data_size - x.offset)
      return Status::Error(name + ": tensor '" + x.name + "' (" + ggml_type_name(x.type) + ", " + std::to_string(x.bytes) +
                           " bytes at data offset " + std::to_string(x.offset) + ") runs past the end of the file (" +
                           std::to_string(data_size) + " data bytes); is the file complete?");
    x.data = bytes.data() + data_start + x.offset;
  }
  return f;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 24) {
    ::close(fd);
    return Status::Error(path + ": not a regular file of at least 24 bytes, expected a .gguf file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) return Status::Error(path + ": cannot mmap: " + std::strerror(map_errno));
  auto r = parse(std::span<const uint8_t>(static_cast<const uint8_t*>(map), size), path);
  if (!r.ok()) {
    ::munmap(map, size);
    return r.status();
  }
  r->map_ = static_cast<const uint8_t*>(map);
  r->map_size_ = size;
  return r;
}

GgufFile::GgufFile(GgufFile&& o) noexcept { *this = std::move(o); }
GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
    name_ = std::move(o.name_);
    map_ = o.map_;
    map_size_ = o.map_size_;
    version_ = o.version_;
    alignment_ = o.alignment_;
    kv_ = std::move(o.kv_);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    o.map_ = nullptr;
    o.map_size_ = 0;
  }
  return *this;
}
GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(const std::string& n) const {
  auto it = index_.find(n);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

std::string held(const GgufValue& v) {
  switch (v.kind) {
    case GgufValue::Kind::kUint: return std::string(value_type_name(v.gguf_type)) + " " + std::to_string(v.u);
    case GgufValue::Kind::kInt: return std::string(value_type_name(v.gguf_type)) + " " + std::to_string(v.i);
    case GgufValue::Kind::kFloat: return std::string(value_type_name(v.gguf_type)) + " " + std::to_string(v.f);
    case GgufValue::Kind::kBool: return v.b ? "bool true" : "bool false";
    case GgufValue::Kind::kString: return "a string";
    case GgufValue::Kind::kArray: return "an array of " + std::to_string(v.array.size()) + " " + value_type_name(v.gguf_type);
  }
  return "?";
}

}  // namespace

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected a string");
  if (v->kind != GgufValue::Kind::kString) return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected a string");
  return v->s;
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected an integer");
  if (v->kind == GgufValue::Kind::kUint) return v->u;
  if (v->kind == GgufValue::Kind::kInt && v->i >= 0) return static_cast<uint64_t>(v->i);
  return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected a non-negative integer");
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected a number");
  if (v->kind == GgufValue::Kind::kFloat) return v->f;
  if (v->kind == GgufValue::Kind::kUint) return static_cast<double>(v->u);
  if (v->kind == GgufValue::Kind::kInt) return static_cast<double>(v->i);
  return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected a number");
}

Result<std::vector<int64_t>> GgufFile::get_ints(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected an array of integers");
  if (v->kind != GgufValue::Kind::kArray || v->gguf_type == kString || v->gguf_type == kF32 || v->gguf_type == kF64)
    return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected an array of integers");
  std::vector<int64_t> out;
  for (const GgufValue& e : v->array)
    out.push_back(e.kind == GgufValue::Kind::kUint ? static_cast<int64_t>(e.u) : e.kind == GgufValue::Kind::kBool ? e.b : e.i);
  return out;
}

Result<std::vector<double>> GgufFile::get_floats(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected an array of numbers");
  if (v->kind != GgufValue::Kind::kArray || v->gguf_type == kString || v->gguf_type == kBool)
    return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected an array of numbers");
  std::vector<double> out;
  for (const GgufValue& e : v->array)
    out.push_back(e.kind == GgufValue::Kind::kFloat ? e.f : e.kind == GgufValue::Kind::kUint ? static_cast<double>(e.u) : static_cast<double>(e.i));
  return out;
}

Result<std::vector<std::string>> GgufFile::get_strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return Status::Error(name_ + ": metadata " + key + " is missing, expected an array of strings");
  if (v->kind != GgufValue::Kind::kArray || v->gguf_type != kString)
    return Status::Error(name_ + ": metadata " + key + " is " + held(*v) + ", expected an array of strings");
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Writing

namespace {

void put(std::vector<uint8_t>& b, const void* p, size_t n) {
  b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
}
template <typename T>
void put_value(std::vector<uint8_t>& b, T v) { put(b, &v, sizeof v); }
void put_string(std::vector<uint8_t>& b, const std::string& s) {
  put_value<uint64_t>(b, s.size());
  put(b, s.data(), s.size());
}

}  // namespace

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kString); put_string(kv_, v); ++n_kv_;
}
void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kU32); put_value(kv_, v); ++n_kv_;
}
void GgufWriter::add_f32(const std::string& key, float v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kF32); put_value(kv_, v); ++n_kv_;
}
void GgufWriter::add_bool(const std::string& key, bool v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kBool); put_value<uint8_t>(kv_, v ? 1 : 0); ++n_kv_;
}
void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kArray); put_value<uint32_t>(kv_, kI32); put_value<uint64_t>(kv_, v.size());
  for (int32_t x : v) put_value(kv_, x);
  ++n_kv_;
}
void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kArray); put_value<uint32_t>(kv_, kF32); put_value<uint64_t>(kv_, v.size());
  for (float x : v) put_value(kv_, x);
  ++n_kv_;
}
void GgufWriter::add_bool_array(const std::string& key, const std::vector<bool>& v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kArray); put_value<uint32_t>(kv_, kBool); put_value<uint64_t>(kv_, v.size());
  for (bool x : v) put_value<uint8_t>(kv_, x ? 1 : 0);
  ++n_kv_;
}
void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  put_string(kv_, key); put_value<uint32_t>(kv_, kArray); put_value<uint32_t>(kv_, kString); put_value<uint64_t>(kv_, v.size());
  for (const std::string& x : v) put_string(kv_, x);
  ++n_kv_;
}
void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, std::vector<int64_t>(shape.rbegin(), shape.rend()), type, std::move(bytes)});
}

Status GgufWriter::write(const std::string& path) const {
  constexpr uint64_t kAlign = 32;
  std::vector<uint8_t> head;
  put(head, "GGUF", 4);
  put_value<uint32_t>(head, 3);
  put_value<uint64_t>(head, tensors_.size());
  put_value<uint64_t>(head, n_kv_);
  put(head, kv_.data(), kv_.size());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put_value<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put_value<uint64_t>(head, static_cast<uint64_t>(d));
    put_value<uint32_t>(head, static_cast<uint32_t>(t.type));
    put_value<uint64_t>(head, offset);
    offset += (t.bytes.size() + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, 0);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::Error(path + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  static const uint8_t zeros[kAlign] = {};
  for (const Tensor& t : tensors_) {
    ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
    const size_t pad = (kAlign - t.bytes.size() % kAlign) % kAlign;
    ok = ok && std::fwrite(zeros, 1, pad, f) == pad;
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status::Error(path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------------
// Dequantization, ggml's dequantize_row_* (ggml-quants.c) in its float arithmetic and order: the weight-type
// table's reference conversions (tensor/weight_type.h).

Status gguf_dequantize_row(uint32_t type, const uint8_t* x, float* y, int64_t n) {
  if (!ggml_type_supported(type)) return Status::Error(std::string("cannot dequantize GGML type ") + ggml_type_name(type));
  const WeightTypeTraits& t = traits_of(static_cast<GgmlType>(type));
  if (n % t.block_values != 0)
    return Status::Error(std::string(ggml_type_name(type)) + ": a row of " + std::to_string(n) + " values is not whole blocks of " +
                         std::to_string(t.block_values));
  // The file's bytes may sit at any address (general.alignment can be 1): the row is copied to aligned
  // memory first.
  const size_t bytes = static_cast<size_t>(n / t.block_values * t.block_bytes);
  thread_local std::vector<uint64_t> aligned;  // [bytes / 8 rounded up]
  aligned.resize((bytes + 7) / 8);
  std::memcpy(aligned.data(), x, bytes);
  t.to_f32(aligned.data(), y, n);
  return Status::Ok();
}

}  // namespace qvl
