// Downloads a model's files from the Hugging Face hub or ModelScope into that hub's own cache layout, and finds
// a complete download there without the network: the API `qvl pull` and the model loaders use.
#include "hub/hub.h"

#include <algorithm>

#include <filesystem>

#include "hub/cache.h"
#include "hub/files.h"
#include "hub/sources.h"

namespace qvl::hub {

namespace {

std::string strip_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

Status check_options(const PullOptions& o) {
  if (!is_valid_repo_id(o.repo_id)) {
    return Status::Error("model id '" + o.repo_id + "' is not ORG/NAME; expected e.g. Qwen/Qwen3-VL-2B-Instruct "
                         "(letters, digits, '-', '_', '.')");
  }
  return check_revision(o.revision);
}

}  // namespace

Status check_revision(const std::string& r) {
  const bool bad_char = std::any_of(r.begin(), r.end(), [](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || c == 0x7F || c == '\\';
  });
  if (r.empty() || r.size() > 255 || bad_char || r.find("..") != std::string::npos || r[0] == '/')
    return Status::Error("revision '" + r.substr(0, 80) + "' is not a branch, tag or commit hash");
  return Status::Ok();
}

const char* source_name(Source s) { return s == Source::kModelScope ? "ModelScope" : "Hugging Face"; }

std::pair<std::string, std::string> split_gguf_tag(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon + 1 >= spec.size() || spec.substr(0, colon).find('/') == std::string::npos)
    return {spec, ""};
  const std::string t = spec.substr(colon + 1);
  if (t.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != std::string::npos)
    return {spec, ""};
  return {spec.substr(0, colon), t};
}

Result<std::pair<Source, std::string>> parse_model_spec(const std::string& spec) {
  Source source = Source::kHuggingFace;
  std::string id = spec;
  const size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    const std::string prefix = spec.substr(0, colon);
    id = spec.substr(colon + 1);
    if (prefix == "modelscope" || prefix == "ms") {
      source = Source::kModelScope;
    } else if (prefix != "hf" && prefix != "huggingface") {
      return Status::Error("model '" + spec + "': unknown source '" + prefix +
                           ":'; expected hf:ORG/NAME, modelscope:ORG/NAME or ORG/NAME (Hugging Face)");
    }
  }
  if (!is_valid_repo_id(id)) {
    return Status::Error("model '" + spec + "' is not a hub id; expected ORG/NAME such as Qwen/Qwen3-VL-2B-Instruct, "
                         "optionally prefixed by hf: or modelscope:");
  }
  return std::make_pair(source, id);
}

PullOptions resolve_options(const PullOptions& in) {
  PullOptions o = in;
  const bool ms = o.source == Source::kModelScope;
  if (o.revision.empty()) o.revision = ms ? "master" : "main";
  if (o.endpoint.empty()) {
    if (ms) {
      o.endpoint = env_or("MODELSCOPE_ENDPOINT", "");
      // The SDK builds its endpoint from MODELSCOPE_DOMAIN (a host name) when set.
      if (o.endpoint.empty() && !env_or("MODELSCOPE_DOMAIN", "").empty()) {
        o.endpoint = "https://" + env_or("MODELSCOPE_DOMAIN", "");
      }
      if (o.endpoint.empty()) o.endpoint = "https://www.modelscope.cn";
    } else {
      o.endpoint = env_or("HF_ENDPOINT", "https://huggingface.co");
    }
  }
  o.endpoint = strip_slash(o.endpoint);
  if (o.token.empty()) o.token = ms ? env_or("MODELSCOPE_API_TOKEN", "") : default_hf_token();
  if (o.cache_dir.empty()) o.cache_dir = ms ? default_modelscope_cache_dir() : default_hf_cache_dir();
  o.cache_dir = strip_slash(o.cache_dir);
  if (o.offline < 0) o.offline = env_offline() ? 1 : 0;
  return o;
}

Result<std::string> find_cached(const PullOptions& in) {
  const PullOptions o = resolve_options(in);
  QVL_RETURN_IF_ERROR(check_options(o));
  std::string dir;
  if (o.source == Source::kModelScope) {
    if (o.revision != "master")  // the default branch is what the cache holds unless a pull said otherwise
      return Status::Error(o.repo_id + " (revision " + o.revision + ") cannot be taken from the ModelScope cache " +
                           o.cache_dir + " as it is: the cache keeps no record of its files' revision (pull checks them "
                           "against that revision's listing)");
    dir = modelscope_model_dir(o.cache_dir, o.repo_id);
  } else {
    const HfRepoCache cache{o.cache_dir, o.repo_id};
    auto commit = cache.read_ref(o.revision);
    if (!commit.ok()) {
      return Status::Error(o.repo_id + " (revision " + o.revision + ") is not in the Hugging Face cache " +
                           o.cache_dir + ": no " + cache.ref(o.revision));
    }
    dir = cache.snapshot(*commit);
  }
  if (Status s = check_model_dir(dir, o.gguf_tag); !s.ok()) {
    return Status::Error(o.repo_id + " is not completely in the " + source_name(o.source) + " cache: " + s.message());
  }
  return dir;
}

Result<std::string> pull(const PullOptions& in) {
  const PullOptions o = resolve_options(in);
  QVL_RETURN_IF_ERROR(check_options(o));
  if (o.offline) {
    auto cached = find_cached(o);
    if (cached.ok()) return cached;
    return Status::Error(cached.status().message() + "; HF_HUB_OFFLINE is set, so qvl does not connect to " +
                         source_name(o.source) + " and uses only the cache: unset HF_HUB_OFFLINE to download it, "
                         "or pass --model DIR");
  }
  auto dir = o.source == Source::kModelScope ? pull_modelscope(o) : pull_huggingface(o);
  if (dir.ok()) return dir;
  // As huggingface_hub does: when the hub cannot be reached, a complete cached snapshot still serves.
  if (dir.status().message().rfind("cannot reach ", 0) == 0) {
    if (auto cached = find_cached(o); cached.ok()) {
      if (o.on_warning) o.on_warning(dir.status().message() + "; using the cached copy " + *cached);
      return cached;
    }
  }
  return dir;
}

}  // namespace qvl::hub
