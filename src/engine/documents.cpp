// Page plans (DPI from the image budget), the page labels, and the cache of page lists and rendered pages.
#include "engine/documents.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "util/digest.h"
#include "util/file.h"

namespace qvl {

PreprocessOptions page_bounds(const PreprocessOptions& image, const PreprocessOptions& part, const ImageProcessorConfig& pc) {
  GenerateOptions one;
  one.image = image;
  one.per_image = {part};
  return image_options(one, 0, pc);
}

Result<PagePlan> plan_page(const PdfInfo& info, int number, const ImageProcessorConfig& pc, const PreprocessOptions& o,
                           const DocumentOptions& options) {
  if (number < 1 || number > info.pages)
    return Status::Error("page " + std::to_string(number) + " is not in the document (pages 1 to " +
                         std::to_string(info.pages) + ")");
  const PdfPage& page = info.page[static_cast<size_t>(number) - 1];
  const double w_pt = page.shown_width(), h_pt = page.shown_height();
  if (!(w_pt >= 1) || !(h_pt >= 1) || w_pt > 1e7 || h_pt > 1e7)
    return Status::Error("page " + std::to_string(number) + " has no usable size (" + std::to_string(w_pt) + " x " +
                         std::to_string(h_pt) + " pt)");
  const int64_t max_px = o.max_pixels > 0 ? o.max_pixels : pc.max_pixels;
  const int64_t min_px = o.min_pixels > 0 ? o.min_pixels : pc.min_pixels;
  // The DPI at which the page's area is the budget, never above max_dpi: a large page is scaled down before it
  // is rendered (a 200 x 200 inch page at about 7 DPI), a small one is not rendered finer than max_dpi.
  const double fit = 72.0 * std::sqrt(static_cast<double>(max_px) / (w_pt * h_pt));
  PagePlan plan;
  plan.number = number;
  plan.dpi = std::min<double>(options.max_dpi, fit);
  auto side = [&](double pt) { return std::max(1, static_cast<int>(std::lround(pt * plan.dpi / 72.0))); };
  plan.width = side(w_pt);
  plan.height = side(h_pt);
  while (int64_t{plan.width} * plan.height > max_px && plan.width > 1 && plan.height > 1) {  // rounding up overshot
    plan.dpi *= 0.999;
    plan.width = side(w_pt);
    plan.height = side(h_pt);
  }
  const int factor = pc.factor();
  auto r = smart_resize(plan.height, plan.width, factor, min_px, max_px);
  if (!r.ok())
    return Status::Error("page " + std::to_string(number) + " (" + std::to_string(plan.width) + " x " +
                         std::to_string(plan.height) + " pixels at " + std::to_string(static_cast<int>(plan.dpi)) +
                         " DPI): " + r.status().message());
  plan.tokens = int64_t{r->height} * r->width / (int64_t{factor} * factor);
  return plan;
}

Result<std::vector<PagePlan>> plan_pages(const PdfInfo& info, const std::vector<int>& pages,
                                         const ImageProcessorConfig& pc, const PreprocessOptions& o,
                                         const DocumentOptions& options, int64_t max_tokens) {
  if (pages.empty()) return Status::Error("no page is selected; give pages such as \"1-3\" or leave it out for all");
  if (static_cast<int64_t>(pages.size()) > options.max_pages_per_request)
    return Status::Error(std::to_string(pages.size()) + " pages are selected, over the limit of " +
                         std::to_string(options.max_pages_per_request) + " pages a request; select fewer (pages)");
  std::vector<PagePlan> out;
  int64_t tokens = 0, pixels = 0;
  int fit = -1;  // pages that fit the context, in order; -1 while all do
  for (int number : pages) {
    QVL_ASSIGN_OR_RETURN(PagePlan p, plan_page(info, number, pc, o, options));
    pixels += int64_t{p.width} * p.height;
    if (pixels > options.max_request_pixels)
      return Status::Error("the selected pages render to more than " + std::to_string(options.max_request_pixels) +
                           " pixels together; select fewer pages or lower max_pixels");
    if (fit < 0 && tokens + p.tokens > max_tokens) fit = static_cast<int>(out.size());
    tokens += p.tokens;
    out.push_back(p);
  }
  if (fit >= 0)
    return Status::Error("the " + std::to_string(out.size()) + " selected pages need " + std::to_string(tokens) +
                         " image tokens, over the context of " + std::to_string(max_tokens) + " tokens; " +
                         std::to_string(fit) + (fit == 1 ? " page fits" : " pages fit") +
                         " (select fewer pages, or lower max_pixels or use detail \"low\" for smaller pages)");
  return out;
}

std::string page_label(int number) { return "Page " + std::to_string(number) + ": "; }

void append_page_parts(std::vector<ContentPart>& parts, const std::vector<PagePlan>& pages) {
  for (const PagePlan& p : pages) {
    parts.push_back(ContentPart{ContentPart::Kind::kText, page_label(p.number)});
    parts.push_back(ContentPart{ContentPart::Kind::kImage, ""});
  }
}

DocumentKey document_key(std::span<const uint8_t> bytes) {
  Digest d;
  d.update(bytes.data(), bytes.size());
  const std::string h = d.finish();
  DocumentKey k{};
  std::memcpy(k.data(), h.data(), std::min(h.size(), k.size()));
  return k;
}

void PageCache::put(const Key& key, Entry entry) {
  std::lock_guard lock(mu_);
  if (entry.bytes > budget_) return;
  if (auto it = entries_.find(key); it != entries_.end()) {
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.at);
    entries_.erase(it);
  }
  lru_.push_front(key);
  entry.at = lru_.begin();
  bytes_ += entry.bytes;
  entries_.emplace(key, std::move(entry));
  while (bytes_ > budget_ && !lru_.empty()) {
    auto it = entries_.find(lru_.back());
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    lru_.pop_back();
  }
}

