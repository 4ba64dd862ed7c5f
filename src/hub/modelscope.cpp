// ModelScope's download protocol, as its Python SDK's snapshot_download speaks it: the revision's recursive file
// list (Path, Size, Sha256 per file), each file fetched from the repo-file API into <cache>/models/ORG/NAME.
//
// Uncertain, from reading the SDK rather than the service: (1) authentication: the SDK sends its login session
// as the cookie m_session_id; qvl sends $MODELSCOPE_API_TOKEN that way, which may not be accepted for private
// repositories; (2) a missing model may come back as HTTP 404 or as HTTP 200 with "Success": false and a
// "Code" other than 200: both are reported; (3) the SDK's own index files (.msc, .mdl, .mv: pickled Python) are
// not written, so the SDK re-checks qvl's files by sha256 before it trusts them; (4) partial files live in
// <cache>/._____temp/ORG/NAME, the SDK's temporary folder, with qvl's own ".incomplete" names.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "hub/cache.h"
#include "hub/download.h"
#include "hub/files.h"
#include "hub/sources.h"

namespace qvl::hub {

namespace fs = std::filesystem;

namespace {

struct MsFile {
  std::string path;
  int64_t size = -1;
  std::string sha256;
};

Result<std::vector<MsFile>> list_files(const PullOptions& o, const HubContext& hub,
                                       const std::vector<std::string>& auth) {
  HttpRequest req;
  req.url = o.endpoint + "/api/v1/models/" + o.repo_id + "/repo/files?Revision=" + url_escape(o.revision, false) +
            "&Recursive=true";
  req.headers = auth;
  QVL_ASSIGN_OR_RETURN(HttpResponse r, request_retrying(req, hub));
  const std::string what = o.repo_id + " (revision " + o.revision + ")";
  if (r.status != 200) return Status::Error(describe_http_error(r.status, "", what, hub));
  try {
    const auto j = nlohmann::json::parse(r.body);
    const bool success = !j.contains("Success") || j["Success"].get<bool>();
    const int code = j.contains("Code") && j["Code"].is_number_integer() ? j["Code"].get<int>() : 200;
    if (!success || code != 200) {
      const std::string msg = j.contains("Message") && j["Message"].is_string() ? j["Message"].get<std::string>() : "";
      return Status::Error(what + ": ModelScope (" + o.endpoint + ") refused the file list: code " +
                           std::to_string(code) + (msg.empty() ? "" : " (" + msg + ")") +
                           "; check the model id and revision (ModelScope's default branch is master), and set "
                           "MODELSCOPE_API_TOKEN for a private model");
    }
    std::vector<MsFile> out;
    for (const auto& f : j.at("Data").at("Files")) {
      if (f.contains("Type") && f["Type"].is_string() && f["Type"].get<std::string>() == "tree") continue;
      MsFile m;
      m.path = f.at("Path").get<std::string>();
      if (f.contains("Size") && f["Size"].is_number_integer()) m.size = f["Size"].get<int64_t>();
      if (f.contains("Sha256") && f["Sha256"].is_string()) m.sha256 = f["Sha256"].get<std::string>();
      out.push_back(std::move(m));
    }
    return out;
  } catch (const std::exception& e) {
    return Status::Error(what + ": " + req.url + " answered something other than a file list (" + e.what() +
                         "); expected {\"Code\": 200, \"Data\": {\"Files\": [...]}} (is MODELSCOPE_ENDPOINT a "
                         "ModelScope hub?)");
  }
}

}  // namespace

Result<std::string> pull_modelscope(const PullOptions& o) {
  HubContext hub{"ModelScope", o.endpoint, o.repo_id,
                 "set MODELSCOPE_API_TOKEN to an access token of an account that can read it (modelscope.cn: "
                 "account settings, access tokens)",
                 "MODELSCOPE_ENDPOINT"};
  std::vector<std::string> auth;
  if (!o.token.empty()) auth.push_back("Cookie: m_session_id=" + o.token);

  QVL_ASSIGN_OR_RETURN(std::vector<MsFile> files, list_files(o, hub, auth));
  std::vector<std::string> names;
  for (const MsFile& f : files) names.push_back(f.path);
  QVL_ASSIGN_OR_RETURN(std::vector<std::string> needed,
                       select_needed_files(names, o.repo_id + " (revision " + o.revision + ")", o.gguf_tag));

  const std::string dir = modelscope_model_dir(o.cache_dir, o.repo_id);
  const std::string temp = o.cache_dir + "/._____temp/" + o.repo_id;
  std::vector<FileJob> jobs;
  int64_t missing_bytes = 0;
  std::error_code ec;
  for (const std::string& name : needed) {
    const MsFile f = *std::find_if(files.begin(), files.end(), [&](const MsFile& x) { return x.path == name; });
    Transfer t;
    t.url = o.endpoint + "/api/v1/models/" + o.repo_id + "/repo?Revision=" + url_escape(o.revision, false) +
            "&FilePath=" + url_escape(name, false);
    t.headers = auth;
    t.size = f.size;
    t.sha256 = f.sha256;
    t.final_path = dir + "/" + name;
    t.partial_path = temp + "/" + name + ".incomplete";
    t.lock_path = temp + "/" + name + ".lock";
    t.verify_existing = true;  // the path is not content-addressed: an older revision's file may be there
    if (f.size > 0 && static_cast<int64_t>(fs::file_size(t.final_path, ec)) != f.size) {
      const auto partial = fs::file_size(t.partial_path, ec);
      missing_bytes += f.size - (ec ? 0 : static_cast<int64_t>(partial));
    }
    FileJob job;
    job.name = name;
    job.size = f.size;
    job.locate = [t]() -> Result<Transfer> { return t; };
    jobs.push_back(std::move(job));
  }
  fs::create_directories(dir, ec);
  if (ec) return Status::Error(dir + ": cannot create the model folder: " + ec.message());
  QVL_RETURN_IF_ERROR(check_free_space(dir, missing_bytes, hub));
  QVL_RETURN_IF_ERROR(download_files(jobs, o.parallel, hub, o.on_progress));
  QVL_RETURN_IF_ERROR(check_model_dir(dir, o.gguf_tag));
  return dir;
}

}  // namespace qvl::hub
