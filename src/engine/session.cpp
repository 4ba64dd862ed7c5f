// One conversation's mutable state, in phases a scheduler interleaves: prepare, vision, prefill, decode.
#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "engine/prompt.h"

namespace qvl {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TokenKey image_pad_key(const ImageKey& image, int64_t j) {
  uint64_t h = 0;
  std::memcpy(&h, image.data(), sizeof h);
  // Mixed with the index (splitmix64's finaliser), top bit set so it never equals a token id.
  uint64_t z = h ^ (static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) | (uint64_t{1} << 63);
}

std::vector<std::shared_ptr<const EncodedImage>> split_encoded(VisionOutput&& out,
                                                               const std::vector<const PreprocessedImage*>& images) {
  std::vector<std::shared_ptr<const EncodedImage>> parts;
  int64_t row = 0;
  for (const PreprocessedImage* im : images) {
    auto e = std::make_shared<EncodedImage>();
    e->grid_t = im->grid_t;
    e->grid_h = im->grid_h;
    e->grid_w = im->grid_w;
    e->n_tokens = im->num_tokens();
    e->dim = out.dim;
    const size_t a = static_cast<size_t>(row * out.dim), b = static_cast<size_t>((row + e->n_tokens) * out.dim);
    e->embeds.assign(out.embeds.begin() + a, out.embeds.begin() + b);
    for (const auto& d : out.deepstack) e->deepstack.emplace_back(d.begin() + a, d.begin() + b);
    row += e->n_tokens;
    parts.push_back(std::move(e));
  }
  QVL_CHECK(row == out.n_tokens);
  return parts;
}

Session::~Session() { retire(); }

Status Session::prepare(const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                        const GenerateOptions& options) {
  return prepare(messages, images, {}, options);
}

Status Session::prepare(const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                        const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos,
                        const GenerateOptions& options) {
  phase_ = Phase::kDone;
  result_ = GenerateResult{};
  over_context_ = false;
  options_ = options;
  QVL_RETURN_IF_ERROR(options.sampling.validate());
  if (options.max_tokens < 0) return Status::Error("max_tokens must be >= 0, got " + std::to_string(options.max_tokens));
  for (const auto& [name, n] : {std::pair{"logprobs", options.logprobs}, std::pair{"prompt_logprobs", options.prompt_logprobs}})
    if (n < -1 || n > kMaxTopLogprobs)
      return Status::Error(std::string(name) + " must be in [0, " + std::to_string(kMaxTopLogprobs) + "] (or -1: none), got " +
                           std::to_string(n));
  if (!options.raw_prompt.empty() && (!images.empty() || !videos.empty()))
    return Status::Error("a raw prompt (token ids, no chat format) takes no images or videos; send a chat request instead");
  if (options.prompt_logprobs >= 0 && (!images.empty() || !videos.empty()))
    return Status::Error("prompt log-probabilities are given for text prompts only; leave out the images or the echo");
  if (!model_.has_vision() && (!images.empty() || !videos.empty())) return no_vision_error(model_, images.size(), videos.size());
  const ModelConfig& cfg = model_.config();
  const ImageProcessorConfig& ipc = model_.image_config();
  const Tokenizer& tok = model_.tokenizer();
  if (const auto& lb = options.sampling.logit_bias; !lb.empty() && lb.back().first >= tok.vocab_size())
    return Status::Error("logit_bias: token id " + std::to_string(lb.back().first) + " is outside the vocabulary [0, " +
                         std::to_string(tok.vocab_size()) + ")");
  GenerateTimings& tm = result_.timings;
  start_ms_ = now_ms();

  // Each image's key and token count: from the image cache, else from its resized size.
  std::vector<ImageSlot> image_slots(images.size());
  std::vector<int> image_tokens;
  std::vector<GridTHW> grids;
  for (size_t k = 0; k < images.size(); ++k) {
    ImageSlot& im = image_slots[k];
    im.image_index = static_cast<int>(k);
    im.key = image_key(images[k], ipc, image_options(options, k, ipc));
    if (caches_.images) im.encoded = caches_.images->find(im.key);
    GridTHW g;
    if (im.encoded) {
      g = {im.encoded->grid_t, im.encoded->grid_h, im.encoded->grid_w};
      ++tm.cached_images;
    } else {
      auto size = preprocess_size(images[k], ipc, image_options(options, k, ipc));
      if (!size.ok()) return size.status().with_context("image " + std::to_string(k + 1));
      g = {1, size->height / ipc.patch_size, size->width / ipc.patch_size};
    }
    im.n_tokens = static_cast<int64_t>(g.t) * g.h * g.w / (ipc.merge_size * ipc.merge_size);
    image_tokens.push_back(static_cast<int>(im.n_tokens));
    grids.push_back(g);
    tm.image_tokens += static_cast<int>(im.n_tokens);
    ++tm.images;
  }
  // Each video's frame groups: a slot each, keyed by its patches (already preprocessed), the pixels shared
  // with the video.
  std::vector<ImageSlot> group_slots;
  std::vector<VideoPromptPart> video_parts;
  std::vector<GridTHW> video_grids;
  for (const auto& v : videos) {
    QVL_CHECK(v && !v->groups.empty());
    VideoPromptPart part{v->timestamps, v->tokens_per_group()};
    for (size_t gi = 0; gi < v->groups.size(); ++gi) {
      const PreprocessedImage& g = v->groups[gi];
      ImageSlot slot;
      // The handler usually hashed the groups already (off the inference thread).
      slot.key = gi < v->group_keys.size() ? v->group_keys[gi] : frame_group_key(g);
      slot.n_tokens = g.num_tokens();
      if (caches_.images) slot.encoded = caches_.images->find(slot.key);
      if (slot.encoded) ++tm.cached_images;
      else slot.pixels = std::shared_ptr<const PreprocessedImage>(v, &g);  // aliasing: keeps the video alive
      group_slots.push_back(std::move(slot));
    }
    video_grids.push_back({v->grid_t, v->grid_h, v->grid_w});
    video_parts.push_back(std::move(part));
    ++tm.videos;
    tm.video_frames += static_cast<int>(v->indices.size());
    tm.video_tokens += v->grid_t * v->tokens_per_group();
  }

  // The prompt: chat format -> ids (image pads expanded, videos as timestamped frame groups) -> 3-D
  // positions -> cache keys.
  if (!options.raw_prompt.empty()) {
    // No image or video may hide in it: its pads would have nothing to stand for.
    const int32_t vocab = static_cast<int32_t>(std::min<int64_t>(cfg.text.vocab_size, tok.vocab_size()));
    for (size_t i = 0; i < options.raw_prompt.size(); ++i) {
      const int32_t id = options.raw_prompt[i];
      if (id < 0 || id >= vocab)
        return Status::Error("prompt token " + std::to_string(i) + " is " + std::to_string(id) +
                             ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
      if (id == cfg.image_token_id || id == cfg.video_token_id || id == cfg.vision_start_token_id)
        return Status::Error("prompt token " + std::to_string(i) + " is " + std::string(tok.token_bytes(id)) +
                             ", which marks an image or video; a raw prompt cannot carry images (send a chat request)");
    }
    ids_ = options.raw_prompt;
  } else {
    ChatOptions chat_options = options.chat;
    chat_options.kind = model_.chat_template();
    const RenderedChat chat = render_chat_with_spans(messages, chat_options);
    QVL_ASSIGN_OR_RETURN(ids_, build_prompt_ids(tok, chat, image_tokens, video_parts));
  }
  VisionTokenIds vt{cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id};
  QVL_ASSIGN_OR_RETURN(pos_, get_rope_index(ids_, grids, video_grids, cfg.vision.spatial_merge_size, vt));
  // The slots in prompt order.
  images_.clear();
  {
    size_t next_image = 0, next_group = 0;
    for (bool is_image : vision_blocks_are_images(ids_, cfg.vision_start_token_id, cfg.image_token_id,
                                                  cfg.video_token_id)) {
      if (is_image) {
        QVL_CHECK(next_image < image_slots.size());
        images_.push_back(std::move(image_slots[next_image++]));
      } else {
        QVL_CHECK(next_group < group_slots.size());
        images_.push_back(std::move(group_slots[next_group++]));
      }
    }
    QVL_CHECK(next_image == image_slots.size() && next_group == group_slots.size());
  }
  const int64_t n_prompt = static_cast<int64_t>(ids_.size());
  tm.prompt_tokens = static_cast<int>(n_prompt);
  if (n_prompt == 0) return Status::Error("the prompt is empty");
  over_context_ = options.pooled ? n_prompt > options.context : n_prompt >= options.context;
  if (over_context_)
    return Status::Error("the prompt has " + std::to_string(n_prompt) + " tokens, over the context of " +
                         std::to_string(options.context) + "; shorten it, use smaller images or videos (max_pixels, "
                         "fps) or a larger context");
  max_new_ = options.pooled ? 0 : std::min<int64_t>(options.max_tokens, options.context - n_prompt);
  rope_delta_ = pos_.rope_delta;
  keys_.resize(static_cast<size_t>(n_prompt));
  {
    size_t k = 0;
    int64_t j = 0;
    for (int64_t i = 0; i < n_prompt; ++i) {
      if (ids_[i] != cfg.image_token_id && ids_[i] != cfg.video_token_id) {
        keys_[i] = static_cast<TokenKey>(ids_[i]);
        continue;
      }
      QVL_CHECK(k < images_.size());
      if (j == 0) images_[k].first_pad = i;
      keys_[i] = image_pad_key(images_[k].key, j);
      if (++j == images_[k].n_tokens) {
        ++k;
        j = 0;
      }
    }
    QVL_CHECK(k == images_.size());
  }

  // The KV cache, with the longest cached prefix (at least the last prompt token is read again: its
  // logits give the first answer token).
  // A pooled prompt generates nothing: its cache holds the prompt alone.
  cache_ = std::make_unique<KVCache>(cfg.text, options.pooled ? n_prompt : options.context, options.kv_type);
  logits_.resize(static_cast<size_t>(options.pooled ? cfg.text.hidden_size : cfg.text.vocab_size));
  // Prompt log-probabilities need every row's logits: nothing is restored.
  prefill_at_ = caches_.prefixes && options.prompt_logprobs < 0 ? caches_.prefixes->restore(keys_, n_prompt - 1, *cache_) : 0;
  if (options.prompt_logprobs >= 0) {
    result_.prompt_ids = ids_;
    result_.prompt_logprobs.clear();
    result_.prompt_logprobs.reserve(static_cast<size_t>(n_prompt - 1));
  }
  tm.cached_tokens = static_cast<int>(prefill_at_);

  // Images and frame groups with pads after the prefix must be encoded unless the cache has them.
  for (size_t k = 0; k < images_.size(); ++k) {
    ImageSlot& im = images_[k];
    im.needed = im.first_pad + im.n_tokens > prefill_at_;
    if (!im.needed) im.pixels.reset();
    if (!im.needed || im.encoded || im.pixels) continue;
    // The same image earlier in this request: share its pixels.
    for (size_t e = 0; e < k && !im.pixels; ++e)
      if (images_[e].key == im.key && images_[e].pixels) im.pixels = images_[e].pixels;
    if (im.pixels) continue;
    const size_t ik = static_cast<size_t>(im.image_index);
    const double t0 = now_ms();
    auto p = preprocess_image(images[ik], ipc, image_options(options, ik, ipc));
    tm.preprocess_ms += now_ms() - t0;
    if (!p.ok()) return p.status().with_context("image " + std::to_string(ik + 1));
    QVL_CHECK(static_cast<int64_t>(p->num_tokens()) == im.n_tokens);
    im.pixels = std::make_shared<const PreprocessedImage>(std::move(p).value());
  }
  phase_ = Phase::kVision;
  if (pending_images().empty()) build_visual_rows();
  return Status::Ok();
}

std::vector<Session::PendingImage> Session::pending_images() const {
  std::vector<PendingImage> out;
  if (phase_ != Phase::kVision) return out;
  std::set<ImageKey> seen;  // a video's groups can be many: no quadratic scan
  for (const ImageSlot& im : images_) {
    if (!im.needed || im.encoded) continue;
    if (seen.insert(im.key).second) out.push_back({im.key, im.pixels});
  }
  return out;
}

void Session::provide_image(const ImageKey& key, std::shared_ptr<const EncodedImage> image) {
  if (phase_ != Phase::kVision) return;
  for (ImageSlot& im : images_) {
    if (im.key != key || im.encoded) continue;
    QVL_CHECK(image && image->n_tokens == im.n_tokens && image->dim == model_.config().text.hidden_size);
    im.encoded = image;
    im.pixels.reset();
  }
  if (pending_images().empty()) build_visual_rows();
}

// Gathers the embeddings (and DeepStack features) of the image pads from prefill_at_ on, in prompt order.
void Session::build_visual_rows() {
  const int64_t H = model_.config().text.hidden_size;
  const size_t taps = model_.config().vision.deepstack_visual_indexes.size();
  int64_t rows = 0;
  for (const ImageSlot& im : images_)
    if (im.needed) rows += std::min(im.n_tokens, im.first_pad + im.n_tokens - prefill_at_);
  vis_embeds_.resize(static_cast<size_t>(rows * H));
  vis_deepstack_.assign(taps, std::vector<float>(static_cast<size_t>(rows * H)));
  int64_t r = 0;
  for (const ImageSlot& im : images_) {
    if (!im.needed) continue;
    QVL_CHECK(im.encoded && im.encoded->deepstack.size() == taps);
    const int64_t j0 = std::max<int64_t>(0, prefill_at_ - im.first_pad), count = im.n_tokens - j0;
    const size_t src = static_cast<size_t>(j0 * H), dst = static_cast<size_t>(r * H), len = static_cast<size_t>(count * H);
    std::copy_n(im.encoded->embeds.begin() + static_cast<std::ptrdiff_t>(src), len, vis_embeds_.begin() + static_cast<std::ptrdiff_t>(dst));
    for (size_t d = 0; d < taps; ++d)
      std::copy_n(im.encoded->deepstack[d].begin() + static_cast<std::ptrdiff_t>(src), len,
                  vis_deepstack_[d].begin() + static_cast<std::ptrdiff_t>(dst));
    r += count;
  }
  QVL_CHECK(r == rows);
  for (ImageSlot& im : images_) {  // copied: the cache (or nobody) keeps them now
    im.encoded.reset();
    im.pixels.reset();
  }
  visual_done_ = 0;
  images_ready_ms_ = now_ms();
  result_.timings.vision_ms = images_ready_ms_ - start_ms_ - result_.timings.preprocess_ms;
  // Only the restored prefix's keys are in the cache so far.
  phase_ = Phase::kPrefill;
  prefill_started_ms_ = 0;
}

TextSeq Session::prefill_slice(int64_t max_tokens) {
  QVL_CHECK(phase_ == Phase::kPrefill && max_tokens > 0);
  if (prefill_started_ms_ == 0) prefill_started_ms_ = now_ms();
  const int64_t n_prompt = static_cast<int64_t>(ids_.size()), at = prefill_at_;
  // With prompt log-probabilities every row's logits are kept: the slice is bounded so they stay small.
  if (options_.prompt_logprobs >= 0) max_tokens = std::min<int64_t>(max_tokens, kPromptLogitRows);
  const int64_t n = std::min(max_tokens, n_prompt - at);
  const int64_t H = model_.config().text.hidden_size;
  slice_visual_ = VisualInputs{};
  const int32_t image_pad = model_.config().image_token_id, video_pad = model_.config().video_token_id;
  slice_visual_.n_visual = std::count_if(ids_.begin() + at, ids_.begin() + at + n,
                                         [&](int32_t id) { return id == image_pad || id == video_pad; });
  if (slice_visual_.n_visual > 0) {
    slice_visual_.embeds = vis_embeds_.data() + visual_done_ * H;
    for (const auto& d : vis_deepstack_) slice_visual_.deepstack.push_back(d.data() + visual_done_ * H);
  }
  TextSeq s;
  s.cache = cache_.get();
  s.ids = ids_.data() + at;
  s.n = n;
  for (int a = 0; a < 3; ++a) s.pos[a] = pos_.pos[a].data() + at;
  s.visual = slice_visual_.n_visual > 0 ? &slice_visual_ : nullptr;
  s.mode = at + n < n_prompt ? LogitsMode::kNone : options_.pooled ? LogitsMode::kLastHidden : LogitsMode::kLast;
  s.logits = logits_.data();
  if (options_.prompt_logprobs >= 0) {
    prompt_logits_.resize(static_cast<size_t>(n * model_.config().text.vocab_size));
    s.mode = LogitsMode::kAll;
    s.logits = prompt_logits_.data();
  }
  return s;
}

void Session::prefill_done(const TextSeq& slice) {
  QVL_CHECK(phase_ == Phase::kPrefill && slice.cache == cache_.get() && cache_->length() == prefill_at_ + slice.n);
  if (slice.mode == LogitsMode::kAll) {
    // Row i's logits give prompt token at + i + 1's log-probability; the prompt's last row is the answer's.
    const int64_t V = model_.config().text.vocab_size, n_prompt = static_cast<int64_t>(ids_.size());
    for (int64_t i = 0; i < slice.n; ++i) {
      const float* row = prompt_logits_.data() + i * V;
      const int64_t next = prefill_at_ + i + 1;
      if (next < n_prompt) {
        result_.prompt_logprobs.push_back(token_logprob(row, static_cast<int>(V), ids_[static_cast<size_t>(next)],
                                                        options_.prompt_logprobs));
      } else {
        std::copy_n(row, V, logits_.begin());
      }
    }
  }
  prefill_at_ += slice.n;
  visual_done_ += slice_visual_.n_visual;
  if (prefill_at_ < static_cast<int64_t>(ids_.size())) return;
  QVL_CHECK(visual_done_ * model_.config().text.hidden_size == static_cast<int64_t>(vis_embeds_.size()));
  std::vector<float>().swap(vis_embeds_);
  std::vector<float>().swap(prompt_logits_);
  vis_deepstack_.clear();
  result_.timings.prefill_ms = now_ms() - prefill_started_ms_;
  if (options_.pooled) {
    result_.hidden = logits_;
    result_.timings.ttft_ms = now_ms() - start_ms_;
    finish(FinishReason::kStop);
    return;
  }
  // (The copy's committed bytes are the prompt's, as this cache's are now.)
  if (options_.share_prompt && caches_.prefixes && caches_.prefixes->fits(cache_->committed_bytes())) {
    auto copy = std::make_unique<KVCache>(model_.config().text, cache_->length(), cache_->type());
    copy->copy_prefix_from(*cache_, cache_->length());
    caches_.prefixes->put(keys_, std::move(copy));
  }
  begin_decode();
}

void Session::begin_decode() {
  const Tokenizer& tok = model_.tokenizer();
  sampler_ = std::make_unique<Sampler>(options_.sampling);
  sampler_->reset(ids_);
  detok_ = std::make_unique<TokenStreamDecoder>(tok, /*skip_special=*/true);
  stops_ = std::make_unique<StopChecker>(options_.stop);
  eos_[0] = tok.token_id("<|im_end|>");
  eos_[1] = tok.token_id("<|endoftext|>");
  if (options_.json) {
    // A Thinking model's prompt opens a <think> block: a constrained answer closes it first (no reasoning).
    const std::string prefix =
        (model_.chat_template() == ChatTemplateKind::kThinking ? "</think>\n\n" : "") + options_.json_prefix;
    json_ = std::make_unique<JsonConstraint>(options_.json, tok, std::vector<int32_t>{eos_[0], eos_[1]},
                                             tok.encode(prefix, /*allow_special=*/true),
                                             tok.encode(options_.json_suffix, /*allow_special=*/true));
  }
  result_.finish = FinishReason::kLength;
  decode_started_ms_ = now_ms();
  phase_ = Phase::kDecode;
  if (max_new_ == 0) finish(FinishReason::kLength);
}

void Session::finish(FinishReason why) {
  result_.finish = why;
  if (phase_ == Phase::kDecode) result_.timings.decode_ms = now_ms() - decode_started_ms_;
  phase_ = Phase::kDone;
}

Session::Step Session::sample() {
  Step out;
  if (phase_ != Phase::kDecode) {
    out.done = phase_ == Phase::kDone;
    return out;
  }
  GenerateTimings& tm = result_.timings;
  auto end = [&](FinishReason why, std::string tail) {
    out.text += tail;
    result_.text += tail;
    finish(why);
    out.done = true;
  };
  if (json_) json_->mask(logits_.data(), static_cast<int>(logits_.size()));
  // The distribution the sampler is given (masked, not yet penalised or tempered), kept for the log-probabilities.
  if (options_.logprobs >= 0) seen_logits_.assign(logits_.begin(), logits_.end());
  const int32_t token = sampler_->sample(logits_.data(), static_cast<int>(logits_.size()));
  if (result_.tokens.empty()) tm.ttft_ms = now_ms() - start_ms_;
  // The mask allowed it; should the constraint still refuse it (a dead end the grammar did not foresee), the
  // answer ends here rather than run on unconstrained.
  if (json_ && !json_->accept(token)) {
    StopChecker::Emit e = stops_->push(detok_->flush());
    end(FinishReason::kStop, e.text + (e.stopped ? "" : stops_->flush()));
    return out;
  }
  if (!options_.ignore_eos && (token == eos_[0] || token == eos_[1])) {
    StopChecker::Emit e = stops_->push(detok_->flush());
    end(FinishReason::kStop, e.text + (e.stopped ? "" : stops_->flush()));
    return out;
  }
  sampler_->accept(token);
  result_.tokens.push_back(token);
  if (options_.logprobs >= 0)
    result_.logprobs.push_back(token_logprob(seen_logits_.data(), static_cast<int>(seen_logits_.size()), token, options_.logprobs));
  ++tm.generated_tokens;
  StopChecker::Emit e = stops_->push(detok_->push(token));
  out.text = e.text;
  result_.text += e.text;
  if (e.stopped) {
    end(FinishReason::kStop, "");
    return out;
  }
  if (static_cast<int64_t>(result_.tokens.size()) >= max_new_) {
    StopChecker::Emit last = stops_->push(detok_->flush());
    end(last.stopped ? FinishReason::kStop : FinishReason::kLength, last.text + (last.stopped ? "" : stops_->flush()));
    return out;
  }
  next_token_ = token;
  return out;
}

TextSeq Session::decode_row() {
  QVL_CHECK(phase_ == Phase::kDecode && next_token_ >= 0);
  // The next token sits at cache index c with position c + rope_delta on all three axes.
  next_pos_ = static_cast<int32_t>(cache_->length() + rope_delta_);
  TextSeq s;
  s.cache = cache_.get();
  s.ids = &next_token_;
  s.n = 1;
  for (int a = 0; a < 3; ++a) s.pos[a] = &next_pos_;
  s.mode = LogitsMode::kLast;
  s.logits = logits_.data();
  return s;
}

void Session::decode_done() {
  QVL_CHECK(next_token_ >= 0 && cache_->length() == static_cast<int64_t>(keys_.size()) + 1);
  keys_.push_back(static_cast<TokenKey>(next_token_));
  next_token_ = -1;
}

Status Session::start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                      const GenerateOptions& options, const GenerateCallbacks& cb) {
  return start(pool, messages, images, {}, options, cb);
}

Status Session::start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                      const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos,
                      const GenerateOptions& options, const GenerateCallbacks& cb) {
  auto phase = [&](const char* p) {
    if (cb.progress) cb.progress(p);
  };
  phase("preprocess");
  QVL_RETURN_IF_ERROR(prepare(messages, images, videos, options));
  // Stopped from outside (keep_going): nothing more is computed; the session ends as cancelled.
  auto stopped = [&] {
    if (!cb.keep_going || cb.keep_going()) return false;
    cancel();
    return true;
  };
  if (stopped()) return Status::Ok();
  const std::vector<PendingImage> pending = pending_images();
  if (!pending.empty()) {
    phase("vision");
    std::vector<const PreprocessedImage*> ptrs;
    for (const PendingImage& p : pending) ptrs.push_back(p.pixels.get());
    auto parts = split_encoded(encode_images(model_, pool, ptrs, cb.dump, &vision_act_), ptrs);
    result_.timings.vision_activation_bytes = vision_act_.peak;
    for (size_t k = 0; k < pending.size(); ++k) {
      if (caches_.images) caches_.images->put(pending[k].key, parts[k]);
      provide_image(pending[k].key, parts[k]);
    }
  }
  QVL_CHECK(phase_ == Phase::kPrefill);
  phase("prefill");
  // In slices of prefill_chunk tokens (one slice when dumping, so the dumps cover the whole prompt): the
  // activations of a long prompt ([tokens, 6144] per MLP buffer) then stay bounded, and the results are
  // the same, since every row is computed on its own and attention reads the cache.
  const int64_t chunk = cb.dump || options.prefill_chunk <= 0 ? static_cast<int64_t>(ids_.size()) : options.prefill_chunk;
  bool first = true;
  while (phase_ == Phase::kPrefill) {
    if (!first && stopped()) return Status::Ok();
    first = false;
    TextSeq s = prefill_slice(chunk);
    text_forward_batch(model_, pool, {s}, cb.dump, &text_act_);
    result_.timings.text_activation_bytes = std::max(result_.timings.text_activation_bytes, text_act_.bytes());
    prefill_done(s);
  }
  return Status::Ok();
}

Session::Step Session::step(ThreadPool& pool) {
  Step out = sample();
  if (out.done || phase_ != Phase::kDecode) return out;
  TextSeq row = decode_row();
  text_forward_batch(model_, pool, {row}, nullptr, &text_act_);
  result_.timings.text_activation_bytes = std::max(result_.timings.text_activation_bytes, text_act_.bytes());
  decode_done();
  return out;
}

void Session::cancel() {
  if (phase_ == Phase::kDone) return;
  finish(FinishReason::kCancelled);
}

void Session::retire() {
  if (retired_ || !cache_) return;
  retired_ = true;
  if (!caches_.prefixes || cache_->length() == 0) return;
  // The cache holds the prompt's first prefill_at_ tokens, then (once decoding) the generated ones fed back.
  std::vector<TokenKey> keys(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(cache_->length()));
  caches_.prefixes->put(std::move(keys), std::move(cache_));
}

}  // namespace qvl
