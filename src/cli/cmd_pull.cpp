// `qvl pull MODEL`: downloads a model from the Hugging Face hub or ModelScope into that hub's cache, with a
// progress bar, and prints the local model directory.
#include <cstdio>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/progress_bar.h"
#include "hub/hub.h"

namespace qvl::cli {

int cmd_pull(const Args& args) {
  CommandLine cli("pull", "Downloads a model from the Hugging Face hub or ModelScope into that hub's own cache (only "
                          "the files qvl needs; resumed if interrupted; every file verified) and prints its directory. "
                          "Environment: HF_ENDPOINT (a mirror), HF_TOKEN, HF_HUB_OFFLINE, HF_HOME/HF_HUB_CACHE, "
                          "MODELSCOPE_ENDPOINT, MODELSCOPE_API_TOKEN, MODELSCOPE_CACHE.");
  hub::PullOptions o;
  std::string spec, source;
  cli.add_option("MODEL", spec, "ORG/NAME (Hugging Face), hf:ORG/NAME or modelscope:ORG/NAME; a GGUF repository with its "
                                "quantization: ORG/NAME:Q4_K_M")->required();
  cli.add_option("--revision", o.revision, "branch, tag or commit")->type_name("R")
      ->default_str("main on Hugging Face, master on ModelScope");
  cli.add_option("--source", source, "hf or modelscope (overrides a prefix in MODEL)")
      ->type_name("S")->check(CLI::IsMember({"hf", "huggingface", "modelscope", "ms"}));
  cli.add_option("--cache-dir", o.cache_dir, "the hub cache")->type_name("DIR")
      ->default_str("$HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub; ModelScope: $MODELSCOPE_CACHE or "
                    "~/.cache/modelscope/hub");
  cli.add_option("--parallel", o.parallel, "files downloaded at once")->type_name("N")->check(integer_in(1, 32))
      ->default_str(std::to_string(o.parallel));
  if (auto rc = cli.parse_args(args)) return *rc;
  const std::string& cmd = cli.command();
  const auto [id_spec, tag] = hub::split_gguf_tag(spec);
  o.gguf_tag = tag;
  auto parsed = hub::parse_model_spec(id_spec);
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
