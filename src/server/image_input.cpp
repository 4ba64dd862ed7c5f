// Images named in requests turned into pixels: data: URIs, bare base64, and local paths (only from inside
// --image-dir, checked after resolving symlinks); http(s) URLs are refused, never fetched.
#include "server/image_input.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "io/pdf.h"
#include "model/image_processor.h"
#include "util/file.h"

namespace qvl::server {

namespace fs = std::filesystem;

namespace {

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A short quotation of user input for error messages.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 48;
  std::string out = "'";
  for (char c : s.substr(0, kMax)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (s.size() > kMax) out += "...";
  return out + "'";
}

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool inside_dir(const std::string& path, const std::string& dir) {
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

// Bare base64 is told from a path by what it decodes to: an image signature, or too much data to be a
// file name.
// The bytes of a base64 data: URI ("data:<type>;base64,<data>"); `expected` shows the form in errors.
Result<std::vector<uint8_t>> decode_data_uri(std::string_view ref, const std::string& where, const char* expected) {
  const size_t comma = ref.find(',');
  if (comma == std::string_view::npos)
    return Status::Error(where + ": a data: URI without ','; expected " + expected);
  const std::string_view header = ref.substr(5, comma - 5);
  if (header.size() < 7 || !starts_with_ci(header.substr(header.size() - 7), ";base64"))
    return Status::Error(where + ": only base64 data: URIs are supported (got " + quote(ref.substr(0, comma + 1)) +
                         "); expected " + expected);
  auto bytes = base64_decode(ref.substr(comma + 1));
  if (!bytes.ok()) return bytes.status().with_context(where);
  return bytes;
}

bool looks_like_image_data(const std::vector<uint8_t>& bytes) {
  return detect_image_format(bytes) != ImageFormat::kUnknown || bytes.size() >= 256;
}

}  // namespace

Result<ImagePolicy> make_image_policy(const std::string& image_dir, uint64_t max_file_bytes) {
  ImagePolicy p;
  p.max_file_bytes = max_file_bytes;
  p.limits.jpeg_reduce_factor = 2;
  if (image_dir.empty()) return p;
  std::error_code ec;
  fs::path real = fs::canonical(image_dir, ec);
  if (ec || !fs::is_directory(real, ec)) {
    return Status::Error("--image-dir " + image_dir + ": not a directory" + (ec ? " (" + ec.message() + ")" : "") +
                         "; give an existing directory of images");
  }
  p.image_dir = real.string();
  return p;
}

Result<std::vector<uint8_t>> base64_decode(std::string_view text) {
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isspace(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || padding > 0) {
      return Status::Error("not valid base64: unexpected " +
                           (v < 0 ? "character " + quote(std::string_view(text).substr(i, 1)) : std::string("data after '='")) +
                           " at offset " + std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6 || padding > 2) return Status::Error("not valid base64: the data ends in the middle of a byte");
  return out;
}

std::string base64_encode(const uint8_t* data, size_t size) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t n = (uint32_t(data[i]) << 16) | (i + 1 < size ? uint32_t(data[i + 1]) << 8 : 0) |
                       (i + 2 < size ? uint32_t(data[i + 2]) : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[n & 63] : '=';
  }
  return out;
}

Result<std::string> resolve_image_path(std::string_view path, const ImagePolicy& policy) {
  if (policy.image_dir.empty()) {
    return Status::Error("local image paths are not allowed (got " + quote(path) +
                         "): the server was started without --image-dir; send the image inline as base64 or a "
                         "data: URI");
  }
  fs::path p{std::string(path)};
  for (const fs::path& part : p) {
    if (part == "..") return Status::Error("image path " + quote(path) + ": '..' is not allowed in image paths");
  }
  if (p.is_relative()) p = fs::path(policy.image_dir) / p;
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(p, ec);  // symlinks in the existing part resolved
  if (ec) return Status::Error("image path " + quote(path) + ": cannot resolve it (" + ec.message() + ")");
  if (!inside_dir(real.string(), policy.image_dir)) {
    return Status::Error("image path " + quote(path) + " is outside the image directory (--image-dir); only "
                         "files inside it can be read");
  }
  if (!fs::exists(real, ec)) return Status::Error("image path " + quote(path) + ": no such file in the image directory");
  if (!fs::is_regular_file(real, ec)) return Status::Error("image path " + quote(path) + ": not a regular file");
  return real.string();
}

ImageBudget::ImageBudget(int64_t max_tokens, int64_t min_pixels, int64_t max_pixels, int factor)
    : max_tokens_(max_tokens), min_pixels_(min_pixels), max_pixels_(max_pixels), factor_(factor) {}

ImageDecodeLimits ImageBudget::limits(const ImageDecodeLimits& base) {
  ImageDecodeLimits l = base;
  l.admit = [this](int64_t w, int64_t h) { return admit(w, h); };
  l.page = page_;
  return l;
}

void ImageBudget::set_bounds(int64_t min_pixels, int64_t max_pixels, int64_t resized_height, int64_t resized_width) {
  min_pixels_ = min_pixels;
  max_pixels_ = max_pixels;
  resized_height_ = resized_height;
  resized_width_ = resized_width;
}

Result<int64_t> ImageBudget::admit(int64_t width, int64_t height) {
  // EXIF orientation may swap the sides; smart_resize's area does not depend on which is which. An exact
  // size asked for is resized as preprocess_size does it.
  over_context_ = false;
  const bool exact = resized_height_ > 0 && resized_width_ > 0;
  const int64_t floor_px = std::min<int64_t>(int64_t{4} * factor_ * factor_, max_pixels_);
  QVL_ASSIGN_OR_RETURN(ResizedSize r, exact ? smart_resize(resized_height_, resized_width_, factor_, floor_px, max_pixels_)
                                            : smart_resize(height, width, factor_, min_pixels_, max_pixels_));
  const int64_t pixels = static_cast<int64_t>(r.height) * r.width;
  const int64_t tokens = pixels / (static_cast<int64_t>(factor_) * factor_);
  ++images_;
  over_context_ = tokens_ + tokens > max_tokens_;
  if (over_context_) {
    return Status::Error("image " + std::to_string(images_) + " is resized to " + std::to_string(r.width) + "x" +
                         std::to_string(r.height) + " and needs " + std::to_string(tokens) + " tokens; with the " +
                         "request's other images that is " + std::to_string(tokens_ + tokens) +
                         " image tokens, over the context of " + std::to_string(max_tokens_) +
                         " (hint: send smaller or fewer images, or lower max_pixels)");
  }
  // The decode's memory, from the server's budget: the previous image's is given back first (it is resized
  // by now), then this one waits for room.
  release_decode();
  busy_ = false;
  if (memory_) {
    const uint64_t bytes = static_cast<uint64_t>(width) * static_cast<uint64_t>(height) * DecodeMemory::kBytesPerPixel;
    switch (memory_->acquire(bytes, deadline_)) {
      case DecodeMemory::Got::kOk: held_ = bytes; break;
      case DecodeMemory::Got::kTooLarge:
        return Status::Error("image " + std::to_string(images_) + " is " + std::to_string(width) + "x" +
                             std::to_string(height) + ": decoding it takes " + std::to_string(bytes >> 20) +
                             " MiB, over the server's image decode memory of " + std::to_string(memory_->capacity() >> 20) +
                             " MiB (--decode-memory-mb); send a smaller image");
      case DecodeMemory::Got::kBusy:
        busy_ = true;
        return Status::Error("the server is decoding other images and has no room for image " + std::to_string(images_) +
                             " (" + std::to_string(width) + "x" + std::to_string(height) + ") before the request's "
                             "deadline; retry in a moment");
    }
  }
  tokens_ += tokens;
  return pixels;
}

void ImageBudget::release_decode() {
  if (memory_ && held_ > 0) memory_->release(held_);
  held_ = 0;
}

Result<ImageRGB> decode_request_image(std::string_view bytes, const ImagePolicy& policy, const std::string& where,
                                      ImageBudget* budget) {
  auto img = decode_image({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                          budget ? budget->limits(policy.limits) : policy.limits);
  if (!img.ok()) return img.status().with_context(where);
  return img;
}

namespace {

// The path of a file: URI (RFC 8089): "file:///abs/path" or "file://localhost/abs/path"; a URI naming another
// host is refused (it is not a file of this machine). "file://NAME" with no '/' at all names NAME in the
// media directory, as qvl has always read it.
Result<std::string_view> file_uri_path(std::string_view ref, const std::string& where) {
  const std::string_view rest = ref.substr(7);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return rest;
  const std::string_view authority = rest.substr(0, slash);
  const bool local = authority.empty() || (authority.size() == 9 && starts_with_ci(authority, "localhost"));
  if (!local)
    return Status::Error(where + ": " + quote(ref) + " names a file on host '" + std::string(authority.substr(0, 60)) +
                         "'; only this machine's files are read (file:///path or file://localhost/path)");
  return rest.substr(slash);
}

}  // namespace

bool is_media_url(std::string_view ref) {
  ref = trim(ref);
  return starts_with_ci(ref, "http://") || starts_with_ci(ref, "https://");
}

Result<ImageRGB> load_request_image(std::string_view ref_in, const ImagePolicy& policy, const std::string& where,
                                    ImageBudget* budget) {
  const std::string_view ref = trim(ref_in);
  if (ref.empty()) return Status::Error(where + ": empty image; expected a data: URI or base64 image data");
  auto decode_bytes = [&](const std::vector<uint8_t>& bytes) -> Result<ImageRGB> {
    auto img = decode_image(bytes, budget ? budget->limits(policy.limits) : policy.limits);
    if (!img.ok()) return img.status().with_context(where);
    return img;
  };

  if (starts_with_ci(ref, "data:")) {
    QVL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, decode_data_uri(ref, where, "data:image/jpeg;base64,<data>"));
    return decode_bytes(bytes);
  }
  if (is_media_url(ref)) {
    if (!policy.urls || !policy.urls->enabled())
      return Status::Error(where + ": image URLs are not fetched (got " + quote(ref) +
                           "); send the image inline as a data: URI (data:image/jpeg;base64,...) or as base64 (a server "
                           "started with --allow-media-urls HOST fetches URLs of HOST)");
    QVL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, policy.urls->fetch(ref, MediaFetcher::Kind::kImage, policy.max_file_bytes, where));
    return decode_bytes(bytes);
  }
  std::string_view path = ref;
  bool is_path = false;
  if (starts_with_ci(ref, "file://")) {
    QVL_ASSIGN_OR_RETURN(path, file_uri_path(ref, where));
    is_path = true;
  }
  if (path.find('\0') != std::string_view::npos)
    return Status::Error(where + ": the image reference has a NUL byte; a path or URI never does");
  if (!is_path) {
    auto bytes = base64_decode(ref);
    if (bytes.ok() && looks_like_image_data(*bytes)) return decode_bytes(*bytes);
    const bool path_like = ref.size() <= 4096 && ref.find('\n') == std::string_view::npos;
    if (!path_like) {
      if (!bytes.ok()) return bytes.status().with_context(where);
      return decode_bytes(*bytes);
    }
    if (policy.image_dir.empty()) {
      return Status::Error(where + ": " + quote(ref) + " is not base64 image data, and local image paths are not "
                           "allowed (start the server with --image-dir DIR to read images from DIR)");
    }
  }
  auto file = resolve_image_path(path, policy);
  if (!file.ok()) return file.status().with_context(where);
  auto bytes = read_file_bytes(*file, policy.max_file_bytes);
  if (!bytes.ok()) return Status::Error(where + ": cannot read image " + quote(path));
  return decode_bytes(*bytes);
}

namespace {

// The first bytes of base64 text (whitespace skipped): `chars` characters decoded, for sniffing a format.
Result<std::vector<uint8_t>> base64_head(std::string_view b64, size_t chars) {
  std::string head;
  for (char c : trim(b64)) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    head += c;
    if (head.size() >= chars) break;
  }
  head.resize(head.size() / 4 * 4);
  return base64_decode(head);
}

// What a loader of not-yet-decoded media (a video, a document) says and reads.
struct MediaKind {
  const char* noun;         // "video", "document"
  const char* data_uri;     // the data: URI example of errors
  const char* url_advice;   // what to send instead of a URL the server does not fetch
  const char* data_name;    // "base64 video data"
  MediaFetcher::Kind fetch;
  uint64_t max_local_bytes;
  bool (*is_data)(std::string_view ref);  // base64 text of this kind (rather than a file name)
};

// The bytes of a media reference: a data: URI, an allowed http(s) URL, base64 text `kind.is_data` recognises, or a
// file (file:// URI or name) inside policy.image_dir. Not decoded here.
Result<std::vector<uint8_t>> load_media_bytes(std::string_view ref_in, const ImagePolicy& policy, const std::string& where,
                                              const MediaKind& kind) {
  const std::string_view ref = trim(ref_in);
  const std::string noun = kind.noun;
  if (ref.empty()) return Status::Error(where + ": empty " + noun + "; expected a data: URI or " + kind.data_name);
  if (starts_with_ci(ref, "data:")) return decode_data_uri(ref, where, kind.data_uri);
  if (is_media_url(ref)) {
    if (!policy.urls || !policy.urls->enabled())
      return Status::Error(where + ": " + noun + " URLs are not fetched (got " + quote(ref) + "); " + kind.url_advice +
                           " (a server started with --allow-media-urls HOST fetches URLs of HOST)");
    // As an image's bound (2 x --max-body), not a local file's: a fetched body is held in memory.
    return policy.urls->fetch(ref, kind.fetch, policy.max_file_bytes, where);
  }
  std::string_view path = ref;
  bool is_path = false;
  if (starts_with_ci(ref, "file://")) {
    QVL_ASSIGN_OR_RETURN(path, file_uri_path(ref, where));
    is_path = true;
  }
  if (path.find('\0') != std::string_view::npos)
    return Status::Error(where + ": the " + noun + " reference has a NUL byte; a path or URI never does");
  if (!is_path) {
    const bool path_like = ref.size() <= 4096 && ref.find('\n') == std::string_view::npos;
    if (!path_like || kind.is_data(ref)) {
      auto bytes = base64_decode(ref);
      if (!bytes.ok()) return bytes.status().with_context(where);
      return bytes;
    }
    if (policy.image_dir.empty())
      return Status::Error(where + ": " + quote(ref) + " is not " + kind.data_name + ", and local paths are not " +
                           "allowed (start the server with --media-dir DIR to read files from DIR)");
  }
  auto file = resolve_image_path(path, policy);
  if (!file.ok()) return file.status().with_context(where);
  auto bytes = read_file_bytes(*file, kind.max_local_bytes);
  if (!bytes.ok()) return Status::Error(where + ": cannot read " + noun + " " + quote(path) + ": " + bytes.status().message());
  return bytes;
}

// Base64 of a video: a container looks_like_video knows, or (short base64 of a format it leaves to the decoder)
// GIF, Ogg or FLV.
bool video_data(std::string_view ref) {
  auto head = base64_decode(ref.substr(0, std::min<size_t>(ref.size(), 64) / 4 * 4));
  const bool other_video = head.ok() && head->size() >= 4 &&
                           (std::memcmp(head->data(), "GIF8", 4) == 0 || std::memcmp(head->data(), "OggS", 4) == 0 ||
                            std::memcmp(head->data(), "FLV", 3) == 0);
  return other_video || base64_is_video(ref);
}

}  // namespace

