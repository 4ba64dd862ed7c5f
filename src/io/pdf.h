// PDF documents read as page images. A PDF parser is a large attack surface, so qvl parses none itself:
// Poppler's pdfinfo (page count, sizes, rotation, encryption) and pdftoppm (pixels) run as confined workers
// (util/sandbox.h) on the file's bytes, each under memory, CPU-time and wall-clock limits, without network and,
// where the kernel has Landlock, without access to any file but the system's libraries and fonts. Poppler is
// GPL; qvl runs its programs (poppler-utils) and never links it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/image.h"
#include "util/status.h"

namespace qvl {

struct PdfPage {
  double width_pt = 0, height_pt = 0;  // the crop box, before /Rotate (1 pt = 1/72 inch)
  int rotate = 0;                      // 0, 90, 180 or 270
  // The page as shown (after /Rotate), in points.
  double shown_width() const { return rotate % 180 ? height_pt : width_pt; }
  double shown_height() const { return rotate % 180 ? width_pt : height_pt; }
};

struct PdfInfo {
  int pages = 0;
  bool encrypted = false;
  std::vector<PdfPage> page;  // [pages]
};

struct PdfLimits {
  uint64_t max_file_bytes = uint64_t{64} << 20;
  int max_pages = 2000;                            // pages in one file
  double render_timeout_s = 20;                    // per page (wall clock; the CPU-time limit is the same)
  double inspect_timeout_s = 10;                   // reading the page list
  uint64_t worker_memory_bytes = uint64_t{1} << 30;  // each worker's address space
};

// Why a PDF call failed: the request's fault (over a limit, not a PDF: a 400), the document's (encrypted, or
// Poppler cannot read or render it, or runs out of time or memory on it: a 422), or the server's (no worker
// could be started: a 503).
enum class PdfFailure { kRequest, kDocument, kServer };

// "%PDF-" within the first 1,024 bytes (where readers look for it).
bool is_pdf(std::span<const uint8_t> bytes);

// pdfinfo's answer (`pdfinfo -f 1 -l N`): "Pages:", "Encrypted:", "Page    k size: W x H pts", "Page    k rot: R".
// Every page up to min(pages, max_pages) must have its size. Faces the renderer's output: fuzzed.
Result<PdfInfo> parse_pdfinfo(std::string_view text, int max_pages);

// pdftoppm's output read strictly: "P6\n<w> <h>\n255\n" then w*h*3 bytes, once per page, at most `max_images`
// images of at most `max_pixels` pixels each. Faces the renderer's output: fuzzed.
Result<std::vector<ImageRGB>> split_ppm(std::span<const uint8_t> bytes, size_t max_images, int64_t max_pixels);

// Whether pdfinfo and pdftoppm were found (on PATH, or in QVL_POPPLER_DIR); else the reason and the fix.
Status pdf_renderer_available();

// The page list of a PDF, from a confined pdfinfo. Refuses files over the size limit, with more pages than
// max_pages, encrypted ones (with or without a user password), and what Poppler cannot open, naming why.
Result<PdfInfo> pdf_inspect(std::span<const uint8_t> bytes, const PdfLimits& limits, PdfFailure* why = nullptr);

// Page `number` (from 1) rendered by a confined pdftoppm to exactly `width` x `height` RGB pixels (the shown
// page: after its rotation), anti-aliased, its crop box scaled to fill it.
Result<ImageRGB> pdf_render_page(std::span<const uint8_t> bytes, const PdfPage& page, int number, int width, int height,
                                 const PdfLimits& limits, PdfFailure* why = nullptr);

// Pages first..last (from 1) rendered in one worker, each with its longer side `max_side` pixels (small
// previews). A page the worker could not render ends the list early.
Result<std::vector<ImageRGB>> pdf_render_thumbnails(std::span<const uint8_t> bytes, int first, int last, int max_side,
                                                    const PdfLimits& limits, PdfFailure* why = nullptr);

// A page selection as people write it: "1-3,7", "2", "5-" (to the end), "all" or "" (every page); numbers from 1,
// in the order given, each at most once. Errors name the part and the document's page count.
Result<std::vector<int>> parse_page_selection(std::string_view spec, int n_pages);

}  // namespace qvl
