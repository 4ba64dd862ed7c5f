// Image preprocessing exactly as transformers' Qwen2VLImageProcessorFast for this checkpoint:
// smart_resize, antialiased bicubic resize (torch's uint8 kernel), rescale + normalise, temporal
// duplication and patchify into merge-window order.
#include "model/image_processor.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "model/processor_config.h"
#include "util/file.h"

namespace qvl {

Result<ImageProcessorConfig> ImageProcessorConfig::load(const std::string& path) {
  QVL_ASSIGN_OR_RETURN(ProcessorConfigJson in, read_processor_config(path, "preprocessor_config.json"));
  ImageProcessorConfig c;
  try {
    QVL_RETURN_IF_ERROR(read_shared_processor_fields(in, c));
    // The bounds at the top level (older files) are read after size.*, so they win.
    QVL_RETURN_IF_ERROR(read_int_field(in.json, "min_pixels", c.min_pixels, in.file));
    QVL_RETURN_IF_ERROR(read_int_field(in.json, "max_pixels", c.max_pixels, in.file));
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(in.file + ": unexpected field type: " + e.what());
  }
  if (!shared_processor_fields_valid(c))
    return Status::Error(in.file + ": patch_size, merge_size, temporal_patch_size and pixel bounds must be positive"
                                   " with min_pixels <= max_pixels");
  return c;
}

Result<ResizedSize> smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels, int64_t max_pixels) {
  if (height <= 0 || width <= 0)
    return Status::Error("image size " + std::to_string(width) + "x" + std::to_string(height) + " is empty");
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = factor;
  // if max(height, width) / min(height, width) > 200: raise ValueError
  if (std::max(h, w) / std::min(h, w) > 200)
    return Status::Error("image is " + std::to_string(width) + "x" + std::to_string(height) +
                         ": aspect ratio over 200:1, which the model cannot take (crop or pad it)");
  // h_bar = round(height / factor) * factor   (Python round: half to even; nearbyint in FE_TONEAREST)
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    // beta = math.sqrt((height * width) / max_pixels)
    const double beta = std::sqrt((h * w) / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    // beta = math.sqrt(min_pixels / (height * width))
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar > (1 << 20) || w_bar > (1 << 20))
    return Status::Error("resized size " + std::to_string(w_bar) + "x" + std::to_string(h_bar) + " is too large");
  return ResizedSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

namespace {

// Pillow's bicubic filter with a = -0.5 (torch HelperInterpCubic::aa_filter), evaluated in double.
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// One axis of the resampling: for output i, taps [start[i], start[i] + size[i]) of the input with fixed-point
// weights weights[i * taps + k] of `precision` fractional bits (int16 values for torch, int32 for Pillow).
struct Taps {
  std::vector<int> start, size;
  std::vector<int32_t> weights;
  int taps = 0;
  int precision = 0;
};

// torch's _compute_indices_weights_aa + _compute_indices_int16_weights_aa for align_corners = False; with
// `pil`, Pillow's precompute_coeffs + normalize_coeffs_8bpc (the same double weights, fixed at 22 bits).
Taps compute_taps(int in_size, int out_size, bool pil) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;  // interp_size 4 * 0.5
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(out_size);
  t.size.resize(out_size);
  std::vector<double> w(static_cast<size_t>(out_size) * t.taps, 0.0);
  for (int i = 0; i < out_size; ++i) {
    const double center = scale * (i + 0.5);
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    double total = 0.0;
    double* wi = &w[static_cast<size_t>(i) * t.taps];
    for (int64_t j = 0; j < xsize; ++j) {
      wi[j] = bicubic_filter((j + xmin - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < xsize; ++j) wi[j] /= total;
    t.start[i] = static_cast<int>(xmin);
    t.size[i] = static_cast<int>(xsize);
  }
  // torch: the largest precision (up to 22 bits) at which twice the largest weight still fits in int16.
  // Pillow: PRECISION_BITS = 32 - 8 - 2.
  double w_max = w[0];
  for (double v : w) w_max = std::max(w_max, v);
  int p = 0;
  for (; p < 22 && !pil; ++p) {
    if (static_cast<int>(0.5 + w_max * (1 << (p + 1))) >= (1 << 15)) break;
  }
  if (pil) p = 22;
  t.precision = p;
  t.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k)
    t.weights[k] = w[k] < 0 ? static_cast<int>(-0.5 + w[k] * (1 << p)) : static_cast<int>(0.5 + w[k] * (1 << p));
  return t;
}

uint8_t clip8(int32_t acc, int precision) {
  return static_cast<uint8_t>(std::clamp(acc >> precision, 0, 255));
}

}  // namespace

namespace {

// torch's float antialiased bicubic weights for one axis (_compute_weights_aa with scalar_t float): the scale,
// center, support and weights in float, the filter's argument formed in double (the 0.5 literals) and narrowed.
struct FloatTaps {
  std::vector<int> start, size;
  std::vector<float> weights;
  int taps = 0;
};

float bicubic_filter_f(float x) {
  constexpr float a = -0.5f;
  x = std::abs(x);
  if (x < 1.0f) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0f) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0f;
}

FloatTaps compute_float_taps(int in_size, int out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0f ? 2.0f * scale : 2.0f;
  const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  FloatTaps t;
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(out_size);
  t.size.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.taps, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const float center = static_cast<float>(static_cast<double>(scale) * (i + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
    const int64_t xsize =
        std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in_size) - xmin;
    float total = 0.0f;
    float* w = &t.weights[static_cast<size_t>(i) * t.taps];
    for (int64_t j = 0; j < xsize; ++j) {
      const float arg = static_cast<float>((static_cast<double>(static_cast<float>(j + xmin) - center) + 0.5) * invscale);
      w[j] = bicubic_filter_f(arg);
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    t.start[i] = static_cast<int>(xmin);
    t.size[i] = static_cast<int>(xsize);
  }
  return t;
}

}  // namespace

ImageRGB resize_bicubic_antialias_float(const ImageRGB& src, int out_width, int out_height) {
  QVL_CHECK(out_width > 0 && out_height > 0 && src.width > 0 && src.height > 0);
  if (out_width == src.width && out_height == src.height) return src;
  // Width pass, then height pass, both in float (the uint8 source read in place, values cast as read: no float
  // copy of the full-size frame); then clamp and round.
  int w = src.width, h = src.height;
  std::vector<float> cur;  // [h][w][3] after the width pass (empty: the source itself)
  if (out_width != w) {
    const FloatTaps t = compute_float_taps(w, out_width);
    cur.resize(static_cast<size_t>(out_width) * h * 3);
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = &src.pixels[static_cast<size_t>(y) * w * 3];
      float* out = &cur[static_cast<size_t>(y) * out_width * 3];
      for (int x = 0; x < out_width; ++x) {
        const float* k = &t.weights[static_cast<size_t>(x) * t.taps];
        for (int c = 0; c < 3; ++c) {
          float acc = static_cast<float>(row[t.start[x] * 3 + c]) * k[0];
          for (int j = 1; j < t.size[x]; ++j) acc += static_cast<float>(row[(t.start[x] + j) * 3 + c]) * k[j];
          out[x * 3 + c] = acc;
        }
      }
    }
    w = out_width;
  }
  const size_t stride = static_cast<size_t>(w) * 3;
  auto at = [&](size_t i) { return cur.empty() ? static_cast<float>(src.pixels[i]) : cur[i]; };
  if (out_height != h) {
    const FloatTaps t = compute_float_taps(h, out_height);
    std::vector<float> next(stride * out_height);
    for (int y = 0; y < out_height; ++y) {
      const float* k = &t.weights[static_cast<size_t>(y) * t.taps];
      float* out = &next[static_cast<size_t>(y) * stride];
      for (size_t i = 0; i < stride; ++i) {
        float acc = at(static_cast<size_t>(t.start[y]) * stride + i) * k[0];
        for (int j = 1; j < t.size[y]; ++j) acc += at(static_cast<size_t>(t.start[y] + j) * stride + i) * k[j];
        out[i] = acc;
      }
    }
    cur.swap(next);
    h = out_height;
  }
  ImageRGB out{w, h, std::vector<uint8_t>(cur.size())};
  for (size_t i = 0; i < cur.size(); ++i)
    out.pixels[i] = static_cast<uint8_t>(std::nearbyint(std::clamp(cur[i], 0.0f, 255.0f)));
  return out;
}

