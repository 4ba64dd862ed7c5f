// `qvl tokenize --model DIR [--json] [--special] TEXT`: prints the token ids of TEXT.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "tokenizer/tokenizer.h"

namespace qvl::cli {

int cmd_tokenize(const Args& args) {
  CommandLine cli("tokenize", "Prints the token ids of TEXT (text starting with '-' goes after '--').");
  std::string model, text;
  bool json = false, special = false;
  add_model_option(cli, model, ModelSpec::kDirectoryOrHubId)->required();
  cli.add_flag("--json", json, "print {\"ids\": [...], \"count\": N}");
  cli.add_flag("--special", special, "match control tokens such as <|im_start|> in TEXT");
  cli.add_option("TEXT", text, "the text; quote text with spaces")->required();
  if (auto rc = cli.parse_args(args)) return *rc;
  {  // a hub id only from the cache: these commands read no weights
    auto dir = find_model_dir(cli.command(), model, /*download=*/false);
    if (!dir.ok()) return fail(cli.command(), dir.status().message());
    model = *dir;
  }

  auto tok = Tokenizer::load(model);
  if (!tok.ok()) return fail(cli.command(), tok.status().message());
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
