// `qvl quantize --model DIR --out DIR [--text-weights T] [--vision-weights T]`: converts a checkpoint once
// and writes a model directory that later starts by mapping the converted weights.
#include <chrono>
#include <cstdio>

#include "cli/cli.h"
#include "model/quantize_file.h"

namespace qvl::cli {

int cmd_quantize(const Args& args) {
  const std::string cmd = "quantize";
  const char* usage = "usage: qvl quantize --model DIR --out DIR [--text-weights T] [--vision-weights T] [--threads N]";
  std::string model_dir, out_dir;
  WeightTypes types = default_weight_types();
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i + 1 >= args.size()) return fail(cmd, "unexpected or incomplete argument '" + a + "'\n" + usage);
    const std::string& v = args[++i];
    if (a == "--model") model_dir = v;
    else if (a == "--out") out_dir = v;
    else if (a == "--threads") {
      auto n = parse_int(a, v, 1, 1024);
      if (!n.ok()) return fail(cmd, n.status().message());
      threads = static_cast<int>(*n);
    } else if (a == "--text-weights" || a == "--vision-weights") {
      WeightType t;
      if (!weight_type_from_name(v, &t)) return fail(cmd, a + ": unknown type '" + v + "' (f32, f16, bf16, q8_0, q4_0)");
      (a == "--text-weights" ? types.text : types.vision) = t;
    } else {
      return fail(cmd, "unexpected argument '" + a + "'\n" + usage);
    }
  }
  if (model_dir.empty() || out_dir.empty()) return fail(cmd, std::string("--model and --out are required\n") + usage);
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Model::load(model_dir, types, threads);
  if (!model.ok()) return fail(cmd, model.status().message());
  Status s = write_converted_model(**model, out_dir);
  if (!s.ok()) return fail(cmd, s.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "quantize: wrote %s (text %s, vision %s) in %.1f s\n", out_dir.c_str(),
               weight_type_name((*model)->text_weight_type()), weight_type_name((*model)->vision_weight_type()), secs);
  return 0;
}

}  // namespace qvl::cli