bool base64_is_video(std::string_view b64) {
  auto bytes = base64_head(b64, 512);
  return bytes.ok() && looks_like_video(*bytes);
}

bool base64_is_pdf(std::string_view b64) {
  auto bytes = base64_head(b64, 1368);  // 1,026 bytes: where readers look for %PDF-
  return bytes.ok() && is_pdf(*bytes);
}

Result<std::vector<uint8_t>> load_request_video_bytes(std::string_view ref, const ImagePolicy& policy,
                                                      const std::string& where) {
  const MediaKind video{"video", "data:video/mp4;base64,<data>",
                        "send the video inline as a data: URI (data:video/mp4;base64,...) or as base64",
                        "base64 video data", MediaFetcher::Kind::kVideo, policy.max_video_file_bytes, video_data};
  return load_media_bytes(ref, policy, where, video);
}

Result<std::vector<uint8_t>> load_request_document_bytes(std::string_view ref, const ImagePolicy& policy,
                                                         const std::string& where) {
  const MediaKind document{"document", "data:application/pdf;base64,<data>",
                           "send the file inline as a data: URI (data:application/pdf;base64,...)", "base64 PDF data",
                           MediaFetcher::Kind::kDocument, policy.max_file_bytes, base64_is_pdf};
  QVL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, load_media_bytes(ref, policy, where, document));
  if (!is_pdf(bytes))
    return Status::Error(where + ": not a PDF (no %PDF- header in its first 1,024 bytes); documents are PDF files, "
                         "send pictures as image parts");
  return bytes;
}

}  // namespace qvl::server