ImageRGB resize_bicubic_antialias(const ImageRGB& src, int out_width, int out_height, bool pil) {
  QVL_CHECK(out_width > 0 && out_height > 0 && src.width > 0 && src.height > 0);
  if (out_width == src.width && out_height == src.height) return src;
  // The passes read the source in place (no copy of a possibly 300 MB image); `horizontal` holds the first.
  ImageRGB horizontal;
  const ImageRGB* cur = &src;
  // Horizontal pass first, then vertical, each to uint8 — the order of torch's uint8 kernel.
  if (out_width != src.width) {
    const Taps t = compute_taps(src.width, out_width, pil);
    ImageRGB next{out_width, cur->height, std::vector<uint8_t>(static_cast<size_t>(out_width) * cur->height * 3)};
    for (int y = 0; y < cur->height; ++y) {
      const uint8_t* row = &cur->pixels[static_cast<size_t>(y) * cur->width * 3];
      uint8_t* out = &next.pixels[static_cast<size_t>(y) * out_width * 3];
      for (int x = 0; x < out_width; ++x) {
        const int32_t* k = &t.weights[static_cast<size_t>(x) * t.taps];
        for (int c = 0; c < 3; ++c) {
          int32_t acc = 1 << (t.precision - 1);
          for (int j = 0; j < t.size[x]; ++j) acc += row[(t.start[x] + j) * 3 + c] * k[j];
          out[x * 3 + c] = clip8(acc, t.precision);
        }
      }
    }
    horizontal = std::move(next);
    cur = &horizontal;
  }
  if (out_height != src.height) {
    const Taps t = compute_taps(src.height, out_height, pil);
    const size_t stride = static_cast<size_t>(cur->width) * 3;
    ImageRGB next{cur->width, out_height, std::vector<uint8_t>(stride * out_height)};
    std::vector<int32_t> acc(stride);
    for (int y = 0; y < out_height; ++y) {
      std::fill(acc.begin(), acc.end(), 1 << (t.precision - 1));
      const int32_t* k = &t.weights[static_cast<size_t>(y) * t.taps];
      for (int j = 0; j < t.size[y]; ++j) {
        const uint8_t* row = &cur->pixels[static_cast<size_t>(t.start[y] + j) * stride];
        for (size_t i = 0; i < stride; ++i) acc[i] += row[i] * k[j];
      }
      uint8_t* out = &next.pixels[static_cast<size_t>(y) * stride];
      for (size_t i = 0; i < stride; ++i) out[i] = clip8(acc[i], t.precision);
    }
    return next;
  }
  return horizontal;  // only the width changed
}

