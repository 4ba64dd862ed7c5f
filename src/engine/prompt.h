// Builds a prompt's token ids: the chat format's text tokenized with control tokens only where the
// template put them, then each image's single <|image_pad|> expanded to that image's token count; each
// video's "<|vision_start|><|video_pad|><|vision_end|>" becomes, per frame group, its "<t seconds>" text and
// a vision block of that group's <|video_pad|> tokens (as Qwen3VLProcessor rewrites the text before
// tokenizing it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace qvl {

// A video as the prompt shows it: one timestamp text per frame group, each group tokens_per_group pads.
struct VideoPromptPart {
  std::vector<std::string> timestamps;  // "<0.3 seconds>"
  int tokens_per_group = 0;
};

// `image_tokens[k]` is the number of <|image_pad|> tokens of the k-th image in prompt order
// (PreprocessedImage::num_tokens()), `videos[k]` the k-th video's. Fails when the prompt holds a different
// number of images or videos.
Result<std::vector<int32_t>> build_prompt_ids(const Tokenizer& tokenizer, const RenderedChat& chat,
                                              const std::vector<int>& image_tokens,
                                              const std::vector<VideoPromptPart>& videos = {});

// The vision blocks of a prompt in order: for each <|vision_start|> followed by a pad, whether it is an
// image's (else a video frame group's).
std::vector<bool> vision_blocks_are_images(const std::vector<int32_t>& ids, int32_t vision_start, int32_t image_pad,
                                           int32_t video_pad);

}  // namespace qvl
