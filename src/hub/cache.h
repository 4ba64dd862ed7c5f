// Where the hubs' caches live (from the same environment variables their Python tools read) and the Hugging
// Face cache's layout: models--ORG--NAME/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>,
// refs/<revision>}, shared with transformers and huggingface-cli.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl::hub {

std::string env_or(const char* name, const std::string& fallback);

// $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
std::string default_hf_cache_dir();
// $MODELSCOPE_CACHE, else ~/.cache/modelscope/hub.
std::string default_modelscope_cache_dir();
// $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, else the file huggingface-cli login writes ($HF_TOKEN_PATH, $HF_HOME/token).
std::string default_hf_token();
// $HF_HUB_OFFLINE set to 1, ON, YES or TRUE (any case), as huggingface_hub reads it.
bool env_offline();

// "Org/Name" with non-empty parts and nothing that could leave the cache ("..", a third '/', odd characters).
bool is_valid_repo_id(const std::string& repo_id);

// A commit hash (40 lowercase hex digits) rather than a branch or tag.
bool is_commit_hash(const std::string& revision);

// The Hugging Face cache's folders and files of one model repository.
struct HfRepoCache {
  std::string cache_dir;  // the hub cache
  std::string repo_id;    // "Org/Name"

  std::string root() const;                                   // <cache>/models--Org--Name
  std::string blob(const std::string& etag) const;            // root/blobs/<etag>
  std::string incomplete(const std::string& etag) const;      // root/blobs/<etag>.incomplete
  std::string lock(const std::string& etag) const;            // <cache>/.locks/models--Org--Name/<etag>.lock
  std::string snapshot(const std::string& commit) const;      // root/snapshots/<commit>
  std::string ref(const std::string& revision) const;         // root/refs/<revision>

  // snapshots/<commit>/<file> as a relative symlink to ../../blobs/<etag> (one more ../ per folder in <file>).
  Status link(const std::string& commit, const std::string& file, const std::string& etag) const;
  Status write_ref(const std::string& revision, const std::string& commit) const;
  // The commit a revision names: the revision itself when it is a commit hash, else refs/<revision>.
  Result<std::string> read_ref(const std::string& revision) const;
};

// ModelScope's download folder: <cache>/models/<Org>/<Name>, with '.' in the name written as "___" as the
// ModelScope SDK does.
std::string modelscope_model_dir(const std::string& cache_dir, const std::string& repo_id);

// Free bytes on the file system holding `dir` (or its nearest existing parent); -1 when unknown.
int64_t free_bytes(const std::string& dir);

}  // namespace qvl::hub
