// Helpers shared by the fuzz targets: a bounded JSON parse (the depth limit the server applies before
// parsing), a per-process scratch file for readers that take a path, reading the repository's files, and the
// check that a refusal says why.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace qvl::fuzz {

// Parses `text` as JSON unless it nests deeper than `max_depth` (counted over brackets outside strings)
// or is not JSON; the discarded value then. The depth check stands for the one at the server's edge.
template <class Json = nlohmann::ordered_json>
Json parse_json_bounded(std::string_view text, int max_depth = 64) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return Json(Json::value_t::discarded);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// A scratch directory of this process (fuzzers running side by side never share one), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      const char* shm = "/dev/shm";
      const std::filesystem::path base = std::filesystem::is_directory(shm) ? shm : std::filesystem::temp_directory_path();
      path = base / ("qvl-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// Writes `size` bytes to `path`, replacing it.
inline void write_bytes(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  QVL_CHECK_MSG(f != nullptr, "cannot create a scratch file");
  QVL_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  QVL_CHECK(std::fclose(f) == 0);
}

// A whole file of the repository (test data, model files); aborts when it is missing: a setup error.
inline std::vector<uint8_t> read_repo_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz target: cannot read %s\n", path.c_str());
    std::abort();
  }
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Whether a parser refused its input: true when it did, and then its refusal must say why (a non-empty
// message); false when it accepted.
template <class T>
bool refused(const Result<T>& r) {
  if (r.ok()) return false;
  QVL_CHECK(!r.status().message().empty());
  return true;
}

}  // namespace qvl::fuzz
