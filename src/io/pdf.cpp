// pdfinfo and pdftoppm as confined workers, their answers read strictly, and page selections.
#include "io/pdf.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "util/sandbox.h"

namespace qvl {

namespace {

struct Programs {
  std::string pdfinfo, pdftoppm;  // absolute paths; empty where not found
  std::vector<std::string> readable;
};

std::string find_program(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("QVL_POPPLER_DIR"); d && *d) dirs.emplace_back(d);
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty() && d[0] == '/') dirs.push_back(d);
  }
  dirs.emplace_back("/usr/bin");
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

const Programs& programs() {
  static const Programs p = [] {
    Programs p;
    p.pdfinfo = find_program("pdfinfo");
    p.pdftoppm = find_program("pdftoppm");
    // What Poppler reads besides its input: its libraries, the dynamic loader's cache, fonts and their config.
    p.readable = {"/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/fonts", "/var/cache/fontconfig"};
    for (const std::string* prog : {&p.pdfinfo, &p.pdftoppm})
      if (!prog->empty()) p.readable.push_back(prog->substr(0, prog->rfind('/')));
    return p;
  }();
  return p;
}

SandboxLimits worker_limits(double seconds, uint64_t memory, uint64_t max_out) {
  SandboxLimits l;
  l.address_space_bytes = memory;
  l.wall_seconds = seconds;
  l.cpu_seconds = std::max(1, static_cast<int>(std::ceil(seconds)));
  l.max_stdout_bytes = max_out;
  return l;
}

// The first line of the worker's stderr, for an error message (Poppler writes "Syntax Error: ..." lines).
std::string first_error_line(const std::string& err) {
  std::string line;
  std::stringstream ss(err);
  while (std::getline(ss, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) break;
  }
  std::string clean;
  for (char c : line.substr(0, 160)) clean += (c >= 0x20 && c < 0x7f) ? c : '?';
  return clean;
}

// Why a worker failed, in words: killed for time, memory or output, or Poppler's own complaint.
std::string worker_failure(const SandboxResult& r, const char* what, double seconds) {
  if (r.timed_out)
    return std::string(what) + " took longer than " + std::to_string(static_cast<int>(seconds)) + " s and was stopped";
  if (r.output_too_large) return std::string(what) + " wrote more than expected and was stopped";
  if (r.signal == SIGXCPU || r.signal == SIGKILL)
    return std::string(what) + " ran out of its CPU time (" + std::to_string(static_cast<int>(std::ceil(seconds))) +
           " s) and was stopped";
  if (r.signal != 0) return std::string(what) + " crashed (signal " + std::to_string(r.signal) + ")";
  const std::string line = first_error_line(r.err);
  if (r.exit_code == 3 || line.find("Out of memory") != std::string::npos || line.find("bad_alloc") != std::string::npos)
    return std::string(what) + " ran out of its memory" + (line.empty() ? "" : " (" + line + ")");
  return std::string(what) + " failed (exit " + std::to_string(r.exit_code) + ")" + (line.empty() ? "" : ": " + line);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A whole decimal number with optional fraction ("595", "841.89"); -1 when it is not one.
double read_number(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 32) return -1;
  bool dot = false, digit = false;
  for (char c : s) {
    if (c == '.' && !dot) dot = true;
    else if (c >= '0' && c <= '9') digit = true;
    else return -1;
  }
  return digit ? std::strtod(std::string(s).c_str(), nullptr) : -1;
}

}  // namespace

