// `qvl pull MODEL`: downloads a model from the Hugging Face hub or ModelScope into that hub's cache, with a
// progress bar, and prints the local model directory.
#include <cstdio>

#include "cli/cli.h"
#include "cli/progress_bar.h"
#include "model/hub.h"

namespace qvl::cli {

namespace {

const char kPullUsage[] =
    "usage: qvl pull MODEL [--revision R] [--source hf|modelscope] [--cache-dir DIR] [--parallel N]\n"
    "  MODEL                 ORG/NAME (Hugging Face), hf:ORG/NAME or modelscope:ORG/NAME\n"
    "  --revision R          branch, tag or commit (default: main on Hugging Face, master on ModelScope)\n"
    "  --source S            hf or modelscope (overrides a prefix in MODEL)\n"
    "  --cache-dir DIR       the hub cache (default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub;\n"
    "                        ModelScope: $MODELSCOPE_CACHE or ~/.cache/modelscope/hub)\n"
    "  --parallel N          files downloaded at once (default 4)\n"
    "environment: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, MODELSCOPE_ENDPOINT, MODELSCOPE_API_TOKEN\n"
    "prints the model directory on stdout; progress goes to stderr";

}  // namespace

int cmd_pull(const Args& args) {
  const std::string cmd = "pull";
  hub::PullOptions o;
  std::string spec, source;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::puts(kPullUsage);
      return 0;
    }
    if (a == "--revision" || a == "--source" || a == "--cache-dir" || a == "--parallel") {
      if (i + 1 >= args.size()) return fail(cmd, a + " needs a value\n" + kPullUsage);
      const std::string& v = args[++i];
      if (a == "--revision") o.revision = v;
      if (a == "--source") source = v;
      if (a == "--cache-dir") o.cache_dir = v;
      if (a == "--parallel") {
        auto n = parse_int("--parallel", v, 1, 32);
        if (!n.ok()) return fail(cmd, n.status().message());
        o.parallel = static_cast<int>(*n);
      }
    } else if (!a.empty() && a[0] == '-') {
      return fail(cmd, "unknown option " + a + "\n" + kPullUsage);
    } else if (spec.empty()) {
      spec = a;
    } else {
      return fail(cmd, "one MODEL expected, got '" + spec + "' and '" + a + "'\n" + kPullUsage);
    }
  }
  if (spec.empty()) return fail(cmd, std::string("MODEL is required\n") + kPullUsage);
  auto parsed = hub::parse_model_spec(spec);
  if (!parsed.ok()) return fail(cmd, parsed.status().message());
  o.source = parsed->first;
  o.repo_id = parsed->second;
  if (source == "hf" || source == "huggingface") {
    o.source = hub::Source::kHuggingFace;
  } else if (source == "modelscope" || source == "ms") {
    o.source = hub::Source::kModelScope;
  } else if (!source.empty()) {
    return fail(cmd, "--source must be hf or modelscope, got '" + source + "'");
  }

  ProgressBar bar(stderr, "pull");
  o.on_progress = [&bar](const hub::Progress& p) { bar.update(p); };
  o.on_warning = [](const std::string& w) { std::fprintf(stderr, "qvl pull: warning: %s\n", w.c_str()); };
  const hub::PullOptions resolved = hub::resolve_options(o);
  std::fprintf(stderr, "qvl pull: %s from %s (%s, revision %s) into %s\n", o.repo_id.c_str(),
               hub::source_name(o.source), resolved.endpoint.c_str(), resolved.revision.c_str(),
               resolved.cache_dir.c_str());
  auto dir = hub::pull(o);
  bar.finish();
  if (!dir.ok()) return fail(cmd, dir.status().message());
  std::printf("%s\n", dir->c_str());
  return 0;
}

}  // namespace qvl::cli
