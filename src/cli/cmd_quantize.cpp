// `qvl quantize --model DIR --out DIR [--text-weights T] [--vision-weights T]`: converts a checkpoint once
// and writes a model directory that later starts by mapping the converted weights.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "model/gguf_export.h"
#include "model/quantize_file.h"

namespace qvl::cli {

int cmd_quantize(const Args& args) {
  CommandLine cli("quantize", "Converts a checkpoint's weights once and writes a model directory that starts by "
                              "mapping them.");
  std::string model_dir, out_dir, format = "qvl";
  WeightTypes types = default_weight_types();
  int threads = 0;  // Model::load: one per physical core
  add_model_option(cli, model_dir, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  std::string mmproj;
  add_mmproj_option(cli, mmproj);
  cli.add_option("--out", out_dir, "the model directory to write")->type_name("DIR")->required();
  GgufWriteTypes gguf_types;
  gguf_types.text = weight_type_name(*types.text);
  gguf_types.vision = weight_type_name(*types.vision);
  add_weight_options(cli, types, &gguf_types);
  cli.add_option("--format", format,
                 "qvl: a model directory qvl maps at start; gguf: llama.cpp's two Qwen3-VL GGUF files (text model + "
                 "mmproj), which qvl and other GGUF tools load")
      ->type_name("qvl|gguf")
      ->check(CLI::IsMember({"qvl", "gguf"}))
      ->default_str("qvl");
  add_thread_options(cli, threads);
  if (auto rc = cli.parse_args(args)) return *rc;
  {
    auto dir = find_model_dir(cli.command(), model_dir, true, revision);
    if (!dir.ok()) return fail(cli.command(), dir.status().message());
    model_dir = *dir;
  }

  const std::string& cmd = cli.command();
  const auto t0 = std::chrono::steady_clock::now();
  if (format != "gguf") {
    WeightType t;
    for (const std::string* n : {&gguf_types.text, &gguf_types.vision})
      if (!weight_type_from_name(*n, &t))
        return fail(cmd, "--text-weights/--vision-weights " + *n + " is a GGUF type; use it with --format gguf "
                         "(qvl's own files store f32, f16, bf16, q8_0 or q4_0)");
  }
  if (format == "gguf") {
    // Written from the stored float weights, quantized as qvl quantizes them at load.
    auto model = Model::load(model_dir, WeightTypes{}, threads, mmproj);
    if (!model.ok()) return fail(cmd, model.status().message());
    if (!(*model)->has_vision())
      return fail(cmd, model_dir + " has no vision file: quantize writes the whole model; pass --mmproj FILE (its mmproj-*.gguf)");
    std::string name = std::filesystem::path(model_dir).filename().string();
    if (name.empty()) name = std::filesystem::path(model_dir).parent_path().filename().string();
    auto path = write_gguf_model(**model, gguf_types, out_dir, name.empty() ? "model" : name);
    if (!path.ok()) return fail(cmd, path.status().message());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "quantize: wrote %s and its mmproj (text %s, vision %s) in %.1f s\n", path->c_str(),
                 gguf_types.text.c_str(), gguf_types.vision.c_str(), secs);
    return 0;
  }
  auto model = Model::load(model_dir, types, threads, mmproj);
  if (!model.ok()) return fail(cmd, model.status().message());
  if (!(*model)->has_vision())
    return fail(cmd, model_dir + " has no vision file: quantize writes the whole model; pass --mmproj FILE (its mmproj-*.gguf)");
  Status s = write_converted_model(**model, out_dir);
  if (!s.ok()) return fail(cmd, s.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "quantize: wrote %s (text %s, vision %s) in %.1f s\n", out_dir.c_str(),
               weight_type_name((*model)->text_weight_type()), weight_type_name((*model)->vision_weight_type()), secs);
  return 0;
}

}  // namespace qvl::cli
