// Reading whole files into memory, with errors that name the file.
#include "util/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

namespace qvl {

namespace {
Result<std::string> read_impl(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::Error(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Status::Error(path + ": is a directory, expected a file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return Status::Error(path + ": file is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                         std::to_string(max_bytes));
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err || got != out.size())
    return Status::Error(path + ": read " + std::to_string(got) + " of " + std::to_string(out.size()) + " bytes");
  return out;
}
}  // namespace

Result<std::vector<uint8_t>> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  QVL_ASSIGN_OR_RETURN(std::string s, read_impl(path, max_bytes));
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<std::string> read_file_text(const std::string& path, uint64_t max_bytes) {
  return read_impl(path, max_bytes);
}

Status write_file_bytes(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::Error(path + ": cannot create: " + std::strerror(errno));
  size_t put = size ? std::fwrite(data, 1, size, f) : 0;
  bool ok = put == size && std::fclose(f) == 0;
  if (!ok) return Status::Error(path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace qvl
