// SHA-256 (and the SHA-1 of git's blob ids) with OpenSSL's libcrypto: one helper for the hub's file checks,
// the image cache's keys and the tests' golden hashes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "util/status.h"

namespace qvl {

// A running digest: update() with bytes (or a trivially copyable value's bytes), then finish() once.
class Digest {
 public:
  enum class Kind { kSha256, kSha1 };
  explicit Digest(Kind kind = Kind::kSha256);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void update(const void* data, size_t size);
  template <class T>
  void update_value(const T& v) {
    update(&v, sizeof v);
  }
  // The digest's bytes (32 for SHA-256, 20 for SHA-1); the object is spent.
  std::string finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Lowercase hex of bytes ("e3b0c442...").
std::string to_hex(const std::string& bytes);
// Lowercase hex SHA-256 of `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);
// Lowercase hex SHA-256 of a file's bytes, read in 1 MiB pieces.
Result<std::string> sha256_file(const std::string& path);
// Lowercase hex of git's blob id: SHA-1 over "blob <size>\0" followed by the file's bytes.
Result<std::string> git_blob_sha1_file(const std::string& path);

}  // namespace qvl
