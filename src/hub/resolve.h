// Finds the model directory a `--model M` argument means, for every command: a directory, or a hub id
// (Org/Name, hf:Org/Name, modelscope:Org/Name) found complete in that hub's local cache, or else downloaded
// into it (qvl::hub::pull) unless offline.
#pragma once

#include <functional>
#include <string>

#include "hub/hub.h"
#include "util/status.h"

namespace qvl {

struct LocatedModel {
  std::string dir;  // holds config.json
  std::string id;   // the name clients see: the hub id, or the directory's name
};

struct ResolveOptions {
  std::string revision;    // hub ids: branch, tag or commit (empty: the hub's default branch)
  std::string hub_cache;   // hub ids: the cache to use (empty: from the environment, as the hub's tools do)
  bool download = true;    // false: a hub id must already be in the cache
  std::function<void(const hub::Progress&)> on_progress;  // while downloading
  std::function<void(const std::string&)> on_warning;
};

// The directory's own name for a directory holding config.json; for a hub id its complete cached snapshot,
// else the download's. A model found nowhere gets one message saying where qvl looked and what to do.
Result<LocatedModel> resolve_model(const std::string& spec, const ResolveOptions& options = {});

}  // namespace qvl
