// One conversation's mutable state: its KV cache, sampler and text streaming. start() encodes the images
// and prefills the prompt; step() produces one token at a time, so a scheduler can interleave sessions.
#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "engine/prompt.h"
#include "model/vision.h"

namespace qvl {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Status Session::start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                      const GenerateOptions& options, const GenerateCallbacks& cb) {
  done_ = true;
  result_ = GenerateResult{};
  options_ = options;
  QVL_RETURN_IF_ERROR(options.sampling.validate());
  if (options.max_tokens < 0) return Status::Error("max_tokens must be >= 0, got " + std::to_string(options.max_tokens));
  const ModelConfig& cfg = model_.config();
  const Tokenizer& tok = model_.tokenizer();
  GenerateTimings& tm = result_.timings;
  start_ms_ = now_ms();
  auto phase = [&](const char* p) {
    if (cb.progress) cb.progress(p);
  };

  // Images -> pixel_values and their token counts.
  phase("preprocess");
  double t0 = now_ms();
  std::vector<PreprocessedImage> pre;
  std::vector<int> image_tokens;
  std::vector<GridTHW> grids;
  for (size_t k = 0; k < images.size(); ++k) {
    auto p = preprocess_image(images[k], model_.image_config(), options.image);
    if (!p.ok()) return p.status().with_context("image " + std::to_string(k + 1));
    image_tokens.push_back(p->num_tokens());
    grids.push_back({p->grid_t, p->grid_h, p->grid_w});
    tm.image_tokens += p->num_tokens();
    ++tm.images;
    pre.push_back(std::move(p).value());
  }
  tm.preprocess_ms = now_ms() - t0;

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
  max_new_ = std::min<int64_t>(options.max_tokens, options.context - n_prompt);
  rope_delta_ = pos.rope_delta;

  // Stopped from outside (keep_going): nothing more is computed; the session ends as cancelled.
  auto stopped = [&] {
    if (!cb.keep_going || cb.keep_going()) return false;
    result_.finish = FinishReason::kCancelled;
    done_ = true;
    return true;
  };

  // Vision tower.
  VisionOutput vis;
  VisualInputs visual;
  if (stopped()) return Status::Ok();
  if (!pre.empty()) {
    phase("vision");
    t0 = now_ms();
    std::vector<const PreprocessedImage*> ptrs;
    for (const auto& p : pre) ptrs.push_back(&p);
    vis = encode_images(model_, pool, ptrs, cb.dump);
    tm.vision_ms = now_ms() - t0;
    visual.embeds = vis.embeds.data();
    visual.n_visual = vis.n_tokens;
    for (const auto& d : vis.deepstack) visual.deepstack.push_back(d.data());
  }

  // Prefill.
  phase("prefill");
  t0 = now_ms();
  cache_ = std::make_unique<KVCache>(cfg.text, options.context, options.kv_type);
  logits_.resize(static_cast<size_t>(cfg.text.vocab_size));
  // In slices of prefill_chunk tokens (one slice when dumping, so the dumps cover the whole prompt): the
  // activations of a long prompt ([tokens, 6144] per MLP buffer) then stay bounded, and the results are
  // the same, since every row is computed on its own and attention reads the cache.
  const int64_t chunk = cb.dump || options.prefill_chunk <= 0 ? n_prompt : options.prefill_chunk;
  const int64_t H = cfg.text.hidden_size;
  int64_t visual_done = 0;
  for (int64_t at = 0; at < n_prompt; at += chunk) {
    if (at > 0 && stopped()) return Status::Ok();
    const int64_t n = std::min(chunk, n_prompt - at);
    VisualInputs slice;
    if (!pre.empty()) {
      slice.n_visual = std::count(ids.begin() + at, ids.begin() + at + n, cfg.image_token_id);
      slice.embeds = visual.embeds + visual_done * H;
      for (const float* d : visual.deepstack) slice.deepstack.push_back(d + visual_done * H);
    }
    const int32_t* p3[3] = {pos.pos[0].data() + at, pos.pos[1].data() + at, pos.pos[2].data() + at};
    text_forward(model_, pool, *cache_, ids.data() + at, n, p3, slice.n_visual > 0 ? &slice : nullptr,
                 at + n == n_prompt ? LogitsMode::kLast : LogitsMode::kNone, logits_.data(), cb.dump);
    visual_done += slice.n_visual;
  }
  QVL_CHECK(visual_done == visual.n_visual);
  tm.prefill_ms = now_ms() - t0;

  sampler_ = std::make_unique<Sampler>(options.sampling);
  sampler_->reset(ids);
  detok_ = std::make_unique<TokenStreamDecoder>(tok, /*skip_special=*/true);
  stops_ = std::make_unique<StopChecker>(options.stop);
  eos_[0] = tok.token_id("<|im_end|>");
  eos_[1] = tok.token_id("<|endoftext|>");
  result_.finish = FinishReason::kLength;
  decode_started_ms_ = now_ms();
  done_ = max_new_ == 0;
  return Status::Ok();
}

Session::Step Session::step(ThreadPool& pool) {
  Step out;
  if (done_) {
    out.done = true;
    return out;
  }
  GenerateTimings& tm = result_.timings;
  auto finish = [&](FinishReason why, std::string tail) {
    out.text += tail;
    result_.text += tail;
    result_.finish = why;
    done_ = out.done = true;
    tm.decode_ms = now_ms() - decode_started_ms_;
  };
  const int32_t token = sampler_->sample(logits_.data(), static_cast<int>(logits_.size()));
  if (result_.tokens.empty()) tm.ttft_ms = now_ms() - start_ms_;
  if (!options_.ignore_eos && (token == eos_[0] || token == eos_[1])) {
    StopChecker::Emit e = stops_->push(detok_->flush());
    finish(FinishReason::kStop, e.text + (e.stopped ? "" : stops_->flush()));
    return out;
  }
  sampler_->accept(token);
  result_.tokens.push_back(token);
  ++tm.generated_tokens;
  StopChecker::Emit e = stops_->push(detok_->push(token));
  out.text = e.text;
  result_.text += e.text;
  if (e.stopped) {
    finish(FinishReason::kStop, "");
    return out;
  }
  if (static_cast<int64_t>(result_.tokens.size()) >= max_new_) {
    StopChecker::Emit last = stops_->push(detok_->flush());
    finish(last.stopped ? FinishReason::kStop : FinishReason::kLength, last.text + (last.stopped ? "" : stops_->flush()));
    return out;
  }
  // The next token sits at cache index c with position c + rope_delta on all three axes.
  const int32_t p = static_cast<int32_t>(cache_->length() + rope_delta_);
  const int32_t* one[3] = {&p, &p, &p};
  text_forward(model_, pool, *cache_, &token, 1, one, nullptr, LogitsMode::kLast, logits_.data());
  return out;
}

}  // namespace qvl
