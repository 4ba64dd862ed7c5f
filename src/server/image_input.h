// Images named in requests turned into pixels: data: URIs, bare base64, and local paths (only from inside
// --image-dir, checked after resolving symlinks); http(s) URLs are refused, never fetched.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/image.h"
#include "util/status.h"

namespace qvl::server {

struct ImagePolicy {
  std::string image_dir;       // canonical directory local paths must resolve into; empty: local paths refused
  uint64_t max_file_bytes = 64u << 20;
  ImageDecodeLimits limits;
};

// Makes the policy for --image-dir DIR: the directory must exist; it is stored canonical.
Result<ImagePolicy> make_image_policy(const std::string& image_dir, uint64_t max_file_bytes);

// Standard or URL-safe base64, padding optional, ASCII whitespace ignored (as in MIME line breaks).
Result<std::vector<uint8_t>> base64_decode(std::string_view text);
std::string base64_encode(const uint8_t* data, size_t size);

// The file a local image reference names, once it is proved to lie inside policy.image_dir: relative paths
// are taken from image_dir, `..` components are refused, symlinks are resolved before the check.
Result<std::string> resolve_image_path(std::string_view path, const ImagePolicy& policy);

// One image reference from a request: "data:image/png;base64,...", bare base64, "file:///...", or a local
// path. `where` names the field in errors ("messages[0].content[1].image_url").
Result<ImageRGB> load_request_image(std::string_view ref, const ImagePolicy& policy, const std::string& where);

// Decodes image bytes already received (a multipart upload).
Result<ImageRGB> decode_request_image(std::string_view bytes, const ImagePolicy& policy, const std::string& where);

}  // namespace qvl::server
