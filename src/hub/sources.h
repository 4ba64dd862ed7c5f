// The two hubs' download protocols behind hub::pull(): each lists the repository, picks qvl's files and downloads
// them into that hub's cache layout. Options arrive resolved (endpoint, cache, token filled in).
#pragma once

#include <string>

#include "hub/hub.h"
#include "util/status.h"

namespace qvl::hub {

// Hugging Face: /api/models/{repo}/revision/{rev}?blobs=true, then HEAD and GET of /{repo}/resolve/{commit}/{file}
// into <cache>/models--ORG--NAME. Returns the snapshot directory.
Result<std::string> pull_huggingface(const PullOptions& options);

// ModelScope: /api/v1/models/{repo}/repo/files, then /api/v1/models/{repo}/repo?FilePath=... into
// <cache>/models/ORG/NAME. Returns that directory.
Result<std::string> pull_modelscope(const PullOptions& options);

}  // namespace qvl::hub