PreprocessedImage patchify(const ImageRGB& resized, const ImageProcessorConfig& config) {
  // One image = one frame, repeated temporal_patch_size times.
  std::vector<const ImageRGB*> frames(static_cast<size_t>(config.temporal_patch_size), &resized);
  return patchify_frames(frames, config);
}

PreprocessedImage patchify_frames(std::span<const ImageRGB* const> frames, const ImageProcessorConfig& config) {
  const int ps = config.patch_size, ms = config.merge_size, tp = config.temporal_patch_size;
  QVL_CHECK(static_cast<int>(frames.size()) == tp);
  const ImageRGB& resized = *frames[0];
  QVL_CHECK(resized.height % (ps * ms) == 0 && resized.width % (ps * ms) == 0);
  for (const ImageRGB* f : frames) QVL_CHECK(f->width == resized.width && f->height == resized.height);
  PreprocessedImage out;
  out.resized = {resized.height, resized.width};
  out.grid_t = 1;
  out.grid_h = resized.height / ps;
  out.grid_w = resized.width / ps;
  out.merge_size = ms;
  out.patch_dim = config.patch_dim();
  // Fused rescale + normalise: mean' = mean / rescale_factor, std' = std / rescale_factor (float32),
  // v = (x - mean') / std'.
  float mean[3], std_[3], lut[3][256];
  for (int c = 0; c < 3; ++c) {
    mean[c] = static_cast<float>(config.image_mean[c]) * static_cast<float>(1.0 / config.rescale_factor);
    std_[c] = static_cast<float>(config.image_std[c]) * static_cast<float>(1.0 / config.rescale_factor);
    for (int x = 0; x < 256; ++x) lut[c][x] = (static_cast<float>(x) - mean[c]) / std_[c];
  }
  // patches.view(grid_t, tp, C, gh/ms, ms, ps, gw/ms, ms, ps).permute(0, 3, 6, 4, 7, 2, 1, 5, 8):
  // row = ((bh * gw/ms + bw) * ms + mh) * ms + mw, column = ((c * tp + t) * ps + py) * ps + px.
  out.pixel_values.resize(static_cast<size_t>(out.num_patches()) * out.patch_dim);
  float* dst = out.pixel_values.data();
  const int bh_n = out.grid_h / ms, bw_n = out.grid_w / ms;
  for (int bh = 0; bh < bh_n; ++bh)
    for (int bw = 0; bw < bw_n; ++bw)
      for (int mh = 0; mh < ms; ++mh)
        for (int mw = 0; mw < ms; ++mw) {
          const int y0 = (bh * ms + mh) * ps, x0 = (bw * ms + mw) * ps;
          for (int c = 0; c < 3; ++c)
            for (int t = 0; t < tp; ++t)
              for (int py = 0; py < ps; ++py) {
                const uint8_t* src =
                    &frames[t]->pixels[(static_cast<size_t>(y0 + py) * resized.width + x0) * 3 + c];
                for (int px = 0; px < ps; ++px) *dst++ = lut[c][src[px * 3]];
              }
        }
  return out;
}

