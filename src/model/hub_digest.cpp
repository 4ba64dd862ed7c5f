// The digests a model hub publishes for its files, computed over a file on disk with OpenSSL's libcrypto:
// SHA-256 (LFS files on Hugging Face, every file on ModelScope) and git's blob SHA-1 (small files on Hugging Face).
#include "model/hub_digest.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace qvl::hub {

namespace {

Result<std::string> digest_file(const std::string& path, const EVP_MD* md, bool git_blob_prefix) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return Status::Error(path + ": cannot open to verify it: " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) return Status::Error("libcrypto: digest init failed");
  if (git_blob_prefix) {
    struct stat st {};
    if (::fstat(::fileno(f.get()), &st) != 0) return Status::Error(path + ": " + std::strerror(errno));
    const std::string prefix = "blob " + std::to_string(st.st_size);
    EVP_DigestUpdate(ctx.get(), prefix.c_str(), prefix.size() + 1);  // with the terminating NUL
  }
  std::vector<unsigned char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  if (std::ferror(f.get())) return Status::Error(path + ": read failed while verifying it: " + std::strerror(errno));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &len);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[out[i] >> 4];
    hex += kHex[out[i] & 15];
  }
  return hex;
}

}  // namespace

Result<std::string> sha256_file(const std::string& path) { return digest_file(path, EVP_sha256(), false); }

Result<std::string> git_blob_sha1_file(const std::string& path) { return digest_file(path, EVP_sha1(), true); }

}  // namespace qvl::hub
