// Fuzz target: the tokenizer of the model's tokenizer.json on any bytes, in both modes. The first byte picks
// the mode (bit 0: allow_special; bit 1: encode_prompt with the middle third as user text); the rest is
// the text. Every id must be in the vocabulary, user text must never become a control token, decoding and
// streaming must accept the ids, and ASCII text (NFC leaves it alone) must come back byte for byte.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

const qvl::Tokenizer& tokenizer() {
  static const qvl::Tokenizer tok = [] {
    auto t = qvl::Tokenizer::load(QVL_MODEL_FILES_DIR "/tokenizer.json");
    QVL_CHECK_MSG(t.ok(), "the fuzz target needs the model files' tokenizer.json (QVL_MODEL_FILES_DIR)");
    return std::move(t).value();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const qvl::Tokenizer& tok = tokenizer();
  const bool allow_special = data[0] & 1, as_prompt = data[0] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids;
  if (as_prompt) {
    const std::vector<qvl::TextSpan> spans{{text.size() / 3, 2 * text.size() / 3}};
    ids = tok.encode_prompt(text, spans);
  } else {
    ids = tok.encode(text, allow_special);
  }
  for (int32_t id : ids) {
    QVL_CHECK(id >= 0 && id < tok.vocab_size());
    if (!allow_special && !as_prompt) QVL_CHECK_MSG(!tok.is_special(id), "user text became a control token");
  }
  const std::string bytes = tok.decode_bytes(ids);
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) QVL_CHECK_MSG(bytes == text, "ASCII text does not decode to itself");
  (void)tok.decode(ids, /*skip_special=*/true);
  qvl::TokenStreamDecoder stream(tok, /*skip_special=*/false);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (ascii) QVL_CHECK_MSG(streamed == text, "streamed ASCII text does not decode to itself");
  return 0;
}