Result<std::vector<ImageRGB>> split_ppm(std::span<const uint8_t> d, size_t max_images, int64_t max_pixels) {
  std::vector<ImageRGB> out;
  size_t at = 0;
  while (at < d.size()) {
    if (out.size() >= max_images) return Status::Error("the renderer wrote more pages than were asked for");
    auto token = [&](const char* what) -> Result<int64_t> {
      while (at < d.size() && (d[at] == ' ' || d[at] == '\n' || d[at] == '\r' || d[at] == '\t')) ++at;
      int64_t v = 0;
      size_t digits = 0;
      while (at < d.size() && d[at] >= '0' && d[at] <= '9' && digits < 9) {
        v = v * 10 + (d[at++] - '0');
        ++digits;
      }
      if (digits == 0 || (at < d.size() && d[at] >= '0' && d[at] <= '9'))
        return Status::Error(std::string("the renderer's image has no readable ") + what);
      return v;
    };
    if (d.size() - at < 3 || d[at] != 'P' || d[at + 1] != '6')
      return Status::Error("the renderer's output is not a PPM image");
    at += 2;
    QVL_ASSIGN_OR_RETURN(int64_t w, token("width"));
    QVL_ASSIGN_OR_RETURN(int64_t h, token("height"));
    QVL_ASSIGN_OR_RETURN(int64_t maxval, token("maximum value"));
    if (at >= d.size() || maxval != 255) return Status::Error("the renderer's image is not 8-bit RGB");
    ++at;  // the one whitespace byte before the samples
    if (w < 1 || h < 1 || w * h > max_pixels)
      return Status::Error("the renderer's image is " + std::to_string(w) + " x " + std::to_string(h) + " pixels, not the size asked for");
    const size_t bytes = static_cast<size_t>(w * h * 3);
    if (d.size() - at < bytes) return Status::Error("the renderer's image ends before its last pixel");
    ImageRGB img{static_cast<int>(w), static_cast<int>(h), std::vector<uint8_t>(d.begin() + at, d.begin() + at + bytes)};
    at += bytes;
    out.push_back(std::move(img));
  }
  return out;
}

bool is_pdf(std::span<const uint8_t> bytes) {
  const std::string_view head(reinterpret_cast<const char*>(bytes.data()), std::min<size_t>(bytes.size(), 1024));
  return head.find("%PDF-") != std::string_view::npos;
}

Result<PdfInfo> parse_pdfinfo(std::string_view text, int max_pages) {
  PdfInfo info;
  bool have_pages = false, have_encrypted = false;
  std::vector<bool> sized;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (starts_with(line, "Pages:")) {
      const double n = read_number(line.substr(6));
      if (n < 0 || n != std::floor(n) || n > 1e9) return Status::Error("the page count is not a number: '" + std::string(trim(line.substr(6)).substr(0, 40)) + "'");
      info.pages = static_cast<int>(n);
      have_pages = true;
      if (info.pages > max_pages)
        return Status::Error("the document has " + std::to_string(info.pages) + " pages, over the limit of " +
                             std::to_string(max_pages) + " pages a file; send the pages wanted as a smaller PDF");
      info.page.assign(static_cast<size_t>(info.pages), PdfPage{});
      sized.assign(static_cast<size_t>(info.pages), false);
    } else if (starts_with(line, "Encrypted:")) {
      info.encrypted = !starts_with(trim(line.substr(10)), "no");
      have_encrypted = true;
    } else if (starts_with(line, "Page ") && have_pages) {
      // "Page    3 size:  595.276 x 841.89 pts (A4)" or "Page    3 rot:   90"
      std::string_view rest = trim(line.substr(5));
      const size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) continue;
      const double k = read_number(rest.substr(0, sp));
      if (k < 1 || k > info.pages || k != std::floor(k)) continue;  // "Page size:" of one-page runs, or junk
      PdfPage& page = info.page[static_cast<size_t>(k) - 1];
      rest = trim(rest.substr(sp));
      if (starts_with(rest, "size:")) {
        rest = trim(rest.substr(5));
        const size_t x = rest.find(" x ");
        const size_t pts = rest.find(" pts");
        if (x == std::string_view::npos || pts == std::string_view::npos || pts < x) continue;
        const double w = read_number(rest.substr(0, x)), h = read_number(rest.substr(x + 3, pts - x - 3));
        if (w < 0 || h < 0) continue;
        page.width_pt = w;
        page.height_pt = h;
        sized[static_cast<size_t>(k) - 1] = true;
      } else if (starts_with(rest, "rot:")) {
        const double r = read_number(rest.substr(4));
        if (r == 0 || r == 90 || r == 180 || r == 270) page.rotate = static_cast<int>(r);
      }
    }
  }
  if (!have_pages || !have_encrypted) return Status::Error("the renderer did not report the page count");
  for (size_t k = 0; k < sized.size(); ++k)
    if (!sized[k]) return Status::Error("the renderer did not report the size of page " + std::to_string(k + 1));
  return info;
}

