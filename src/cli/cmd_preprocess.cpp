// `qvl preprocess --model DIR --image FILE [--min-pixels N] [--max-pixels N] [--out FILE.npy]`: shows how
// the model sees an image (resized size, grid, token count) and can write its pixel_values.
#include <cstdio>

#include "cli/cli.h"
#include "io/image.h"
#include "io/npy.h"
#include "model/image_processor.h"

namespace qvl::cli {

int cmd_preprocess(const Args& args) {
  const std::string cmd = "preprocess";
  const char* usage = "usage: qvl preprocess --model DIR --image FILE [--min-pixels N] [--max-pixels N] [--out FILE.npy]";
  std::string model, image_path, out_path;
  PreprocessOptions opts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (a == "--model" || a == "--image" || a == "--out" || a == "--min-pixels" || a == "--max-pixels") {
      const std::string* v = value();
      if (!v) return fail(cmd, a + " needs a value (" + usage + ")");
      if (a == "--model") model = *v;
      else if (a == "--image") image_path = *v;
      else if (a == "--out") out_path = *v;
      else {
        auto n = parse_int(a, *v, 1, 1ll << 40);
        if (!n.ok()) return fail(cmd, n.status().message());
        (a == "--min-pixels" ? opts.min_pixels : opts.max_pixels) = *n;
      }
    } else {
      return fail(cmd, "unexpected argument '" + a + "' (" + usage + ")");
    }
  }
  if (model.empty()) return fail(cmd, "--model DIR is required (a directory with preprocessor_config.json)");
  if (image_path.empty()) return fail(cmd, "--image FILE is required");
  auto config = ImageProcessorConfig::load(model);
  if (!config.ok()) return fail(cmd, config.status().message());
  auto image = load_image_file(image_path);
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
