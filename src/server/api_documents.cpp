// POST /v1/documents/pages: a PDF's page count and small previews of its first pages, for the page's document
// attachments (choose the pages to send). The same reading, limits and confined workers as a chat request's
// documents; nothing is kept but the page list in the page cache.
#include "server/api.h"

#include "io/image.h"

namespace qvl::server {

namespace {

constexpr int kMaxThumbnails = 100;

void document_pages(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  std::string data;
  if (Status s = read_string(*body, "file_data", data); !s.ok()) return fail({400, s.message(), "", "file_data"});
  if (data.empty())
    return fail({400, "file_data: expected the PDF as a data: URI (data:application/pdf;base64,...)", "", "file_data"});
  int64_t side = 160;
  if (Status s = read_int(*body, "thumbnail_size", side); !s.ok()) return fail({400, s.message(), "", "thumbnail_size"});
  if (side < 32 || side > 256)
    return fail({400, "thumbnail_size: expected 32 to 256 pixels, got " + std::to_string(side), "", "thumbnail_size"});
  if (Status s = pdf_renderer_available(); !s.ok()) return fail({501, s.message(), "documents_unsupported"});
  auto bytes = load_request_document_bytes(data, ctx.images, "file_data");
  if (!bytes.ok()) return fail({400, bytes.status().message(), "invalid_document", "file_data"});
  const DocumentKey key = document_key(*bytes);
  // One worker turn for the page list and the previews (the same two turns chat requests' pages take).
  DocumentWorkerTurn turn(request_deadline(ctx));
  if (!turn.ok()) return fail({503, "the server is busy reading other documents; retry in a few seconds", "busy", "", 2});
  PdfFailure why = PdfFailure::kDocument;
  auto info = inspect_document(*bytes, key, ctx.page_cache, ctx.documents, &why);
  if (!info.ok()) return fail({document_status(why), "file_data: " + info.status().message(), "invalid_document", "file_data"});
  const int last = std::min((*info)->pages, kMaxThumbnails);
  auto images = pdf_render_thumbnails(*bytes, 1, last, static_cast<int>(side), ctx.documents.pdf, &why);
  if (!images.ok())
    return fail({document_status(why), "file_data: " + images.status().message(), "invalid_document", "file_data"});
  json thumbs = json::array();
  for (size_t k = 0; k < images->size(); ++k) {
    const ImageRGB& img = (*images)[k];
    auto jpeg = encode_jpeg(img, 80);
    if (!jpeg.ok()) return fail({500, jpeg.status().message()});
    thumbs.push_back(json{{"page", k + 1}, {"width", img.width}, {"height", img.height},
                          {"url", "data:image/jpeg;base64," + base64_encode(jpeg->data(), jpeg->size())}});
  }
  send_json(res, 200, json{{"object", "document"}, {"pages", (*info)->pages}, {"thumbnails", std::move(thumbs)},
                           {"thumbnails_truncated", (*info)->pages > static_cast<int>(images->size())}});
}

}  // namespace

void add_document_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/documents/pages", [&ctx](const http::Request& req, http::Response& res) { document_pages(ctx, req, res); });
}

}  // namespace qvl::server