Status pdf_renderer_available() {
  const Programs& p = programs();
  if (p.pdfinfo.empty() || p.pdftoppm.empty())
    return Status::Error("PDF documents need Poppler's pdfinfo and pdftoppm, which were not found on PATH (or in "
                         "QVL_POPPLER_DIR); install them (Debian: apt-get install poppler-utils) and restart");
  return Status::Ok();
}

Result<PdfInfo> pdf_inspect(std::span<const uint8_t> bytes, const PdfLimits& limits, PdfFailure* why_out) {
  PdfFailure why_local;
  PdfFailure& why = why_out ? *why_out : why_local;
  why = PdfFailure::kRequest;
  if (bytes.size() > limits.max_file_bytes)
    return Status::Error("the PDF is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                         std::to_string(limits.max_file_bytes) + " bytes a document");
  if (!is_pdf(bytes)) return Status::Error("not a PDF: no %PDF- header in its first 1,024 bytes");
  QVL_RETURN_IF_ERROR(pdf_renderer_available());
  const Programs& p = programs();
  const SandboxLimits sl = worker_limits(limits.inspect_timeout_s, limits.worker_memory_bytes, 1 << 20);
  why = PdfFailure::kServer;
  QVL_ASSIGN_OR_RETURN(SandboxResult r, run_sandboxed({p.pdfinfo, "-f", "1", "-l", std::to_string(limits.max_pages), "-"},
                                                      bytes, sl, p.readable));
  why = PdfFailure::kDocument;
  if (r.err.find("Incorrect password") != std::string::npos)
    return Status::Error("the PDF is encrypted with a password; qvl does not open encrypted documents: send an "
                         "unencrypted copy");
  if (!r.ok()) return Status::Error(worker_failure(r, "reading the PDF's page list", limits.inspect_timeout_s));
  const std::string_view text(reinterpret_cast<const char*>(r.out.data()), r.out.size());
  auto info = parse_pdfinfo(text, limits.max_pages);
  if (!info.ok()) {
    if (info.status().message().find("pages, over the limit of") != std::string::npos) {
      why = PdfFailure::kRequest;
      return info.status();
    }
    const std::string line = first_error_line(r.err);
    return Status::Error("the PDF could not be read" + (line.empty() ? "" : " (" + line + ")") + ": " +
                         info.status().message());
  }
  if (info->encrypted)
    return Status::Error("the PDF is encrypted; qvl does not open encrypted documents: send an unencrypted copy "
                         "(for example qpdf --decrypt in.pdf out.pdf)");
  if (info->pages == 0) return Status::Error("the PDF has no pages");
  return info;
}

Result<ImageRGB> pdf_render_page(std::span<const uint8_t> bytes, const PdfPage& page, int number, int width, int height,
                                 const PdfLimits& limits, PdfFailure* why_out) {
  PdfFailure why_local;
  PdfFailure& why = why_out ? *why_out : why_local;
  why = PdfFailure::kRequest;
  if (width < 1 || height < 1 || int64_t{width} * height > (int64_t{1} << 28))
    return Status::Error("page " + std::to_string(number) + ": a render size of " + std::to_string(width) + " x " +
                         std::to_string(height) + " pixels is out of range");
  QVL_RETURN_IF_ERROR(pdf_renderer_available());
  const Programs& p = programs();
  // pdftoppm scales the page before its rotation: the unrotated sides are given.
  const bool turned = page.rotate % 180 != 0;
  const int sx = turned ? height : width, sy = turned ? width : height;
  const uint64_t expect = uint64_t{3} * static_cast<uint64_t>(width) * static_cast<uint64_t>(height) + 64;
  const SandboxLimits sl = worker_limits(limits.render_timeout_s, limits.worker_memory_bytes, expect);
  const std::string n = std::to_string(number);
  why = PdfFailure::kServer;
  QVL_ASSIGN_OR_RETURN(SandboxResult r, run_sandboxed({p.pdftoppm, "-f", n, "-l", n, "-cropbox", "-scale-to-x",
                                                       std::to_string(sx), "-scale-to-y", std::to_string(sy), "-"},
                                                      bytes, sl, p.readable));
  why = PdfFailure::kDocument;
  const std::string what = "rendering page " + n;
  if (!r.ok()) return Status::Error(worker_failure(r, what.c_str(), limits.render_timeout_s));
  if (r.out.empty()) {
    const std::string line = first_error_line(r.err);
    return Status::Error(what + " gave no image" + (line.empty() ? "" : " (" + line + ")"));
  }
  QVL_ASSIGN_OR_RETURN(std::vector<ImageRGB> images, split_ppm(r.out, 1, int64_t{width} * height));
  if (images.size() != 1 || images[0].width != width || images[0].height != height)
    return Status::Error(what + ": the renderer's image is not the " + std::to_string(width) + " x " +
                         std::to_string(height) + " pixels asked for");
  return std::move(images[0]);
}

Result<std::vector<ImageRGB>> pdf_render_thumbnails(std::span<const uint8_t> bytes, int first, int last, int max_side,
                                                    const PdfLimits& limits, PdfFailure* why_out) {
  PdfFailure why_local;
  PdfFailure& why = why_out ? *why_out : why_local;
  why = PdfFailure::kRequest;
  if (first < 1 || last < first || max_side < 1 || max_side > 2048)
    return Status::Error("thumbnails: pages " + std::to_string(first) + " to " + std::to_string(last) + " at " +
                         std::to_string(max_side) + " pixels is out of range");
  QVL_RETURN_IF_ERROR(pdf_renderer_available());
  const Programs& p = programs();
  const int count = last - first + 1;
  const uint64_t per_page = uint64_t{3} * static_cast<uint64_t>(max_side) * static_cast<uint64_t>(max_side) + 64;
  const double seconds = limits.render_timeout_s + 0.25 * count;
  const SandboxLimits sl = worker_limits(seconds, limits.worker_memory_bytes, per_page * static_cast<uint64_t>(count));
  why = PdfFailure::kServer;
  QVL_ASSIGN_OR_RETURN(SandboxResult r, run_sandboxed({p.pdftoppm, "-f", std::to_string(first), "-l", std::to_string(last),
                                                       "-cropbox", "-scale-to", std::to_string(max_side), "-"},
                                                      bytes, sl, p.readable));
  why = PdfFailure::kDocument;
  if (r.timed_out || r.output_too_large || (r.out.empty() && !r.ok()))
    return Status::Error(worker_failure(r, "rendering the page previews", seconds));
  // A page that failed partway leaves the pages before it: they are kept.
  auto images = split_ppm(r.out, static_cast<size_t>(count), int64_t{max_side} * max_side);
  if (!images.ok()) return Status::Error("rendering the page previews: " + images.status().message());
  return images;
}

Result<std::vector<int>> parse_page_selection(std::string_view spec, int n_pages) {
  std::vector<int> out;
  const std::string_view all = trim(spec);
  if (all.empty() || all == "all" || all == "*") {
    for (int k = 1; k <= n_pages; ++k) out.push_back(k);
    return out;
  }
  std::vector<bool> seen(static_cast<size_t>(n_pages) + 1, false);
  const std::string of = " (the document has " + std::to_string(n_pages) + (n_pages == 1 ? " page)" : " pages)");
  std::string_view rest = all;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view part = trim(rest.substr(0, comma));
    const std::string shown = "'" + std::string(part.substr(0, 20)) + "'";
    if (part.empty()) return Status::Error("pages: an empty entry in '" + std::string(all.substr(0, 60)) + "'; expected e.g. 1-3,7");
    const size_t dash = part.find('-');
    auto number = [&](std::string_view s) -> int {
      s = trim(s);
      if (s.empty() || s.size() > 6) return -1;
      int v = 0;
      for (char c : s) {
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
      }
      return v;
    };
    int from = 0, to = 0;
    if (dash == std::string_view::npos) {
      from = to = number(part);
    } else {
      from = number(part.substr(0, dash));
      const std::string_view tail = trim(part.substr(dash + 1));
      to = tail.empty() ? n_pages : number(tail);
    }
    if (from < 0 || to < 0) return Status::Error("pages: " + shown + " is not a page number or a range like 2-5");
    if (from < 1 || to < 1 || from > n_pages || to > n_pages)
      return Status::Error("pages: " + shown + " is outside 1 to " + std::to_string(n_pages) + of);
    if (from > to) return Status::Error("pages: " + shown + " runs backwards; write the lower page first");
    for (int k = from; k <= to; ++k) {
      if (seen[static_cast<size_t>(k)]) return Status::Error("pages: page " + std::to_string(k) + " is selected twice");
      seen[static_cast<size_t>(k)] = true;
      out.push_back(k);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace qvl
