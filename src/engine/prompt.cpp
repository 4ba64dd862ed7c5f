// Builds a prompt's token ids: the chat format's text tokenized with control tokens only where the
// template put them, then each image's single <|image_pad|> expanded to that image's token count.
#include "engine/prompt.h"

namespace qvl {

Result<std::vector<int32_t>> build_prompt_ids(const Tokenizer& tokenizer, const RenderedChat& chat,
                                              const std::vector<int>& image_tokens) {
  const int32_t image_pad = tokenizer.token_id("<|image_pad|>");
  const int32_t video_pad = tokenizer.token_id("<|video_pad|>");
  if (image_pad < 0) return Status::Error("tokenizer has no <|image_pad|> token; is this a Qwen3-VL model?");
  const std::vector<int32_t> ids = tokenizer.encode_prompt(chat.text, chat.user_spans);
  // The processor replaces each "<|image_pad|>" by image_pad * num_tokens before tokenizing; between
  // <|vision_start|> and <|vision_end|> that is the same as expanding the one token here.
  size_t n_images = 0;
  for (int32_t id : ids) {
    n_images += id == image_pad;
    if (id == video_pad) return Status::Error("video input is not supported yet");
  }
  if (n_images != image_tokens.size())
    return Status::Error("the conversation shows " + std::to_string(n_images) + " image part(s) but " +
                         std::to_string(image_tokens.size()) +
                         " image(s) were given; the chat template shows the image parts of user and tool messages "
                         "only (those of system and assistant messages are not images to give)");
  std::vector<int32_t> out;
  size_t total = ids.size();
  for (int n : image_tokens) total += static_cast<size_t>(n);
  out.reserve(total);
  size_t k = 0;
  for (int32_t id : ids) {
    if (id == image_pad) {
      out.insert(out.end(), static_cast<size_t>(image_tokens[k++]), image_pad);
    } else {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace qvl
