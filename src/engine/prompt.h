// Builds a prompt's token ids: the chat format's text tokenized with control tokens only where the
// template put them, then each image's single <|image_pad|> expanded to that image's token count.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace qvl {

// `image_tokens[k]` is the number of <|image_pad|> tokens of the k-th image in prompt order
// (PreprocessedImage::num_tokens()). Fails when the prompt holds a different number of images.
Result<std::vector<int32_t>> build_prompt_ids(const Tokenizer& tokenizer, const RenderedChat& chat,
                                              const std::vector<int>& image_tokens);

}  // namespace qvl
