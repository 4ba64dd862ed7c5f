// One request end to end on a fresh Session: start, then step until done, streaming the text.
#include "engine/generate.h"

#include "engine/session.h"

#include <algorithm>

namespace qvl {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

PreprocessOptions image_options(const GenerateOptions& options, size_t k, const ImageProcessorConfig& config) {
  const int64_t gmax = options.image.max_pixels > 0 ? options.image.max_pixels : config.max_pixels;
  const int64_t gmin = std::min(options.image.min_pixels > 0 ? options.image.min_pixels : config.min_pixels, gmax);
  PreprocessOptions out;
  out.min_pixels = gmin;
  out.max_pixels = gmax;
  out.pil_resize = options.image.pil_resize;
  if (k >= options.per_image.size()) return out;
  const PreprocessOptions& p = options.per_image[k];
  if (p.max_pixels == 0) {  // detail "low"
    out.max_pixels = gmin;
  } else if (p.max_pixels > 0) {
    out.max_pixels = std::min(p.max_pixels, gmax);
  }
  out.min_pixels = std::min(p.min_pixels > 0 ? p.min_pixels : gmin, out.max_pixels);
  out.resized_height = p.resized_height;
  out.resized_width = p.resized_width;
  return out;
}

Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images, const GenerateOptions& options,
                                const GenerateCallbacks& cb) {
  return generate(model, pool, messages, images, {}, options, cb);
}

Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images,
                                const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos,
                                const GenerateOptions& options, const GenerateCallbacks& cb) {
  Session session(model);
  QVL_RETURN_IF_ERROR(session.start(pool, messages, images, videos, options, cb));
  if (cb.progress) cb.progress("decode");
  while (!session.done()) {
    Session::Step s = session.step(pool);
    if (!s.text.empty() && cb.on_text && !cb.on_text(s.text)) session.cancel();
  }
  return session.result();
}

}  // namespace qvl
