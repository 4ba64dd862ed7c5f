// Netpbm images (PBM, PGM, PPM; plain P1-P3 and raw P4-P6) decoded as Pillow 13's PpmImagePlugin reads
// them and convert("RGB") then turns them into 8-bit RGB (see netpbm.h):
// - header tokens are separated by whitespace (space, \t, \n, \v, \f, \r); '#' starts a comment that runs
//   to the end of the line and may sit inside a token; a token is at most 10 bytes; one whitespace byte
//   after the last one, then the raster;
// - P4 and P1: 1 is black; P1's tokens are single '0'/'1' bytes, whitespace optional;
// - raw samples of maxval 255 are taken as they are; other maxvals are scaled: round(v / maxval * out_max)
//   with Python's round (half to even), out_max 255, except 16-bit PGM (maxval > 255), which Pillow keeps
//   as 0..65535 (mode I) and convert("RGB") then clips to 0..255; samples are 2 bytes big-endian when
//   maxval > 255;
// - plain samples: decimal tokens (Python int(): an optional sign, '_' between digits), at most 10 bytes,
//   0..maxval, comments allowed between them; a token cut by the end of the data counts as it is;
// - too few samples: refused, as Pillow refuses ("not enough image data").
#include "io/netpbm.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace qvl {

namespace {

bool is_pnm_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// Python's int() on a token of bytes: [+-] digits with single '_' between digits. -1: not a number;
// values are capped at 2^31 (every use bounds them far lower).
int64_t py_int(const std::string& t) {
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (i >= t.size()) return -1;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c >= '0' && c <= '9') {
      v = std::min<int64_t>(v * 10 + (c - '0'), int64_t{1} << 31);
      prev_digit = true;
    } else if (c == '_' && prev_digit && i + 1 < t.size() && t[i + 1] >= '0' && t[i + 1] <= '9') {
      prev_digit = false;
    } else {
      return -1;
    }
  }
  return neg ? (v == 0 ? 0 : -2) : v;  // "-0" is 0; a negative value is refused by every caller
}

// Python's round(x) for x >= 0: to the nearest integer, halves to even.
int64_t py_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// The header reader: PpmImageFile._read_token.
class Header {
 public:
  explicit Header(std::span<const uint8_t> d) : d_(d) {}
  Result<std::string> token(const char* what) {
    std::string t;
    while (t.size() <= 10) {
      if (pos_ >= d_.size()) break;
      const uint8_t c = d_[pos_++];
      if (is_pnm_space(c)) {
        if (t.empty()) continue;
        break;
      }
      if (c == '#') {  // to the end of the line (CR, LF or the end of the data); the token goes on after it
        while (pos_ < d_.size() && d_[pos_] != '\r' && d_[pos_] != '\n') ++pos_;
        if (pos_ < d_.size()) ++pos_;
        continue;
      }
      t += static_cast<char>(c);
    }
    if (t.empty()) return Status::Error(std::string("Netpbm: the data ends before the header's ") + what);
    if (t.size() > 10) return Status::Error(std::string("Netpbm: the header's ") + what + " is over 10 characters");
    return t;
  }
  size_t pos() const { return pos_; }
  void skip(size_t n) { pos_ += n; }

 private:
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

}  // namespace

bool is_netpbm(std::span<const uint8_t> b) {
  return b.size() >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && is_pnm_space(b[2]);
}

