// `qvl make-test-model --preset tiny|2b --seed N --out DIR`: writes a model directory with random weights.
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "cli/cli.h"
#include "model/bundled_files.h"
#include "model/test_model.h"

namespace qvl::cli {

int cmd_make_test_model(const std::vector<std::string>& args);

int cmd_make_test_model(const std::vector<std::string>& args) {
  const std::string cmd = "make-test-model";
  const std::string usage =
      "usage: qvl make-test-model --preset tiny|2b --out DIR [--seed N] [--model-files DIR] [--threads N]";
  TestModelOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return ++i < args.size() ? &args[i] : nullptr; };
    const std::string* v = nullptr;
    if (a == "--preset" || a == "--out" || a == "--seed" || a == "--model-files" || a == "--threads") {
      if (!(v = value())) return fail(cmd, a + " needs a value (" + usage + ")");
    } else {
      return fail(cmd, "unknown argument " + a + " (" + usage + ")");
    }
    if (a == "--preset") {
      opt.preset = *v;
      if (opt.preset != "tiny" && opt.preset != "2b") return fail(cmd, "--preset must be tiny or 2b, got '" + *v + "'");
    } else if (a == "--out") {
      opt.out_dir = *v;
    } else if (a == "--model-files") {
      opt.model_files_dir = *v;
    } else if (a == "--seed") {
      auto n = parse_int("--seed", *v, 0, INT64_MAX);
      if (!n.ok()) return fail(cmd, n.status().message());
      opt.seed = static_cast<uint64_t>(*n);
    } else if (a == "--threads") {
      auto n = parse_int("--threads", *v, 1, 1024);
      if (!n.ok()) return fail(cmd, n.status().message());
      opt.threads = static_cast<int>(*n);
    }
  }
  if (opt.out_dir.empty()) return fail(cmd, "--out DIR is required (" + usage + ")");
  if (opt.model_files_dir.empty()) {
    auto files = bundled_model_files_dir();
    if (!files.ok()) return fail(cmd, files.status().message());
    opt.model_files_dir = *files;
  }
  opt.progress = opt.preset == "2b";

  const auto start = std::chrono::steady_clock::now();
  Status st = make_test_model(opt);
  if (!st.ok()) return fail(cmd, st.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "make-test-model: wrote the %s model (seed %llu) to %s in %.1f s\n", opt.preset.c_str(),
               static_cast<unsigned long long>(opt.seed), opt.out_dir.c_str(), secs);
  return 0;
}

}  // namespace qvl::cli
