// Resolves a command's --model argument (directory or hub id), showing a download's progress on stderr.
#include "cli/model_arg.h"

#include <cstdio>

#include "cli/progress_bar.h"
#include "hub/resolve.h"

namespace qvl::cli {

Result<std::string> find_model_dir(const std::string& command, const std::string& spec, bool download,
                                   const std::string& revision) {
  ProgressBar bar(stderr, command);
  bool shown = false;
  ResolveOptions o;
  o.download = download;
  o.revision = revision;
  o.on_progress = [&](const hub::Progress& p) {
    if (!shown) std::fprintf(stderr, "qvl %s: downloading %s ...\n", command.c_str(), spec.c_str());
    shown = true;
    bar.update(p);
  };
  o.on_warning = [&](const std::string& w) { std::fprintf(stderr, "qvl %s: warning: %s\n", command.c_str(), w.c_str()); };
  auto located = resolve_model(spec, o);
  if (shown) bar.finish();
  if (!located.ok()) return located.status();
  return located->dir;
}

}  // namespace qvl::cli
