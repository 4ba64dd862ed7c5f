// Images named in requests turned into pixels: data: URIs, bare base64, local paths (only from inside
// --image-dir, checked after resolving symlinks), and http(s) URLs only where the operator allows them
// (--allow-media-urls; server/media_fetch.h), refused otherwise.
#pragma once

#include <chrono>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/decode_memory.h"
#include "server/media_fetch.h"
#include "io/image.h"
#include "io/video.h"
#include "model/video_processor.h"
#include "util/status.h"

namespace qvl::server {

struct ImagePolicy {
  std::string image_dir;       // canonical directory local paths must resolve into; empty: local paths refused
  uint64_t max_file_bytes = 64u << 20;
  uint64_t max_video_file_bytes = uint64_t{512} << 20;  // a video read from a local path
  // Checked before decoding: frames up to 16.7 MP, 10 minutes, 36,000 frames, 2^34 decoded pixels.
  VideoDecodeLimits video_limits = [] {
    VideoDecodeLimits l;
    l.max_duration_s = 600;
    l.max_total_frames = 36'000;
    return l;
  }();
  ImageDecodeLimits limits;    // jpeg_reduce_factor 2: JPEGs far over the model's size decode at 1/2..1/8
  MediaFetcher* urls = nullptr;  // fetches allowed http(s) URLs; null or not enabled: URLs refused
};

// What one request's images may cost, checked from each image's header before it is decoded: each image is
// sized as the model's preprocessing will resize it (smart_resize with the request's pixel bounds), and the
// image tokens of all of them together must fit within `max_tokens` (the context). So an image that would
// be refused for the context costs no decoding at all.
class ImageBudget {
 public:
  ImageBudget(int64_t max_tokens, int64_t min_pixels, int64_t max_pixels, int factor);
  ~ImageBudget() { release_decode(); }
  ImageBudget(const ImageBudget&) = delete;
  ImageBudget& operator=(const ImageBudget&) = delete;
  // Each image admitted also reserves its decode's memory (DecodeMemory::kBytesPerPixel per pixel of its
  // header's size) from `memory`, waiting for room until `deadline`; held until release_decode() or the next
  // image's admission (images are decoded one at a time).
  void use_memory(DecodeMemory* memory, std::chrono::steady_clock::time_point deadline) {
    memory_ = memory;
    deadline_ = deadline;
  }
  void release_decode();
  // The last refusal was for want of room in the decode memory before the deadline (a 503, not the image's
  // fault).
  bool busy() const { return busy_; }
  // The last refusal was for the context: the request's images together need more tokens than it has (an API's
  // context_length_exceeded).
  bool over_context() const { return over_context_; }
  // `base` with admit() bound to this budget (the budget must outlive the decode).
  ImageDecodeLimits limits(const ImageDecodeLimits& base);
  int64_t tokens() const { return tokens_; }  // taken so far
  // The next images' own bounds (a request's per-image min/max pixels, or an exact resized size as
  // preprocess_size takes it: at least 4 tokens, at most max_pixels); resized <= 0: the image's size.
  void set_bounds(int64_t min_pixels, int64_t max_pixels, int64_t resized_height = -1, int64_t resized_width = -1);
  // The page of a multi-page file (TIFF) the next image is read from.
  void set_page(int page) { page_ = page; }
  // Admits an image made here rather than decoded (a document's page, before it is rendered) by its size: the
  // same context check and decode-memory reservation as a decoded image's header.
  Result<int64_t> admit_size(int64_t width, int64_t height) { return admit(width, height); }

 private:
  Result<int64_t> admit(int64_t width, int64_t height);
  int64_t max_tokens_, min_pixels_, max_pixels_;
  int64_t resized_height_ = -1, resized_width_ = -1;
  int page_ = 0;
  int factor_;
  int images_ = 0;
  int64_t tokens_ = 0;
  DecodeMemory* memory_ = nullptr;
  std::chrono::steady_clock::time_point deadline_{};
  uint64_t held_ = 0;  // bytes reserved in memory_
  bool busy_ = false;
  bool over_context_ = false;
};

// Makes the policy for --image-dir DIR: the directory must exist; it is stored canonical.
Result<ImagePolicy> make_image_policy(const std::string& image_dir, uint64_t max_file_bytes);

// Standard or URL-safe base64, padding optional, ASCII whitespace ignored (as in MIME line breaks).
Result<std::vector<uint8_t>> base64_decode(std::string_view text);
std::string base64_encode(const uint8_t* data, size_t size);

// The file a local image reference names, once it is proved to lie inside policy.image_dir: relative paths
// are taken from image_dir, `..` components are refused, symlinks are resolved before the check.
Result<std::string> resolve_image_path(std::string_view path, const ImagePolicy& policy);

// Whether a request's image, video or document reference is an http(s) URL (fetched, within the request's
// URL allowance): the test the loaders below apply, on the reference trimmed of white space.
bool is_media_url(std::string_view ref);

// One image reference from a request: "data:image/png;base64,...", bare base64, "file:///...", or a local
// path. `where` names the field in errors ("messages[0].content[1].image_url").
// With a budget, the image is admitted against it before decoding.
Result<ImageRGB> load_request_image(std::string_view ref, const ImagePolicy& policy, const std::string& where,
                                    ImageBudget* budget = nullptr);

// Decodes image bytes already received (a multipart upload).
Result<ImageRGB> decode_request_image(std::string_view bytes, const ImagePolicy& policy, const std::string& where,
                                      ImageBudget* budget = nullptr);

// A video named in a request: its reference, where it is in the request (for errors), and its own sampling.
struct VideoRef {
  std::string ref;
  std::string where;
  VideoOptions options;
};

// The bytes of one video reference: "data:video/mp4;base64,...", bare base64, "file:///..." or a local path
// inside policy.image_dir (--media-dir), or an allowed http(s) URL (policy.urls). Not decoded here.
Result<std::vector<uint8_t>> load_request_video_bytes(std::string_view ref, const ImagePolicy& policy,
                                                      const std::string& where);

// Whether base64 text starts with a video container's bytes (an Ollama "images" entry may carry a clip):
// only the first few hundred characters are decoded.
bool base64_is_video(std::string_view b64);

// Whether base64 text starts with a PDF (an Ollama "images" entry may carry a document).
bool base64_is_pdf(std::string_view b64);

// The bytes of one document reference (a PDF): "data:application/pdf;base64,...", bare base64, "file:///..." or
// a file name inside policy.image_dir (--media-dir), or an allowed http(s) URL; refused unless it is a PDF.
Result<std::vector<uint8_t>> load_request_document_bytes(std::string_view ref, const ImagePolicy& policy,
                                                         const std::string& where);

}  // namespace qvl::server
