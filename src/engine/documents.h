// Documents as the model sees them: each selected page of a PDF rendered to an image at the resolution its
// image budget allows (never finer than a maximum DPI), with "Page n: " before it in the prompt; rendered pages
// kept by the file's SHA-256, page and size, so a follow-up question about the same document renders nothing
// (and, its pixels being the same, the image cache encodes nothing) again. The server and the command line
// both read documents through here.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "engine/generate.h"
#include "io/pdf.h"
#include "model/image_processor.h"
#include "util/status.h"

namespace qvl {

struct DocumentOptions {
  int max_dpi = 150;                  // pages are rendered at most this fine (a page smaller than the budget)
  int max_pages_per_request = 64;     // pages of all documents of one request together
  int64_t max_request_pixels = int64_t{256} << 20;  // rendered pixels of one request, all pages together
  PdfLimits pdf;
};

// One page to render: its number (from 1), the size it is rendered to, that size's DPI, and the image tokens
// it takes once the model's preprocessing has resized it.
struct PagePlan {
  int number = 0;
  int width = 0, height = 0;
  double dpi = 0;
  int64_t tokens = 0;
};

// A document's page bounds: its part's own (min/max pixels; detail "low" is max_pixels 0) within `image` (the
// request's or the command line's), as image_options() bounds an image part.
PreprocessOptions page_bounds(const PreprocessOptions& image, const PreprocessOptions& part, const ImageProcessorConfig& pc);

// The render size of page `number` of `info`: the DPI at which the shown page has at most `o`'s max_pixels (the
// processor's when -1), capped at options.max_dpi; tokens as smart_resize will count them. Refuses a page with
// no size, or one whose sides smart_resize refuses (an aspect ratio over 200).
Result<PagePlan> plan_page(const PdfInfo& info, int number, const ImageProcessorConfig& pc, const PreprocessOptions& o,
                           const DocumentOptions& options);

// The plans of `pages`, checked together: at most max_pages_per_request pages and max_request_pixels pixels,
// and their image tokens within `max_tokens`; a refusal names how many of the pages, in order, would fit.
Result<std::vector<PagePlan>> plan_pages(const PdfInfo& info, const std::vector<int>& pages,
                                         const ImageProcessorConfig& pc, const PreprocessOptions& o,
                                         const DocumentOptions& options, int64_t max_tokens);

// The text before a page's image in the prompt (documented in docs/API.md).
std::string page_label(int number);

// The content parts a document's pages become: for each page its label, then its image.
void append_page_parts(std::vector<ContentPart>& parts, const std::vector<PagePlan>& pages);

using DocumentKey = std::array<uint8_t, 32>;  // SHA-256 of the file's bytes
DocumentKey document_key(std::span<const uint8_t> bytes);

// Page lists and rendered pages of documents seen lately, LRU within a byte budget (0: nothing kept).
class PageCache {
 public:
  explicit PageCache(size_t budget_bytes) : budget_(budget_bytes) {}
  std::shared_ptr<const PdfInfo> find_info(const DocumentKey& key);
  void put_info(const DocumentKey& key, std::shared_ptr<const PdfInfo> info);
  std::shared_ptr<const ImageRGB> find_page(const DocumentKey& key, const PagePlan& page);
  void put_page(const DocumentKey& key, const PagePlan& page, std::shared_ptr<const ImageRGB> image);

  // A page rendered (render_document_page counts it, cached or not).
  void count_render() {
    std::lock_guard lock(mu_);
    ++rendered_;
  }
  struct Stats {
    uint64_t hits = 0, misses = 0, rendered = 0;
    size_t entries = 0, bytes = 0, budget = 0;
  };
  Stats stats() const;

 private:
  struct Key {
    DocumentKey doc;
    int page = 0, width = 0, height = 0;  // page 0: the document's page list
    auto operator<=>(const Key&) const = default;
  };
  using Lru = std::list<Key>;
  struct Entry {
    std::shared_ptr<const PdfInfo> info;
    std::shared_ptr<const ImageRGB> image;
    size_t bytes = 0;
    Lru::iterator at;
  };
  void put(const Key& key, Entry entry);
  mutable std::mutex mu_;
  size_t budget_, bytes_ = 0;
  std::map<Key, Entry> entries_;
  Lru lru_;
  uint64_t hits_ = 0, misses_ = 0, rendered_ = 0;
};

// The page list of a document, from the cache or a confined pdfinfo (kept in the cache).
Result<std::shared_ptr<const PdfInfo>> inspect_document(std::span<const uint8_t> bytes, const DocumentKey& key,
                                                        PageCache* cache, const DocumentOptions& options,
                                                        PdfFailure* why = nullptr);

// One planned page's pixels, from the cache or a confined pdftoppm (kept in the cache). `cached` says which.
Result<std::shared_ptr<const ImageRGB>> render_document_page(std::span<const uint8_t> bytes, const DocumentKey& key,
                                                             const PdfInfo& info, const PagePlan& page, PageCache* cache,
                                                             const DocumentOptions& options, bool* cached = nullptr,
                                                             PdfFailure* why = nullptr);

// A document named on the command line (qvl run / chat --file, /file): read, inspected by a confined pdfinfo,
// its pages selected ("1-3,7"; empty: all). Done before the model loads, so a bad file fails first.
struct DocumentFile {
  std::string path;
  std::vector<uint8_t> bytes;
  DocumentKey key{};
  std::shared_ptr<const PdfInfo> info;
  std::vector<int> pages;
};
Result<DocumentFile> open_document_file(const std::string& path, const std::string& pages, const DocumentOptions& options);

// Its pages planned for the model (`o`: the images' size bounds, resolved) within `max_tokens`, and rendered.
struct RenderedPages {
  std::vector<PagePlan> plans;
  std::vector<ImageRGB> images;  // [plans.size()]
  double seconds = 0;            // rendering
};
Result<RenderedPages> render_document_file(const DocumentFile& doc, const ImageProcessorConfig& pc,
                                           const PreprocessOptions& o, const DocumentOptions& options,
                                           int64_t max_tokens, PageCache* cache);

// "pages 1-3, 7" for a list of page numbers (ranges joined), for messages.
std::string describe_pages(const std::vector<PagePlan>& plans);

}  // namespace qvl
