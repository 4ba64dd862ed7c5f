// SHA-256 and SHA-1 with OpenSSL's libcrypto (EVP).
#include "util/digest.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace qvl {

struct Digest::Ctx {
  EVP_MD_CTX* md = nullptr;
};

Digest::Digest(Kind kind) : ctx_(new Ctx) {
  ctx_->md = EVP_MD_CTX_new();
  QVL_CHECK(ctx_->md && EVP_DigestInit_ex(ctx_->md, kind == Kind::kSha256 ? EVP_sha256() : EVP_sha1(), nullptr) == 1);
}

Digest::~Digest() { EVP_MD_CTX_free(ctx_->md); }

void Digest::update(const void* data, size_t size) { QVL_CHECK(EVP_DigestUpdate(ctx_->md, data, size) == 1); }

std::string Digest::finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  QVL_CHECK(EVP_DigestFinal_ex(ctx_->md, out, &len) == 1);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string to_hex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

std::string sha256_hex(const void* data, size_t size) {
  Digest d;
  d.update(data, size);
  return to_hex(d.finish());
}

namespace {

Result<std::string> digest_file(const std::string& path, Digest::Kind kind, bool git_blob_prefix) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return Status::Error(path + ": cannot open to verify it: " + std::strerror(errno));
  Digest d(kind);
  if (git_blob_prefix) {
    struct stat st {};
    if (::fstat(::fileno(f.get()), &st) != 0) return Status::Error(path + ": " + std::strerror(errno));
    const std::string prefix = "blob " + std::to_string(st.st_size);
    d.update(prefix.c_str(), prefix.size() + 1);  // with the terminating NUL
  }
  std::vector<unsigned char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) d.update(buf.data(), n);
  if (std::ferror(f.get())) return Status::Error(path + ": read failed while verifying it: " + std::strerror(errno));
  return to_hex(d.finish());
}

}  // namespace

Result<std::string> sha256_file(const std::string& path) { return digest_file(path, Digest::Kind::kSha256, false); }

Result<std::string> git_blob_sha1_file(const std::string& path) { return digest_file(path, Digest::Kind::kSha1, true); }

}  // namespace qvl
