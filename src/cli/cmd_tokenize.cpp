// `qvl tokenize --model DIR [--json] [--special] TEXT`: prints the token ids of TEXT.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

namespace qvl::cli {

int cmd_tokenize(const Args& args) {
  const std::string cmd = "tokenize";
  std::string model, text;
  bool json = false, special = false, have_text = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--model") {
      if (++i >= args.size()) return fail(cmd, "--model needs a directory");
      model = args[i];
    } else if (a == "--json") {
      json = true;
    } else if (a == "--special") {
      special = true;  // match control tokens such as <|im_start|> in TEXT
    } else if (a.rfind("--", 0) == 0 && a.size() > 2) {
      return fail(cmd, "unknown option " + a + " (usage: qvl tokenize --model DIR [--json] [--special] TEXT)");
    } else if (!have_text) {
      text = a;
      have_text = true;
    } else {
      return fail(cmd, "expected one TEXT argument; quote text with spaces");
    }
  }
  if (model.empty()) return fail(cmd, "--model DIR is required (a model directory with tokenizer.json)");
  if (!have_text) return fail(cmd, "TEXT is required");
  auto tok = Tokenizer::load(model);
  if (!tok.ok()) return fail(cmd, tok.status().message());
  const auto ids = tok->encode(text, special);
  if (json) {
    nlohmann::json out = {{"ids", ids}, {"count", ids.size()}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace qvl::cli