Result<ImageRGB> decode_netpbm(std::span<const uint8_t> d, const ImageDecodeLimits& limits,
                               const std::function<Result<int64_t>(uint64_t, uint64_t)>& check_size) {
  if (!is_netpbm(d)) return Status::Error("Netpbm: expected P1 to P6 followed by whitespace");
  const int kind = d[1] - '0';
  Header h(d);
  h.skip(3);
  const bool bitonal = kind == 1 || kind == 4, plain = kind <= 3;
  const int bands = (kind == 3 || kind == 6) ? 3 : 1;
  QVL_ASSIGN_OR_RETURN(std::string ws, h.token("width"));
  QVL_ASSIGN_OR_RETURN(std::string hs, h.token("height"));
  const int64_t w = py_int(ws), ht = py_int(hs);
  if (w < 0 || ht < 0) return Status::Error("Netpbm: the size '" + ws + " " + hs + "' is not two numbers");
  int64_t maxval = 1;
  if (!bitonal) {
    QVL_ASSIGN_OR_RETURN(std::string ms, h.token("maxval"));
    maxval = py_int(ms);
    if (maxval <= 0 || maxval >= 65536)
      return Status::Error("Netpbm: maxval must be greater than 0 and less than 65536, got '" + ms + "'");
  }
  QVL_RETURN_IF_ERROR(check_size(static_cast<uint64_t>(w), static_cast<uint64_t>(ht)).status());
  const size_t npix = static_cast<size_t>(w) * static_cast<size_t>(ht);
  // Before the pixel buffer: the data left must hold the samples (raw: exactly so many bytes; plain: at
  // least one byte a sample for P1, two for P2 and P3 but the last), so a header alone allocates nothing.
  {
    const size_t left = d.size() - std::min(d.size(), h.pos());
    const size_t n = npix * static_cast<size_t>((kind == 3 || kind == 6) ? 3 : 1);
    const size_t need = kind == 4 ? (static_cast<size_t>(w) + 7) / 8 * static_cast<size_t>(ht)
                        : kind == 5 || kind == 6 ? n * (maxval > 255 ? 2 : 1)
                        : kind == 1 ? n
                                    : 2 * n - 1;
    if (left < need) return Status::Error("Netpbm: not enough image data: the file ends before the last pixel");
  }
  ImageRGB img;
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(ht);
  img.pixels.assign(npix * 3, 0);
  // One sample (band b of pixel i) at its final 8-bit value.
  const bool wide_gray = bands == 1 && maxval > 255;  // Pillow's mode I: 0..65535, then clipped
  auto put = [&](size_t i, int b, int64_t v) {
    uint8_t out;
    if (wide_gray) {
      const int64_t s = v == 65535 && maxval == 65535 ? v : std::min<int64_t>(65535, py_round(static_cast<double>(v) / maxval * 65535));
      out = static_cast<uint8_t>(std::min<int64_t>(s, 255));
    } else {
      out = static_cast<uint8_t>(maxval == 255 ? v : std::min<int64_t>(255, py_round(static_cast<double>(v) / maxval * 255)));
    }
    if (bands == 1) {
      img.pixels[i * 3] = img.pixels[i * 3 + 1] = img.pixels[i * 3 + 2] = out;
    } else {
      img.pixels[i * 3 + b] = out;
    }
  };
  const size_t samples = npix * static_cast<size_t>(bands);
  const char* truncated = "Netpbm: not enough image data: the file ends before the last pixel";
  size_t p = h.pos();
  if (kind == 4) {  // rows of bits, each padded to a byte; 1 is black
    const size_t row_bytes = (static_cast<size_t>(w) + 7) / 8;
    if (d.size() - std::min(d.size(), p) < row_bytes * static_cast<size_t>(ht)) return Status::Error(truncated);
    for (int64_t y = 0; y < ht; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const bool black = d[p + static_cast<size_t>(y) * row_bytes + static_cast<size_t>(x / 8)] & (0x80 >> (x % 8));
        const size_t i = static_cast<size_t>(y * w + x);
        img.pixels[i * 3] = img.pixels[i * 3 + 1] = img.pixels[i * 3 + 2] = black ? 0 : 255;
      }
    return img;
  }
  if (!plain) {  // P5, P6: 1 or 2 bytes per sample, big-endian
    const size_t per = maxval > 255 ? 2 : 1;
    if ((d.size() - std::min(d.size(), p)) / per < samples) return Status::Error(truncated);
    for (size_t s = 0; s < samples; ++s) {
      const int64_t v = per == 1 ? d[p + s] : (d[p + 2 * s] << 8 | d[p + 2 * s + 1]);
      put(s / static_cast<size_t>(bands), static_cast<int>(s % static_cast<size_t>(bands)), v);
    }
    return img;
  }
  // Plain: comments removed first, each with its line end (so a comment inside a number glues its two
  // halves, as Pillow's block filter does), then tokens between whitespace.
  std::vector<uint8_t> text;
  text.reserve(d.size() - std::min(d.size(), p));
  for (size_t i = p; i < d.size(); ++i) {
    if (d[i] != '#') {
      text.push_back(d[i]);
      continue;
    }
    while (i < d.size() && d[i] != '\r' && d[i] != '\n') ++i;  // the loop's ++i drops the line end
  }
  size_t s = 0, q = 0;
  while (s < samples && q < text.size()) {
    const uint8_t c = text[q];
    if (is_pnm_space(c)) {
      ++q;
      continue;
    }
    if (kind == 1) {  // single bytes, no separator needed
      if (c != '0' && c != '1') return Status::Error(std::string("Netpbm: invalid token for a plain PBM: '") + static_cast<char>(c) + "'");
      const uint8_t v = c == '1' ? 0 : 255;
      img.pixels[s * 3] = img.pixels[s * 3 + 1] = img.pixels[s * 3 + 2] = v;
      ++s;
      ++q;
      continue;
    }
    std::string t;
    while (q < text.size() && !is_pnm_space(text[q])) {
      if (t.size() > 10) return Status::Error("Netpbm: a sample token is over 10 characters");
      t += static_cast<char>(text[q++]);
    }
    if (t.size() > 10) return Status::Error("Netpbm: a sample token is over 10 characters");
    const int64_t v = py_int(t);
    if (v == -1) return Status::Error("Netpbm: '" + t + "' is not a sample value");
    if (v < 0) return Status::Error("Netpbm: sample value " + t + " is negative");
    if (v > maxval) return Status::Error("Netpbm: sample value " + t + " is over maxval " + std::to_string(maxval));
    put(s / static_cast<size_t>(bands), static_cast<int>(s % static_cast<size_t>(bands)), v);
    ++s;
  }
  if (s < samples) return Status::Error(truncated);
  return img;
}

}  // namespace qvl