Result<ResizedSize> preprocess_size(const ImageRGB& image, const ImageProcessorConfig& config,
                                    const PreprocessOptions& options) {
  const int64_t min_px = options.min_pixels > 0 ? options.min_pixels : config.min_pixels;
  const int64_t max_px = options.max_pixels > 0 ? options.max_pixels : config.max_pixels;
  if (min_px > max_px)
    return Status::Error("min_pixels " + std::to_string(min_px) + " is larger than max_pixels " + std::to_string(max_px));
  if ((options.resized_height > 0) != (options.resized_width > 0))
    return Status::Error("resized_height and resized_width go together; got only one");
  if (options.resized_height > (int64_t{1} << 16) || options.resized_width > (int64_t{1} << 16))
    return Status::Error("resized_height and resized_width must be at most 65536, got " +
                         std::to_string(options.resized_height) + "x" + std::to_string(options.resized_width));
  // qwen-vl-utils: smart_resize of the size asked for, with its own floor of 4 tokens' pixels instead of the
  // processor's min_pixels (its images then go to the processor with do_resize=False); max_pixels bounds it.
  if (options.resized_height > 0) {
    const int64_t floor_px = std::min<int64_t>(int64_t{4} * config.factor() * config.factor(), max_px);
    return smart_resize(options.resized_height, options.resized_width, config.factor(), floor_px, max_px);
  }
  return smart_resize(image.height, image.width, config.factor(), min_px, max_px);
}

Result<PreprocessedImage> preprocess_image(const ImageRGB& image, const ImageProcessorConfig& config,
                                           const PreprocessOptions& options) {
  QVL_ASSIGN_OR_RETURN(ResizedSize size, preprocess_size(image, config, options));
  return patchify(resize_bicubic_antialias(image, size.width, size.height, options.pil_resize), config);
}

}  // namespace qvl
