// Reads what the byte-level BPE tokenizer needs from a tokenizer.json (the BPE model's type, vocabulary and
// merges, and the added tokens) in one streaming pass over the text, without building a JSON document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace qvl {

struct TokenizerJson {
  std::string model_type;                                   // model.type: "BPE" for this family
  std::vector<std::pair<std::string, int64_t>> vocab;       // model.vocab in file order; a repeated key once,
                                                            // with its last id, as a JSON object keeps it
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges in rank order: [a, b] or "a b"
  std::vector<AddedToken> added;                            // added_tokens in file order
};

// Reads `text`, the contents of the file `where` (named in errors). Fails on text that is not JSON, on a
// top level that is not an object, on a model that is not BPE or lacks its vocabulary or merges, and on
// entries of the wrong shape (a vocabulary id that is not an integer, a merge that is neither [a, b] nor
// "a b", an added token without an integer id and a string content). Keys the tokenizer does not use
// (normalizer, pre_tokenizer, decoder, ...) are skipped, whatever they hold. A key given twice keeps its last
// value, as nlohmann's DOM keeps it; a value of the wrong shape is refused even where a later repeat of its key
// would replace it, as Hugging Face's loader, which reads each value as it comes, refuses it.
//
// A DOM parse of Qwen's 11 MB, 151k-token file and a walk over it took ~0.6 s of every model load; this reads
// it in ~0.1 s (the JSON scan itself).
Result<TokenizerJson> read_tokenizer_json(std::string_view text, const std::string& where);

}  // namespace qvl
