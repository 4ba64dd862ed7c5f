// The Qwen2 pre-tokenizer: splits normalised text into pieces with the regex of tokenizer.json,
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// hand-compiled into a scanner with the same leftmost-first, backtracking semantics (no std::regex).
#pragma once

#include <string_view>
#include <vector>

namespace qvl {

// Appends the pieces of `text` (valid UTF-8) to `out`, in order; they concatenate back to `text`.
void qwen2_pretokenize(std::string_view text, std::vector<std::string_view>& out);

}  // namespace qvl
