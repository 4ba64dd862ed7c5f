// HTTP(S) through libcurl for the model downloads: small requests (listings, HEAD) and a file transfer that
// resumes a partial file with a Range request.
#include "hub/http_fetch.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <mutex>

namespace qvl::hub {

namespace {

constexpr char kUserAgent[] = "qvl/0.1 (libcurl)";
// A transfer that moves under 1 KiB/s for 30 s is treated as broken and resumed by the caller.
constexpr long kLowSpeedBytes = 1024;
constexpr long kLowSpeedSeconds = 30;
constexpr long kConnectTimeoutS = 15;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Collects the headers of the last response (a redirect's headers are dropped when the next status line comes).
size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t b = colon + 1, e = line.size();
  while (b < e && (line[b] == ' ' || line[b] == '\t')) ++b;
  while (e > b && (line[e - 1] == '\r' || line[e - 1] == '\n' || line[e - 1] == ' ')) --e;
  (*headers)[name] = line.substr(b, e - b);
  return size * n;
}

struct BodySink {
  std::string* body;
  size_t max;
  bool overflow = false;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  if (sink->body->size() + size * n > sink->max) {
    sink->overflow = true;
    return 0;
  }
  sink->body->append(data, size * n);
  return size * n;
}

struct CurlHandle {
  CURL* h;
  curl_slist* headers = nullptr;
  CurlHandle() : h((global_init(), curl_easy_init())) {}
  ~CurlHandle() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
  void set_common(const std::string& url, const std::vector<std::string>& lines, bool follow) {
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    for (const std::string& l : lines) headers = curl_slist_append(headers, l.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_USERAGENT, kUserAgent);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    // Custom headers (Authorization) are not sent to another host after a redirect: curl's default.
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, kLowSpeedBytes);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, kLowSpeedSeconds);
    // Proxies come from the usual environment variables (https_proxy, no_proxy): libcurl's default.
  }
};

TransferError transfer_error(CURLcode code, const char* errbuf, const std::string& url) {
  TransferError e;
  e.message = std::string(errbuf[0] ? errbuf : curl_easy_strerror(code)) + " (" + url + ")";
  e.unreachable = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                  code == CURLE_COULDNT_RESOLVE_PROXY;
  return e;
}

struct FileSink {
  const DownloadRequest* req = nullptr;
  CURL* h = nullptr;
  int fd = -1;
  int64_t size = 0;       // the file's size now
  long status = 0;        // status of the response being written, checked on its first bytes
  bool checked = false;
  std::string error_body;
  int write_errno = 0;
  bool aborted = false;
};

size_t on_file_data(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<FileSink*>(user);
  const size_t len = size * n;
  if (!s->checked) {
    s->checked = true;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
    // 200 to a Range request: the server sends the whole file, so the partial one starts over.
    if (s->status == 200 && s->size > 0) {
      if (::ftruncate(s->fd, 0) != 0 || ::lseek(s->fd, 0, SEEK_SET) < 0) {
        s->write_errno = errno;
        return 0;
      }
      s->size = 0;
    }
  }
  if (s->status != 200 && s->status != 206) {  // an error page: keep its start for the message
    if (s->error_body.size() < 2048) s->error_body.append(data, std::min<size_t>(len, 2048));
    return len;
  }
  size_t done = 0;
  while (done < len) {
    const ssize_t w = ::write(s->fd, data + done, len - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      s->write_errno = errno;
      return 0;
    }
    done += static_cast<size_t>(w);
  }
  s->size += static_cast<int64_t>(len);
  if (s->req->on_data && !s->req->on_data(static_cast<int64_t>(len), s->size)) {
    s->aborted = true;
    return 0;
  }
  return len;
}

}  // namespace

Result<HttpResponse> http_request(const HttpRequest& request, TransferError* error) {
  CurlHandle c;
  if (!c.h) return Status::Error("libcurl: cannot create a handle");
  HttpResponse resp;
  BodySink sink{&resp.body, request.max_body};
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::vector<std::string> lines = request.headers;
  lines.push_back("Accept-Encoding: identity");
  c.set_common(request.url, lines, request.follow_redirects);
  if (request.head) curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c.h, CURLOPT_TIMEOUT, request.timeout_s);
  curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &resp.headers);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
  const CURLcode code = curl_easy_perform(c.h);
  if (sink.overflow) {
    return Status::Error(request.url + ": the answer is over " + std::to_string(request.max_body) +
                         " bytes; expected a short JSON listing (is the endpoint a model hub?)");
  }
  if (code != CURLE_OK) {
    TransferError e = transfer_error(code, errbuf, request.url);
    if (error) *error = e;
    return Status::Error(e.message);
  }
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

DownloadOutcome http_download(const DownloadRequest& request) {
  DownloadOutcome out;
  CurlHandle c;
  if (!c.h) {
    out.transfer.message = "libcurl: cannot create a handle";
    return out;
  }
  FileSink sink;
  sink.req = &request;
  sink.h = c.h;
  sink.fd = ::open(request.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (sink.fd < 0) {
    out.write_errno = errno;
    return out;
  }
  struct stat st {};
  if (::fstat(sink.fd, &st) == 0) sink.size = st.st_size;
  std::vector<std::string> lines = request.headers;
  lines.push_back("Accept-Encoding: identity");
  if (sink.size > 0) lines.push_back("Range: bytes=" + std::to_string(sink.size) + "-");
  char errbuf[CURL_ERROR_SIZE] = {0};
  c.set_common(request.url, lines, /*follow=*/true);
  curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &out.headers);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_file_data);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
  const CURLcode code = curl_easy_perform(c.h);
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &out.status);
  if (::close(sink.fd) != 0 && !sink.write_errno) sink.write_errno = errno;
  out.error_body = std::move(sink.error_body);
  out.write_errno = sink.write_errno;
  out.aborted = sink.aborted;
  if (code != CURLE_OK && !out.write_errno && !out.aborted) out.transfer = transfer_error(code, errbuf, request.url);
  return out;
}

std::string url_escape(const std::string& s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace qvl::hub
