// Builds a prompt's token ids: the chat format's text tokenized with control tokens only where the
// template put them, image pads expanded, each video's block rewritten into timestamped frame groups.
#include "engine/prompt.h"

namespace qvl {

namespace {

constexpr std::string_view kVideoBlock = "<|vision_start|><|video_pad|><|vision_end|>";

bool inside_user_span(const std::vector<TextSpan>& spans, size_t at) {
  for (const TextSpan& s : spans)
    if (at >= s.begin && at < s.end) return true;
  return false;
}

// Replaces the k-th template-made video block (outside the caller's text) by its frame groups, one
// <|video_pad|> per group (expanded after tokenizing), and moves the spans after it.
Result<RenderedChat> expand_video_blocks(const RenderedChat& chat, const std::vector<VideoPromptPart>& videos) {
  RenderedChat out;
  out.user_spans = chat.user_spans;
  size_t from = 0, k = 0;
  for (;;) {
    size_t at = chat.text.find(kVideoBlock, from);
    while (at != std::string::npos && inside_user_span(chat.user_spans, at)) at = chat.text.find(kVideoBlock, at + 1);
    if (at == std::string::npos) break;
    out.text.append(chat.text, from, at - from);
    if (k >= videos.size())
      return Status::Error("the conversation shows more video parts than the " + std::to_string(videos.size()) +
                           " video(s) given");
    std::string groups;
    for (const std::string& ts : videos[k].timestamps) groups += ts + std::string(kVideoBlock);
    ++k;
    // Spans after the block (positions in the original text) shift by the growth.
    const size_t grow = groups.size() - kVideoBlock.size();
    for (size_t i = 0; i < chat.user_spans.size(); ++i)
      if (chat.user_spans[i].begin >= at + kVideoBlock.size()) {
        out.user_spans[i].begin += grow;
        out.user_spans[i].end += grow;
      }
    out.text += groups;
    from = at + kVideoBlock.size();
  }
  out.text.append(chat.text, from, std::string::npos);
  if (k != videos.size())
    return Status::Error("the conversation shows " + std::to_string(k) + " video part(s) but " +
                         std::to_string(videos.size()) + " video(s) were given");
  return out;
}

}  // namespace

Result<std::vector<int32_t>> build_prompt_ids(const Tokenizer& tokenizer, const RenderedChat& chat_in,
                                              const std::vector<int>& image_tokens,
                                              const std::vector<VideoPromptPart>& videos) {
  const int32_t image_pad = tokenizer.token_id("<|image_pad|>");
  const int32_t video_pad = tokenizer.token_id("<|video_pad|>");
  if (image_pad < 0 || video_pad < 0)
    return Status::Error("tokenizer has no <|image_pad|> or <|video_pad|> token; is this a Qwen3-VL model?");
  QVL_ASSIGN_OR_RETURN(RenderedChat chat, expand_video_blocks(chat_in, videos));
  const std::vector<int32_t> ids = tokenizer.encode_prompt(chat.text, chat.user_spans);
  // The processor replaces each "<|image_pad|>" by image_pad * num_tokens before tokenizing; between
  // <|vision_start|> and <|vision_end|> that is the same as expanding the one token here.
  size_t n_images = 0, n_groups = 0, want_groups = 0;
  for (int32_t id : ids) {
    n_images += id == image_pad;
    n_groups += id == video_pad;
  }
  for (const VideoPromptPart& v : videos) want_groups += v.timestamps.size();
  if (n_images != image_tokens.size())
    return Status::Error("the conversation shows " + std::to_string(n_images) + " image part(s) but " +
                         std::to_string(image_tokens.size()) +
                         " image(s) were given; the chat template shows the image parts of user and tool messages "
                         "only (those of system and assistant messages are not images to give)");
  if (n_groups != want_groups)
    return Status::Error("the prompt has " + std::to_string(n_groups) + " video frame group(s), expected " +
                         std::to_string(want_groups));
  std::vector<int32_t> out;
  size_t total = ids.size();
  for (int n : image_tokens) total += static_cast<size_t>(n);
  for (const VideoPromptPart& v : videos) total += v.timestamps.size() * static_cast<size_t>(v.tokens_per_group);
  out.reserve(total);
  size_t k = 0, video = 0, group = 0;
  for (int32_t id : ids) {
    if (id == image_pad) {
      out.insert(out.end(), static_cast<size_t>(image_tokens[k++]), image_pad);
    } else if (id == video_pad) {
      while (group >= videos[video].timestamps.size()) {
        ++video;
        group = 0;
      }
      out.insert(out.end(), static_cast<size_t>(videos[video].tokens_per_group), video_pad);
      ++group;
    } else {
      out.push_back(id);
    }
  }
  return out;
}

std::vector<bool> vision_blocks_are_images(const std::vector<int32_t>& ids, int32_t vision_start, int32_t image_pad,
                                           int32_t video_pad) {
  std::vector<bool> out;
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    if (ids[i] == vision_start && (ids[i + 1] == image_pad || ids[i + 1] == video_pad))
      out.push_back(ids[i + 1] == image_pad);
  return out;
}

}  // namespace qvl
