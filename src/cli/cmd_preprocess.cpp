// `qvl preprocess --model DIR --image FILE [--min-pixels N] [--max-pixels N] [--out FILE.npy]`: shows how
// the model sees an image (resized size, grid, token count) and can write its pixel_values.
#include <algorithm>
#include <cstdio>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "io/image.h"
#include "io/npy.h"
#include "model/gguf_checkpoint.h"
#include "model/image_processor.h"
#include "model/model.h"

namespace qvl::cli {

int cmd_preprocess(const Args& args) {
  CommandLine cli("preprocess", "Shows how the model sees an image: resized size, grid_thw, image tokens, "
                                "pixel_values.");
  std::string model, image_path, out_path;
  PreprocessOptions opts;
  add_model_option(cli, model, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  add_image_option(cli, image_path)->required();
  add_image_size_options(cli, opts.min_pixels, opts.max_pixels);
  ImageDecodeLimits decode;
  add_image_page_option(cli, decode.page);
  cli.add_option("--out", out_path, "write pixel_values as float32 .npy")->type_name("FILE.npy");
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), opts.min_pixels, opts.max_pixels)) return *rc;
  {  // a hub id only from the cache: these commands read no weights
    auto dir = find_model_dir(cli.command(), model, /*download=*/false, revision);
    if (!dir.ok()) return fail(cli.command(), dir.status().message());
    model = *dir;
  }

  const std::string& cmd = cli.command();
  // A GGUF's processor settings are the files beside it or the family's, as run reads them (no weights).
  auto config = [&]() -> Result<ImageProcessorConfig> {
    if (!is_gguf_model(model)) return ImageProcessorConfig::load(model);
    QVL_ASSIGN_OR_RETURN(GgufFrontEnd front, load_gguf_front_end(model));
    return ImageProcessorConfig::load(front.files);
  }();
  if (!config.ok()) return fail(cmd, config.status().message());
  // --max-pixels alone bounds the model's min_pixels, as run and the server do (engine/generate.cpp).
  if (opts.min_pixels <= 0 && opts.max_pixels > 0) opts.min_pixels = std::min(config->min_pixels, opts.max_pixels);
  auto image = load_image_file(image_path, decode);
  if (!image.ok()) return fail(cmd, image.status().message());
  auto pre = preprocess_image(*image, *config, opts);
  if (!pre.ok()) return fail(cmd, image_path + ": " + pre.status().message());
  std::printf("image       %s\n", image_path.c_str());
  std::printf("input size  %dx%d\n", image->width, image->height);
  std::printf("resized     %dx%d\n", pre->resized.width, pre->resized.height);
  std::printf("grid_thw    [%d, %d, %d]\n", pre->grid_t, pre->grid_h, pre->grid_w);
  std::printf("tokens      %d\n", pre->num_tokens());
  std::printf("pixel_values [%d, %d]\n", pre->num_patches(), pre->patch_dim);
  if (!out_path.empty()) {
    Status s = write_npy(out_path, "<f4", {pre->num_patches(), pre->patch_dim}, pre->pixel_values.data(),
                         pre->pixel_values.size() * sizeof(float));
    if (!s.ok()) return fail(cmd, s.message());
    std::printf("wrote       %s\n", out_path.c_str());
  }
  return 0;
}

}  // namespace qvl::cli
