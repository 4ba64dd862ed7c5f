// One request end to end: images preprocessed and encoded, the prompt built and prefilled, then tokens
// sampled one step at a time and streamed as text until an end token, a stop string or the limit.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/prompt.h"
#include "engine/stop.h"
#include "model/mrope.h"
#include "model/text.h"
#include "model/vision.h"

namespace qvl {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images, const GenerateOptions& options,
                                const GenerateCallbacks& cb) {
  QVL_RETURN_IF_ERROR(options.sampling.validate());
  if (options.max_tokens < 0) return Status::Error("max_tokens must be >= 0, got " + std::to_string(options.max_tokens));
  const ModelConfig& cfg = model.config();
  const Tokenizer& tok = model.tokenizer();
  GenerateResult result;
  GenerateTimings& tm = result.timings;
  const auto t_start = Clock::now();
  auto phase = [&](const char* p) {
    if (cb.progress) cb.progress(p);
  };

  // Images -> pixel_values and their token counts.
  phase("preprocess");
  auto t0 = Clock::now();
  std::vector<PreprocessedImage> pre;
  std::vector<int> image_tokens;
  std::vector<GridTHW> grids;
  for (size_t k = 0; k < images.size(); ++k) {
    auto p = preprocess_image(images[k], model.image_config(), options.image);
    if (!p.ok()) return p.status().with_context("image " + std::to_string(k + 1));
    image_tokens.push_back(p->num_tokens());
    grids.push_back({p->grid_t, p->grid_h, p->grid_w});
    tm.image_tokens += p->num_tokens();
    pre.push_back(std::move(p).value());
  }
  tm.preprocess_ms = ms_since(t0);

  // The prompt: chat format -> ids (image pads expanded) -> 3-D positions.
  const RenderedChat chat = render_chat_with_spans(messages, options.chat);
  QVL_ASSIGN_OR_RETURN(std::vector<int32_t> ids, build_prompt_ids(tok, chat, image_tokens));
  VisionTokenIds vt{cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id};
  QVL_ASSIGN_OR_RETURN(MRopePositions pos, get_rope_index(ids, grids, {}, cfg.vision.spatial_merge_size, vt));
  const int64_t n_prompt = static_cast<int64_t>(ids.size());
  tm.prompt_tokens = static_cast<int>(n_prompt);
  if (n_prompt == 0) return Status::Error("the prompt is empty");
  if (n_prompt >= options.context)
    return Status::Error("the prompt has " + std::to_string(n_prompt) + " tokens, over the context of " +
                         std::to_string(options.context) + "; shorten it, use smaller images (max_pixels) or a "
                         "larger context");
  const int64_t max_new = std::min<int64_t>(options.max_tokens, options.context - n_prompt);

  // Vision tower.
  VisionOutput vis;
  VisualInputs visual;
  if (!pre.empty()) {
    phase("vision");
    t0 = Clock::now();
    std::vector<const PreprocessedImage*> ptrs;
    for (const auto& p : pre) ptrs.push_back(&p);
    vis = encode_images(model, pool, ptrs, cb.dump);
    tm.vision_ms = ms_since(t0);
    visual.embeds = vis.embeds.data();
    visual.n_visual = vis.n_tokens;
    for (const auto& d : vis.deepstack) visual.deepstack.push_back(d.data());
  }

  // Prefill.
  phase("prefill");
  t0 = Clock::now();
  KVCache cache(cfg.text, options.context);
  const int64_t vocab = cfg.text.vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  const int32_t* p3[3] = {pos.pos[0].data(), pos.pos[1].data(), pos.pos[2].data()};
  text_forward(model, pool, cache, ids.data(), n_prompt, p3, pre.empty() ? nullptr : &visual, LogitsMode::kLast,
               logits.data(), cb.dump);
  tm.prefill_ms = ms_since(t0);

  // Decode.
  phase("decode");
  t0 = Clock::now();
  Sampler sampler(options.sampling);
  sampler.reset(ids);
  TokenStreamDecoder detok(tok, /*skip_special=*/true);
  StopChecker stops(options.stop);
  const int32_t eos[2] = {tok.token_id("<|im_end|>"), tok.token_id("<|endoftext|>")};
  result.finish = FinishReason::kLength;
  auto emit = [&](std::string_view piece) {
    if (piece.empty()) return true;
    result.text.append(piece);
    return !cb.on_text || cb.on_text(piece);
  };
  bool stopped = false;
  for (int64_t step = 0; step < max_new && !stopped; ++step) {
    const int32_t token = sampler.sample(logits.data(), static_cast<int>(vocab));
    if (step == 0) tm.ttft_ms = ms_since(t_start);
    if (!options.ignore_eos && (token == eos[0] || token == eos[1])) {
      result.finish = FinishReason::kStop;
      break;
    }
    sampler.accept(token);
    result.tokens.push_back(token);
    ++tm.generated_tokens;
    StopChecker::Emit sr = stops.push(detok.push(token));
    if (!emit(sr.text)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (sr.stopped) {
      result.finish = FinishReason::kStop;
      stopped = true;
      break;
    }
    if (step + 1 == max_new) break;
    // The next token sits at cache index c with position c + rope_delta on all three axes.
    const int32_t p = static_cast<int32_t>(cache.length() + pos.rope_delta);
    const int32_t* one[3] = {&p, &p, &p};
    text_forward(model, pool, cache, &token, 1, one, nullptr, LogitsMode::kLast, logits.data());
  }
  if (!stopped && result.finish != FinishReason::kCancelled) {
    StopChecker::Emit sr = stops.push(detok.flush());
    std::string rest = sr.text;
    if (!sr.stopped) rest += stops.flush();
    emit(rest);
  }
  tm.decode_ms = ms_since(t0);
  return result;
}

}  // namespace qvl
