// Documents named in requests (OpenAI `file` parts, Responses `input_file`, PDFs among Ollama's images): read
// from the request, checked, and expanded before anything is rendered into the pages the prompt shows: the
// document's part becomes "Page n: " and an image per selected page, and the request's image list gains those
// pages in prompt order.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "engine/documents.h"
#include "engine/generate.h"
#include "model/image_processor.h"
#include "util/status.h"

namespace qvl::server {

struct ApiContext;
struct ApiError;

inline constexpr size_t kMaxDocumentsPerRequest = 16;  // file parts of one request, each read by a worker

// A turn of the confined PDF workers (pdfinfo, pdftoppm, previews): at most two run at once in a server, each
// with up to --pdf-worker-memory-mb. A turn is waited for at most 10 s and never past the request's deadline;
// without one the request gets 503, so no HTTP worker waits long behind slow documents.
class DocumentWorkerTurn {
 public:
  explicit DocumentWorkerTurn(std::chrono::steady_clock::time_point deadline);
  ~DocumentWorkerTurn();
  DocumentWorkerTurn(const DocumentWorkerTurn&) = delete;
  DocumentWorkerTurn& operator=(const DocumentWorkerTurn&) = delete;
  bool ok() const { return held_; }

 private:
  bool held_ = false;
};

// The HTTP status of a PDF failure: 400 (the request), 422 (the document), 503 (no worker could start).
int document_status(PdfFailure why);

struct DocumentRef {
  std::string ref;    // file_data (a data: URI or base64), a file name under --media-dir, or an allowed URL
  std::string where;  // the part's path in the request, for errors ("messages[0].content[1]")
  std::string pages;  // the selection ("1-3,7"); empty: every page
  PreprocessOptions size;  // the part's min_pixels / max_pixels / detail (max_pixels 0: "low")
};

// An OpenAI chat `file` part: {"type": "file", "file": {"file_data": "data:application/pdf;base64,...",
// "filename": "a.pdf", "pages": "1-3" or [1, 2, 3]}}, with "pages", "min_pixels", "max_pixels" and "detail" also
// taken from the part itself. Without file_data, filename names a file under --media-dir; file_id is refused.
Result<DocumentRef> document_part(const nlohmann::ordered_json& part, const std::string& where);

// One image of a request in prompt order: a reference to load, or page `plan` of document `document`.
struct RequestImage {
  std::string ref, where;
  int page = 0;       // the page of a multi-page image file (TIFF), from 0
  int document = -1;  // index into the request's LoadedDocuments; -1: an image reference
  PagePlan plan;
};

struct LoadedDocument {
  std::vector<uint8_t> bytes;
  DocumentKey key{};
  std::shared_ptr<const PdfInfo> info;
};

// Reads and inspects each document (a confined pdfinfo, or the page cache), selects and plans its pages against
// the context, then rewrites `messages` (each kDocument part of a user or tool message, in order, is the next
// of `documents`), `images` and options.per_image so that each page is an image in prompt order. Renders
// nothing. Errors: 400 for the request (bad selection, too many pages, over the context), 422 for a document
// that cannot be read (damaged, encrypted, the renderer failed or timed out).
std::optional<ApiError> expand_documents(const ApiContext& ctx, const std::vector<DocumentRef>& documents,
                                         std::vector<ChatMessage>& messages, GenerateOptions& options,
                                         std::vector<RequestImage>& images, std::vector<LoadedDocument>& loaded,
                                         std::chrono::steady_clock::time_point deadline);

}  // namespace qvl::server
