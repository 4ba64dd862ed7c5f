// The digests a model hub publishes for its files, computed over a file on disk with OpenSSL's libcrypto:
// SHA-256 (LFS files on Hugging Face, every file on ModelScope) and git's blob SHA-1 (small files on Hugging Face).
#pragma once

#include <string>

#include "util/status.h"

namespace qvl::hub {

// Lowercase hex SHA-256 of the file's bytes.
Result<std::string> sha256_file(const std::string& path);

// Lowercase hex of git's blob id: SHA-1 over "blob <size>\0" followed by the file's bytes.
Result<std::string> git_blob_sha1_file(const std::string& path);

}  // namespace qvl::hub
