// Downloads a set of files a few at a time, each resumed from its partial file, checked against its published
// size and digest before it is moved into place, with progress reports and the error messages of a model hub.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hub/http_fetch.h"
#include "hub/hub.h"
#include "util/status.h"

namespace qvl::hub {

// Which hub a message is about, and what the user can do about it.
struct HubContext {
  std::string name;        // "Hugging Face" / "ModelScope"
  std::string endpoint;    // the base URL
  std::string repo_id;
  std::string token_hint;  // "set HF_TOKEN to ..." for 401/403
  std::string endpoint_env;  // "HF_ENDPOINT" / "MODELSCOPE_ENDPOINT"
};

// "<what>: <hub> answered 401 ...: <hint>" for an HTTP error status; `error_code` is the hub's X-Error-Code.
std::string describe_http_error(long status, const std::string& error_code, const std::string& what,
                                const HubContext& hub);
// No connection at all: says what HF_HUB_OFFLINE does.
std::string describe_unreachable(const std::string& detail, const HubContext& hub);

// A small request (listing, HEAD), retried on 5xx and broken transfers; a transfer failure becomes an error with
// the offline hint, an HTTP status comes back in the response.
Result<HttpResponse> request_retrying(const HttpRequest& request, const HubContext& hub);

// OK when the file system holding `dir` has `needed` bytes free (or its free space is unknown); else the
// ENOSPC message, before any byte is fetched.
Status check_free_space(const std::string& dir, int64_t needed, const HubContext& hub);

// Where one file comes from and where it goes.
struct Transfer {
  std::string url;
  std::vector<std::string> headers;
  int64_t size = -1;             // expected bytes; -1: not published
  std::string sha256;            // expected lowercase hex; empty: not published
  std::string git_sha1;          // git blob id, checked when there is no sha256
  std::string final_path;        // a file here is the verified download
  std::string partial_path;      // the bytes so far, resumed from
  std::string lock_path;         // flock()ed while this file downloads (several processes may pull at once)
  bool verify_existing = false;  // hash a file already at final_path before trusting it (no content addressing)
};

struct FileJob {
  std::string name;      // the path in the repository
  int64_t size = -1;     // from the listing, for the progress total before locate() runs
  std::function<Result<Transfer>()> locate;           // e.g. a HEAD request for the blob's etag
  std::function<Status(const Transfer&)> finish;      // after the file is in place (e.g. the snapshot symlink)
};

// Runs every job, `parallel` at a time; the first failure stops the others (their partial files stay, to be
// resumed) and is returned.
Status download_files(const std::vector<FileJob>& jobs, int parallel, const HubContext& hub,
                      const std::function<void(const Progress&)>& on_progress);

}  // namespace qvl::hub
