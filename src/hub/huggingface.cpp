// The Hugging Face hub's download protocol, as huggingface_hub's snapshot_download and hf_hub_download speak it:
// the revision's file listing, a HEAD per file for its etag, size and CDN redirect, the blob fetched into the
// cache's blobs/ and linked from snapshots/<commit>/, and refs/<revision> written last.
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "hub/cache.h"
#include "hub/download.h"
#include "hub/files.h"
#include "hub/sources.h"

namespace qvl::hub {

namespace fs = std::filesystem;

namespace {

struct Sibling {
  std::string name;
  int64_t size = -1;
  std::string blob_id;  // git blob sha1
  std::string sha256;   // LFS files only
};

// "scheme://host[:port]" of a URL.
std::string origin(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t slash = url.find('/', scheme + 3);
  return slash == std::string::npos ? url : url.substr(0, slash);
}

// An ETag as huggingface_hub normalizes it: no weak marker, no quotes.
std::string normalize_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool is_hex(const std::string& s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

int64_t to_int(const std::string& s) {
  try {
    return s.empty() ? -1 : std::stoll(s);
  } catch (const std::exception&) {
    return -1;
  }
}

// The listing: {"sha": commit, "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}]}.
Result<std::pair<std::string, std::vector<Sibling>>> list_revision(const PullOptions& o, const HubContext& hub,
                                                                   const std::vector<std::string>& auth) {
  HttpRequest req;
  req.url = o.endpoint + "/api/models/" + o.repo_id + "/revision/" + url_escape(o.revision, false) + "?blobs=true";
  req.headers = auth;
  QVL_ASSIGN_OR_RETURN(HttpResponse r, request_retrying(req, hub));
  const std::string what = o.repo_id + " (revision " + o.revision + ")";
  if (r.status != 200) return Status::Error(describe_http_error(r.status, r.header("x-error-code"), what, hub));
  try {
    const auto j = nlohmann::json::parse(r.body);
    std::string commit = j.at("sha").get<std::string>();
    if (!is_hex(commit, 40)) throw std::runtime_error("\"sha\" is not a 40-digit commit hash");
    std::vector<Sibling> out;
    for (const auto& s : j.at("siblings")) {
      Sibling f;
      f.name = s.at("rfilename").get<std::string>();
      if (s.contains("size") && s["size"].is_number_integer()) f.size = s["size"].get<int64_t>();
      if (s.contains("blobId") && s["blobId"].is_string()) f.blob_id = s["blobId"].get<std::string>();
      if (s.contains("lfs") && s["lfs"].is_object()) {
        const auto& lfs = s["lfs"];
        if (lfs.contains("sha256") && lfs["sha256"].is_string()) f.sha256 = lfs["sha256"].get<std::string>();
        if (lfs.contains("size") && lfs["size"].is_number_integer()) f.size = lfs["size"].get<int64_t>();
      }
      out.push_back(std::move(f));
    }
    return std::make_pair(commit, out);
  } catch (const std::exception& e) {
    return Status::Error(what + ": " + req.url + " answered something other than a model listing (" + e.what() +
                         "); expected the hub API's JSON with \"sha\" and \"siblings\" (is HF_ENDPOINT a Hugging "
                         "Face hub or mirror?)");
  }
}

// HEAD /{repo}/resolve/{commit}/{file}: the blob's etag and size, and the URL its bytes come from (the CDN that a
// 302 names for LFS files). Relative redirects (a renamed repository) are followed, as huggingface_hub does.
Result<Transfer> locate(const PullOptions& o, const HubContext& hub, const HfRepoCache& cache,
                        const std::string& commit, const Sibling& s, const std::vector<std::string>& auth) {
  const std::string what = o.repo_id + "/" + s.name;
  std::string url = o.endpoint + "/" + o.repo_id + "/resolve/" + commit + "/" + url_escape(s.name, true);
  HttpResponse r;
  for (int hop = 0;; ++hop) {
    HttpRequest req;
    req.url = url;
    req.headers = auth;
    req.head = true;
    req.follow_redirects = false;
    QVL_ASSIGN_OR_RETURN(r, request_retrying(req, hub));
    const std::string loc = r.header("location");
    if (r.status >= 300 && r.status < 400 && !loc.empty() && loc[0] == '/' && r.header("x-linked-etag").empty() &&
        hop < 5) {
      url = origin(url) + loc;
      continue;
    }
    break;
  }
  if (r.status >= 400 || r.status < 200) {
    return Status::Error(describe_http_error(r.status, r.header("x-error-code"), what, hub));
  }
  Transfer t;
  std::string etag = normalize_etag(r.header("x-linked-etag"));
  if (etag.empty()) etag = normalize_etag(r.header("etag"));
  if (etag.empty() || etag.find('/') != std::string::npos || etag.find("..") != std::string::npos) {
    return Status::Error(what + ": the hub's answer to HEAD " + url + " has no usable ETag (got '" + etag +
                         "'); expected X-Linked-Etag or ETag as huggingface.co sends (is HF_ENDPOINT a Hugging "
                         "Face mirror, and does a proxy strip headers?)");
  }
  t.size = to_int(r.header("x-linked-size"));
  if (t.size < 0) t.size = to_int(r.header("content-length"));
  if (s.size >= 0 && t.size >= 0 && s.size != t.size) {
    return Status::Error(what + ": the listing says " + std::to_string(s.size) + " bytes, the file's HEAD says " +
                         std::to_string(t.size) + "; the revision changed during the pull? run it again");
  }
  if (t.size < 0) t.size = s.size;
  // LFS files: the etag is the content's sha256; small files: git's blob sha1 (the blob names in the cache).
  t.sha256 = !s.sha256.empty() ? s.sha256 : (is_hex(etag, 64) ? etag : "");
  t.git_sha1 = !s.blob_id.empty() && s.sha256.empty() ? s.blob_id : (is_hex(etag, 40) ? etag : "");
  const std::string loc = r.header("location");
  if (r.status >= 300 && r.status < 400 && !loc.empty()) {
    t.url = loc[0] == '/' ? origin(url) + loc : loc;
  } else {
    t.url = url;
  }
  // The token goes only to the hub itself, never to the CDN that a redirect names (its URL is signed).
  if (origin(t.url) == origin(o.endpoint)) t.headers = auth;
  t.final_path = cache.blob(etag);
  t.partial_path = cache.incomplete(etag);
  t.lock_path = cache.lock(etag);
  return t;
}

}  // namespace

Result<std::string> pull_huggingface(const PullOptions& o) {
  HubContext hub{"Hugging Face", o.endpoint, o.repo_id,
                 "set HF_TOKEN to a token that can read it (huggingface.co/settings/tokens), and for a gated model "
                 "accept its terms on the model's page",
                 "HF_ENDPOINT"};
  std::vector<std::string> auth;
  if (!o.token.empty()) auth.push_back("Authorization: Bearer " + o.token);

  QVL_ASSIGN_OR_RETURN(auto listing, list_revision(o, hub, auth));
  const std::string commit = listing.first;
  std::vector<std::string> names;
  for (const Sibling& s : listing.second) names.push_back(s.name);
  QVL_ASSIGN_OR_RETURN(std::vector<std::string> needed,
                       select_needed_files(names, o.repo_id + " (revision " + o.revision + ")", o.gguf_tag));

  const HfRepoCache cache{o.cache_dir, o.repo_id};
  std::vector<FileJob> jobs;
  int64_t missing_bytes = 0;
  std::error_code ec;
  for (const std::string& name : needed) {
    const Sibling s = *std::find_if(listing.second.begin(), listing.second.end(),
                                    [&](const Sibling& x) { return x.name == name; });
    // The blob's name predicted from the listing, for the free-space check (HEAD gives the real one).
    const std::string predicted = !s.sha256.empty() ? s.sha256 : s.blob_id;
    if (s.size > 0 && (predicted.empty() || !fs::exists(cache.blob(predicted), ec))) {
      const auto partial = predicted.empty() ? 0 : fs::file_size(cache.incomplete(predicted), ec);
      missing_bytes += s.size - (ec ? 0 : static_cast<int64_t>(partial));
    }
    FileJob job;
    job.name = name;
    job.size = s.size;
    job.locate = [&o, &hub, &cache, commit, s, auth] { return locate(o, hub, cache, commit, s, auth); };
    job.finish = [&cache, commit, name](const Transfer& t) {
      return cache.link(commit, name, fs::path(t.final_path).filename().string());
    };
    jobs.push_back(std::move(job));
  }
  fs::create_directories(cache.root() + "/blobs", ec);
  if (ec) return Status::Error(cache.root() + "/blobs: cannot create the cache folder: " + ec.message());
  QVL_RETURN_IF_ERROR(check_free_space(cache.root(), missing_bytes, hub));
  QVL_RETURN_IF_ERROR(download_files(jobs, o.parallel, hub, o.on_progress));
  // refs/<revision> last: a reader that follows it finds a complete snapshot.
  if (o.revision != commit) QVL_RETURN_IF_ERROR(cache.write_ref(o.revision, commit));
  const std::string dir = cache.snapshot(commit);
  QVL_RETURN_IF_ERROR(check_model_dir(dir, o.gguf_tag));
  return dir;
}

}  // namespace qvl::hub
