// `qvl make-test-model --preset tiny|2b|... --seed N --out DIR`: writes a model directory with random weights.
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "cli/options.h"
#include "model/bundled_files.h"
#include "model/test_model.h"

namespace qvl::cli {

int cmd_make_test_model(const Args& args) {
  CommandLine cli("make-test-model", "Writes a complete model directory with deterministic generated weights "
                                     "(2b, 4b, 8b: the real shapes of each size; tiny, tiny-4b, tiny-8b: small widths "
                                     "that keep each size's structure).");
  TestModelOptions opt;
  long long seed = static_cast<long long>(opt.seed);
  cli.add_option("--preset", opt.preset, "the shapes: " + test_model_presets())
      ->type_name("NAME")
      ->check([](const std::string& s) {
        return is_test_model_preset(s) ? std::string() : "must be " + test_model_presets() + ", got '" + s + "'";
      })
      ->default_str(opt.preset);
  cli.add_option("--out", opt.out_dir, "the directory to write (created if missing)")->type_name("DIR")->required();
  cli.add_option("--seed", seed, "the weights' seed")
      ->type_name("N")
      ->check(integer_in(0, INT64_MAX))
      ->default_str(std::to_string(opt.seed));
  add_model_files_option(cli, opt.model_files_dir);
  add_thread_options(cli, opt.threads);
  if (auto rc = cli.parse_args(args)) return *rc;
  opt.seed = static_cast<uint64_t>(seed);

  const std::string& cmd = cli.command();
  if (opt.model_files_dir.empty()) opt.model_files_dir = bundled_model_files();
  opt.progress = opt.preset.rfind("2b", 0) == 0 || opt.preset.rfind("4b", 0) == 0 || opt.preset.rfind("8b", 0) == 0;

  const auto start = std::chrono::steady_clock::now();
  Status st = make_test_model(opt);
  if (!st.ok()) return fail(cmd, st.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "make-test-model: wrote the %s model (seed %llu) to %s in %.1f s\n", opt.preset.c_str(),
               static_cast<unsigned long long>(opt.seed), opt.out_dir.c_str(), secs);
  return 0;
}

}  // namespace qvl::cli
