// Where the hubs' caches live (from the same environment variables their Python tools read) and the Hugging
// Face cache's layout: models--ORG--NAME/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>,
// refs/<revision>}, shared with transformers and huggingface-cli.
#include "hub/cache.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/file.h"

namespace qvl::hub {

namespace fs = std::filesystem;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

std::string folder_name(const std::string& repo_id) {
  std::string out = "models--" + repo_id;
  for (size_t p; (p = out.find('/')) != std::string::npos;) out.replace(p, 1, "--");
  return out;
}

}  // namespace

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string default_hf_cache_dir() {
  if (std::string v = env_or("HF_HUB_CACHE", ""); !v.empty()) return v;
  if (std::string v = env_or("HUGGINGFACE_HUB_CACHE", ""); !v.empty()) return v;
  if (std::string v = env_or("HF_HOME", ""); !v.empty()) return v + "/hub";
  if (std::string v = env_or("XDG_CACHE_HOME", ""); !v.empty()) return v + "/huggingface/hub";
  return env_or("HOME", "/root") + "/.cache/huggingface/hub";
}

std::string default_modelscope_cache_dir() {
  if (std::string v = env_or("MODELSCOPE_CACHE", ""); !v.empty()) return v;
  return env_or("HOME", "/root") + "/.cache/modelscope/hub";
}

std::string default_hf_token() {
  if (std::string v = env_or("HF_TOKEN", ""); !v.empty()) return trim(v);
  if (std::string v = env_or("HUGGING_FACE_HUB_TOKEN", ""); !v.empty()) return trim(v);
  std::string path = env_or("HF_TOKEN_PATH", "");
  if (path.empty()) {
    std::string home = env_or("HF_HOME", "");
    if (home.empty()) home = env_or("XDG_CACHE_HOME", env_or("HOME", "/root") + "/.cache") + "/huggingface";
    path = home + "/token";
  }
  auto text = read_file_text(path, 4096);
  return text.ok() ? trim(*text) : std::string();
}

bool env_offline() {
  std::string v = env_or("HF_HUB_OFFLINE", "");
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

// huggingface_hub's validate_repo_id: ORG/NAME, each part of letters, digits, '-', '_' and '.', beginning and
// ending with a letter, digit or '_' (so ".", "./x" and "-x" are paths or typos, never ids), no "--" or "..", the
// name at most 96 characters.
bool is_valid_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || s.size() - slash - 1 > 96 || s.find('/', slash + 1) != std::string::npos) return false;
  if (s.find("..") != std::string::npos || s.find("--") != std::string::npos) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto part = [&](const std::string& p) {
    return !p.empty() && word(p.front()) && word(p.back()) &&
           std::all_of(p.begin(), p.end(), [&](char c) { return word(c) || c == '-' || c == '.'; });
  };
  return part(s.substr(0, slash)) && part(s.substr(slash + 1));
}

bool is_commit_hash(const std::string& r) {
  return r.size() == 40 && std::all_of(r.begin(), r.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string HfRepoCache::root() const { return cache_dir + "/" + folder_name(repo_id); }
std::string HfRepoCache::blob(const std::string& etag) const { return root() + "/blobs/" + etag; }
std::string HfRepoCache::incomplete(const std::string& etag) const { return blob(etag) + ".incomplete"; }
std::string HfRepoCache::lock(const std::string& etag) const {
  return cache_dir + "/.locks/" + folder_name(repo_id) + "/" + etag + ".lock";
}
std::string HfRepoCache::snapshot(const std::string& commit) const { return root() + "/snapshots/" + commit; }
std::string HfRepoCache::ref(const std::string& revision) const { return root() + "/refs/" + revision; }

Status HfRepoCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path dst = fs::path(snapshot(commit)) / file;
  std::error_code ec;
  fs::create_directories(dst.parent_path(), ec);
  if (ec) return Status::Error(dst.parent_path().string() + ": cannot create the snapshot folder: " + ec.message());
  // ../../blobs/<etag> from snapshots/<commit>/, one more ../ for each folder inside the repository.
  std::string target = "../../blobs/" + etag;
  for (char c : file) {
    if (c == '/') target = "../" + target;
  }
  fs::remove(dst, ec);
  fs::create_symlink(target, dst, ec);
  if (ec) {
    return Status::Error(dst.string() + ": cannot create the symlink to " + target + ": " + ec.message() +
                         "; the hub cache needs a file system with symlinks");
  }
  return Status::Ok();
}

Status HfRepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  const fs::path path = ref(revision);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const std::string tmp = path.string() + ".tmp";
  QVL_RETURN_IF_ERROR(write_file_bytes(tmp, commit.data(), commit.size()));
  fs::rename(tmp, path, ec);
  if (ec) return Status::Error(path.string() + ": cannot write the ref: " + ec.message());
  return Status::Ok();
}

Result<std::string> HfRepoCache::read_ref(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  auto text = read_file_text(ref(revision), 4096);
  if (!text.ok()) return text.status();
  std::string commit = trim(*text);
  if (!is_commit_hash(commit)) {
    return Status::Error(ref(revision) + ": expected a 40-digit commit hash, got '" + commit.substr(0, 60) + "'");
  }
  return commit;
}

std::string modelscope_model_dir(const std::string& cache_dir, const std::string& repo_id) {
  const size_t slash = repo_id.find('/');
  std::string name = repo_id.substr(slash + 1);
  for (size_t p = 0; (p = name.find('.', p)) != std::string::npos; p += 3) name.replace(p, 1, "___");
  return cache_dir + "/models/" + repo_id.substr(0, slash) + "/" + name;
}

int64_t free_bytes(const std::string& dir) {
  fs::path p = dir;
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.empty() ? "." : p.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace qvl::hub
