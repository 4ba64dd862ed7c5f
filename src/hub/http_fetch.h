// HTTP(S) through libcurl for the model downloads: small requests (listings, HEAD) and a file transfer that
// resumes a partial file with a Range request.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl::hub {

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value" lines
  bool head = false;                 // HEAD instead of GET
  bool follow_redirects = true;
  size_t max_body = 16 << 20;        // a larger body is an error (listings are a few KiB)
  long timeout_s = 60;               // whole request
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response; names lowercased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A failure below HTTP: no connection, a dropped transfer, a timeout. `unreachable` is true when no connection
// could be made at all (no network, wrong host or port), which callers report with the offline hint.
struct TransferError {
  std::string message;      // curl's words, with the URL
  bool unreachable = false;
};

// Any HTTP status comes back as a response; only a failed transfer is an error.
Result<HttpResponse> http_request(const HttpRequest& request, TransferError* error = nullptr);

struct DownloadRequest {
  std::string url;
  std::vector<std::string> headers;
  std::string path;  // the partial file: appended to from its current size with "Range: bytes=N-"
  // Called after each write with the bytes just written and the file's new size; return false to abort.
  std::function<bool(int64_t delta, int64_t file_size)> on_data;
};

struct DownloadOutcome {
  long status = 0;           // the final HTTP status (206: resumed, 200: whole file, 416: nothing left to fetch)
  std::string error_body;    // the start of the body of an error response
  std::map<std::string, std::string> headers;
  TransferError transfer;    // set when the transfer broke off (message non-empty)
  int write_errno = 0;       // set when writing the file failed (ENOSPC: the disk is full)
  bool aborted = false;      // on_data returned false
};

// Fetches `url` into `path`, resuming from the file's size. A server that ignores the Range header (200) makes
// the file start over. An HTTP error leaves the file as it was.
DownloadOutcome http_download(const DownloadRequest& request);

// "a b/c.json" -> "a%20b/c.json" (keep_slash) or "a%20b%2Fc.json".
std::string url_escape(const std::string& s, bool keep_slash);

}  // namespace qvl::hub