std::shared_ptr<const PdfInfo> PageCache::find_info(const DocumentKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(Key{key, 0, 0, 0});
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.at);
  return it->second.info;
}

void PageCache::put_info(const DocumentKey& key, std::shared_ptr<const PdfInfo> info) {
  Entry e;
  e.bytes = 256 + info->page.size() * sizeof(PdfPage);
  e.info = std::move(info);
  put(Key{key, 0, 0, 0}, std::move(e));
}

std::shared_ptr<const ImageRGB> PageCache::find_page(const DocumentKey& key, const PagePlan& page) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(Key{key, page.number, page.width, page.height});
  if (it == entries_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second.at);
  return it->second.image;
}

void PageCache::put_page(const DocumentKey& key, const PagePlan& page, std::shared_ptr<const ImageRGB> image) {
  Entry e;
  e.bytes = 256 + image->pixels.size();
  e.image = std::move(image);
  put(Key{key, page.number, page.width, page.height}, std::move(e));
}

PageCache::Stats PageCache::stats() const {
  std::lock_guard lock(mu_);
  return Stats{hits_, misses_, rendered_, entries_.size(), bytes_, budget_};
}

Result<std::shared_ptr<const PdfInfo>> inspect_document(std::span<const uint8_t> bytes, const DocumentKey& key,
                                                        PageCache* cache, const DocumentOptions& options,
                                                        PdfFailure* why) {
  if (cache)
    if (auto hit = cache->find_info(key)) return hit;
  QVL_ASSIGN_OR_RETURN(PdfInfo info, pdf_inspect(bytes, options.pdf, why));
  auto shared = std::make_shared<const PdfInfo>(std::move(info));
  if (cache) cache->put_info(key, shared);
  return shared;
}

Result<std::shared_ptr<const ImageRGB>> render_document_page(std::span<const uint8_t> bytes, const DocumentKey& key,
                                                             const PdfInfo& info, const PagePlan& page, PageCache* cache,
                                                             const DocumentOptions& options, bool* cached,
                                                             PdfFailure* why) {
  if (cached) *cached = false;
  if (cache)
    if (auto hit = cache->find_page(key, page)) {
      if (cached) *cached = true;
      return hit;
    }
  QVL_ASSIGN_OR_RETURN(ImageRGB img, pdf_render_page(bytes, info.page[static_cast<size_t>(page.number) - 1], page.number,
                                                     page.width, page.height, options.pdf, why));
  auto shared = std::make_shared<const ImageRGB>(std::move(img));
  if (cache) {
    cache->count_render();
    cache->put_page(key, page, shared);
  }
  return shared;
}

Result<DocumentFile> open_document_file(const std::string& path, const std::string& pages, const DocumentOptions& options) {
  DocumentFile doc;
  doc.path = path;
  QVL_ASSIGN_OR_RETURN(doc.bytes, read_file_bytes(path, options.pdf.max_file_bytes));
  doc.key = document_key(doc.bytes);
  auto info = inspect_document(doc.bytes, doc.key, nullptr, options);
  if (!info.ok()) return info.status().with_context(path);
  doc.info = *info;
  auto selected = parse_page_selection(pages, doc.info->pages);
  if (!selected.ok()) return selected.status().with_context(path);
  doc.pages = std::move(selected).value();
  return doc;
}

Result<RenderedPages> render_document_file(const DocumentFile& doc, const ImageProcessorConfig& pc,
                                           const PreprocessOptions& o, const DocumentOptions& options,
                                           int64_t max_tokens, PageCache* cache) {
  RenderedPages out;
  auto plans = plan_pages(*doc.info, doc.pages, pc, o, options, max_tokens);
  if (!plans.ok()) return plans.status().with_context(doc.path);
  out.plans = std::move(plans).value();
  const auto t0 = std::chrono::steady_clock::now();
  for (const PagePlan& p : out.plans) {
    auto img = render_document_page(doc.bytes, doc.key, *doc.info, p, cache, options);
    if (!img.ok()) return img.status().with_context(doc.path);
    out.images.push_back(**img);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string describe_pages(const std::vector<PagePlan>& plans) {
  std::string s = plans.size() == 1 ? "page " : "pages ";
  for (size_t i = 0; i < plans.size();) {
    size_t j = i;
    while (j + 1 < plans.size() && plans[j + 1].number == plans[j].number + 1) ++j;
    if (i > 0) s += ", ";
    s += std::to_string(plans[i].number);
    if (j > i) s += "-" + std::to_string(plans[j].number);
    i = j + 1;
  }
  return s;
}

}  // namespace qvl
