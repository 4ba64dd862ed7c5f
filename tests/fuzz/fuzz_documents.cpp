// Fuzz target: the document path. The first byte picks what the rest is:
//   0: pdfinfo's answer (parse_pdfinfo), then every page planned: an accepted list has a size per page, and a
//      plan fits its budget and is smart_resize's;
//   1: a page selection ("1-3,7") then a page count: accepted numbers are in range and unique;
//   2: pdftoppm's output (split_ppm): each image holds exactly its pixels;
//   3: a chat request body with file parts (parse_chat_completion): one document per file part of a user or
//      tool message, each with a reference;
//   4: a PDF given to the confined pdfinfo and pdftoppm (small limits): whatever the file, a result or an error,
//      and a rendered page is the size asked for.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "engine/documents.h"
#include "io/pdf.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 5;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
  using namespace qvl;
  switch (mode) {
    case 0: {
      auto info = parse_pdfinfo(text, 64);
      if (!info.ok()) return 0;
      if (info->pages < 0 || info->pages > 64 || info->page.size() != static_cast<size_t>(info->pages)) std::abort();
      ImageProcessorConfig pc;
      PreprocessOptions o{pc.min_pixels, 1 << 20};
      for (int n = 1; n <= info->pages; ++n) {
        auto p = plan_page(*info, n, pc, o, {});
        if (!p.ok()) continue;
        if (p->width < 1 || p->height < 1 || int64_t{p->width} * p->height > (1 << 20) || p->dpi > 150 || p->tokens < 1)
          std::abort();
      }
      return 0;
    }
    case 1: {
      if (rest.empty()) return 0;
      const int n = 1 + rest[0] % 200;
      auto pages = parse_page_selection(text.substr(1), n);
      if (!pages.ok()) return 0;
      std::vector<bool> seen(static_cast<size_t>(n) + 1);
      for (int p : *pages) {
        if (p < 1 || p > n || seen[static_cast<size_t>(p)]) std::abort();
        seen[static_cast<size_t>(p)] = true;
      }
      return 0;
    }
    case 2: {
      auto images = split_ppm(rest, 4, 1 << 20);
      if (!images.ok()) return 0;
      for (const ImageRGB& img : *images)
        if (img.pixels.size() != static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3) std::abort();
      return 0;
    }
    case 3: {
      nlohmann::ordered_json body;
      try {
        body = nlohmann::ordered_json::parse(text, nullptr, true, false);
      } catch (const std::exception&) {
        return 0;
      }
      if (!body.is_object()) return 0;
      auto r = server::parse_chat_completion(body, GenerateOptions{});
      if (!r.ok()) return 0;
      size_t parts = 0;
      for (const ChatMessage& m : r->messages)
        if (!m.content_is_string && (m.role == "user" || m.role == "tool"))
          for (const ContentPart& p : m.content_parts) parts += p.kind == ContentPart::Kind::kDocument;
      if (parts != r->documents.size()) std::abort();
      for (const server::DocumentRef& d : r->documents)
        if (d.ref.empty() || d.where.empty()) std::abort();
      return 0;
    }
    default: {
      PdfLimits l;
      l.inspect_timeout_s = 2;
      l.render_timeout_s = 2;
      l.worker_memory_bytes = uint64_t{256} << 20;
      l.max_pages = 16;
      auto info = pdf_inspect(rest, l);
      if (!info.ok()) return 0;
      if (info->pages < 1 || info->page.size() != static_cast<size_t>(info->pages)) std::abort();
      auto img = pdf_render_page(rest, info->page[0], 1, 24, 32, l);
      if (img.ok() && (img->width != 24 || img->height != 32)) std::abort();
      return 0;
    }
  }
}
