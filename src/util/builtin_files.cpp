// Reading the files built into the executable (zlib's gzip decoder), and a model's small files from there
// or from the disk.
#include "util/builtin_files.h"

#include <zlib.h>

#include <filesystem>
#include <limits>

#include "util/file.h"

namespace qvl {

namespace builtin_data {
// Defined in the generated builtin_files.cpp (cmake/embed_compressed.cmake).
extern const BuiltinFile kFiles[];
extern const size_t kFileCount;
}  // namespace builtin_data

bool is_builtin_path(const std::string& path) { return path.rfind(kBuiltinPrefix, 0) == 0; }

namespace {
// The built-in file's name in a "builtin:NAME/FILE" path.
std::string builtin_name(const std::string& path) {
  return std::filesystem::path(path.substr(std::char_traits<char>::length(kBuiltinPrefix))).lexically_normal().string();
}
}  // namespace

std::vector<const BuiltinFile*> builtin_files() {
  std::vector<const BuiltinFile*> out;
  for (size_t i = 0; i < builtin_data::kFileCount; ++i) out.push_back(&builtin_data::kFiles[i]);
  return out;
}

Result<std::string> read_builtin_file(const std::string& name) {
  const BuiltinFile* f = nullptr;
  std::string names;
  for (const BuiltinFile* b : builtin_files()) {
    if (name == b->name) f = b;
    names += (names.empty() ? "" : ", ") + std::string(b->name);
  }
  if (!f) return Status::Error(kBuiltinPrefix + name + ": no such built-in file (built in: " + names + ")");
  std::string out(f->size, '\0');
  z_stream z{};
  // 16 + MAX_WBITS: a gzip header and trailer around the deflate stream.
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return Status::Error(kBuiltinPrefix + name + ": zlib cannot start");
  const size_t gz_size = static_cast<size_t>(f->gz_end - f->gz);
  QVL_CHECK(gz_size <= std::numeric_limits<uInt>::max() && f->size <= std::numeric_limits<uInt>::max());
  z.next_in = const_cast<Bytef*>(f->gz);
  z.avail_in = static_cast<uInt>(gz_size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const size_t got = out.size() - z.avail_out;
  inflateEnd(&z);
  // The build wrote both the stream and its size: a mismatch is a broken build, not a user's error.
  QVL_CHECK(rc == Z_STREAM_END && got == f->size);
  return out;
}

Result<std::string> read_model_file(const std::string& path, uint64_t max_bytes) {
  if (!is_builtin_path(path)) return read_file_text(path, max_bytes);
  QVL_ASSIGN_OR_RETURN(std::string text, read_builtin_file(builtin_name(path)));
  if (text.size() > max_bytes)
    return Status::Error(path + ": file is " + std::to_string(text.size()) + " bytes, over the limit of " +
                         std::to_string(max_bytes));
  return text;
}

bool model_file_exists(const std::string& path) {
  if (!is_builtin_path(path)) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
  }
  const std::string name = builtin_name(path);
  for (const BuiltinFile* b : builtin_files())
    if (name == b->name) return true;
  return false;
}

}  // namespace qvl
