// Document parts read from requests and expanded into page images (rendering is load_page_for_request's, in
// api.cpp, after the whole request has been checked).
#include "server/document_input.h"

#include "server/api.h"

#include <semaphore>

namespace qvl::server {

namespace {

// "pages": a selection string ("1-3,7") or a list of page numbers, as the selection string.
Status read_pages(const json& obj, const std::string& where, std::string& out) {
  auto it = obj.find("pages");
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    out = it->get<std::string>();
    if (out.size() > 4096) return Status::Error(where + ".pages: over 4,096 characters; select pages as \"1-3,7\"");
    return Status::Ok();
  }
  if (!it->is_array() || it->empty() || it->size() > 10000)
    return Status::Error(where + ".pages: expected a selection such as \"1-3,7\" or a non-empty list of page numbers, got " +
                         it->dump().substr(0, 60));
  out.clear();
  for (const json& n : *it) {
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 1000000)
      return Status::Error(where + ".pages: expected page numbers from 1, got " + n.dump().substr(0, 40));
    out += (out.empty() ? "" : ",") + std::to_string(n.get<int64_t>());
  }
  return Status::Ok();
}

Status read_size(const json& obj, const std::string& where, PreprocessOptions& o) {
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"min_pixels", &o.min_pixels}, {"max_pixels", &o.max_pixels}}) {
    int64_t v = *field;
    QVL_RETURN_IF_ERROR(read_int(obj, key, v, where));
    if (v != *field && (v < 1 || v > (int64_t{1} << 32)))
      return Status::Error(where + "." + key + ": expected 1 to 2^32 pixels in all, got " + std::to_string(v));
    *field = v;
  }
  std::string detail;
  QVL_RETURN_IF_ERROR(read_string(obj, "detail", detail, where));
  if (!detail.empty() && detail != "low" && detail != "high" && detail != "auto")
    return Status::Error(where + ".detail: expected low, high or auto, got '" + detail.substr(0, 40) + "'");
  if (detail == "low") o.max_pixels = 0;
  return Status::Ok();
}

std::counting_semaphore<>& document_workers() {
  static std::counting_semaphore<> gate(2);
  return gate;
}

}  // namespace

DocumentWorkerTurn::DocumentWorkerTurn(std::chrono::steady_clock::time_point deadline) {
  held_ = document_workers().try_acquire_until(std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10)));
}

DocumentWorkerTurn::~DocumentWorkerTurn() {
  if (held_) document_workers().release();
}

int document_status(PdfFailure why) {
  switch (why) {
    case PdfFailure::kRequest: return 400;
    case PdfFailure::kDocument: return 422;
    case PdfFailure::kServer: return 503;
  }
  return 422;
}

Result<DocumentRef> document_part(const json& part, const std::string& where) {
  DocumentRef d;
  d.where = where;
  auto file = part.find("file");
  if (file == part.end() || !file->is_object())
    return Status::Error(where + ".file: expected an object {\"filename\": \"a.pdf\", \"file_data\": "
                         "\"data:application/pdf;base64,...\"}");
  const std::string fw = where + ".file";
  if (auto id = file->find("file_id"); id != file->end() && !id->is_null())
    return Status::Error(fw + ".file_id: not supported (this server has no Files API); send the document as file_data "
                         "(a data: URI), or its name under the server's --media-dir as filename");
  std::string data, name;
  QVL_RETURN_IF_ERROR(read_string(*file, "file_data", data, fw));
  QVL_RETURN_IF_ERROR(read_string(*file, "filename", name, fw));
  if (auto url = file->find("file_url"); data.empty() && url != file->end() && url->is_string()) {
    data = url->get<std::string>();
  }
  if (data.empty() && name.empty())
    return Status::Error(fw + ": expected file_data (data:application/pdf;base64,...) or a filename under the server's "
                         "--media-dir");
  d.ref = data.empty() ? name : data;
  if (!data.empty()) d.where = fw + ".file_data";
  for (const json* obj : {&part, &*file}) {
    const std::string w = obj == &part ? where : fw;
    QVL_RETURN_IF_ERROR(read_pages(*obj, w, d.pages));
    QVL_RETURN_IF_ERROR(read_size(*obj, w, d.size));
  }
  if (d.size.min_pixels > 0 && d.size.max_pixels > 0 && d.size.min_pixels > d.size.max_pixels)
    return Status::Error(where + ": min_pixels " + std::to_string(d.size.min_pixels) + " is over max_pixels " +
                         std::to_string(d.size.max_pixels) + "; give min_pixels <= max_pixels");
  return d;
}

std::optional<ApiError> expand_documents(const ApiContext& ctx, const std::vector<DocumentRef>& documents,
                                         std::vector<ChatMessage>& messages, GenerateOptions& options,
                                         std::vector<RequestImage>& images, std::vector<LoadedDocument>& loaded,
                                         std::chrono::steady_clock::time_point deadline) {
  if (documents.empty()) return std::nullopt;
  if (documents.size() > kMaxDocumentsPerRequest)
    return ApiError{400, "the request has " + std::to_string(documents.size()) + " documents; at most " +
                             std::to_string(kMaxDocumentsPerRequest) + " are read per request (join them, or send fewer)",
                    "too_many_documents", documents[kMaxDocumentsPerRequest].where};
  if (Status s = pdf_renderer_available(); !s.ok())
    return ApiError{501, s.message(), "documents_unsupported", documents[0].where};
  const Model* model = ctx.scheduler.model();
  const ImageProcessorConfig pc = model ? model->image_config() : ImageProcessorConfig{};
  std::vector<std::vector<PagePlan>> plans;
  int64_t tokens = 0, pixels = 0;
  int pages = 0;
  for (const DocumentRef& d : documents) {
    auto bytes = load_request_document_bytes(d.ref, ctx.images, d.where);
    if (!bytes.ok()) return ApiError{400, bytes.status().message(), "invalid_document", d.where};
    LoadedDocument doc;
    doc.bytes = std::move(bytes).value();
    doc.key = document_key(doc.bytes);
    std::shared_ptr<const PdfInfo> cached = ctx.page_cache ? ctx.page_cache->find_info(doc.key) : nullptr;
    if (!cached) {
      DocumentWorkerTurn turn(deadline);
      if (!turn.ok())
        return ApiError{503, "the server is busy reading other documents; retry in a few seconds", "busy", d.where, 2};
      PdfFailure why = PdfFailure::kDocument;
      auto info = inspect_document(doc.bytes, doc.key, ctx.page_cache, ctx.documents, &why);
      if (!info.ok())
        return ApiError{document_status(why), d.where + ": " + info.status().message(),
                        why == PdfFailure::kServer ? "busy" : "invalid_document", d.where};
      cached = *info;
    }
    doc.info = cached;
    auto selected = parse_page_selection(d.pages, doc.info->pages);
    if (!selected.ok()) return ApiError{400, d.where + ": " + selected.status().message(), "invalid_pages", d.where};
    if (pages + static_cast<int64_t>(selected->size()) > ctx.documents.max_pages_per_request)
      return ApiError{400, d.where + ": the request's documents select " + std::to_string(pages + selected->size()) +
                               " pages, over the limit of " + std::to_string(ctx.documents.max_pages_per_request) +
                               " pages a request (--pdf-max-pages); select fewer (pages)",
                      "invalid_pages", d.where};
    const PreprocessOptions o = page_bounds(options.image, d.size, pc);
    auto plan = plan_pages(*doc.info, *selected, pc, o, ctx.documents, std::max<int64_t>(0, options.context - tokens));
    if (!plan.ok()) return ApiError{400, d.where + ": " + plan.status().message(), "invalid_pages", d.where};
    for (const PagePlan& p : *plan) {
      tokens += p.tokens;
      pixels += int64_t{p.width} * p.height;
    }
    if (pixels > ctx.documents.max_request_pixels)
      return ApiError{400, d.where + ": the request's pages render to " + std::to_string(pixels) + " pixels, over the " +
                               "limit of " + std::to_string(ctx.documents.max_request_pixels) + " a request; select fewer " +
                               "pages or lower max_pixels",
                      "invalid_pages", d.where};
    pages += static_cast<int>(plan->size());
    plans.push_back(std::move(plan).value());
    loaded.push_back(std::move(doc));
  }
  // The parts in prompt order: images of user and tool messages take the next reference, documents the next
  // document's pages. Images of other roles are not in `images` (the template does not show them).
  std::vector<RequestImage> out;
  std::vector<PreprocessOptions> per_image;
  size_t next_image = 0, next_doc = 0;
  for (ChatMessage& m : messages) {
    if (m.content_is_string || (m.role != "user" && m.role != "tool")) continue;
    std::vector<ContentPart> parts;
    for (ContentPart& part : m.content_parts) {
      if (part.kind == ContentPart::Kind::kImage && next_image < images.size()) {
        per_image.push_back(next_image < options.per_image.size() ? options.per_image[next_image] : PreprocessOptions{});
        out.push_back(std::move(images[next_image++]));
        parts.push_back(std::move(part));
      } else if (part.kind == ContentPart::Kind::kDocument && next_doc < documents.size()) {
        const size_t d = next_doc++;
        append_page_parts(parts, plans[d]);
        for (const PagePlan& p : plans[d]) {
          RequestImage ri;
          ri.where = documents[d].where;
          ri.document = static_cast<int>(d);
          ri.plan = p;
          out.push_back(std::move(ri));
          per_image.push_back(documents[d].size);
        }
      } else {
        parts.push_back(std::move(part));
      }
    }
    m.content_parts = std::move(parts);
  }
  if (next_doc != documents.size() || next_image != images.size())
    return ApiError{500, "the request's documents and images do not match its content parts (a server bug)", "internal"};
  images = std::move(out);
  options.per_image = std::move(per_image);
  return std::nullopt;
}

}  // namespace qvl::server
