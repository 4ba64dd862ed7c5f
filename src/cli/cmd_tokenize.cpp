// `qvl tokenize --model DIR [--json] [--special] [TEXT | --file F | --chat F]`: the token ids of a text, of each
// line of a file or of standard input, or of a whole conversation as the chat template renders it (what
// the model is given; `--prompt` shows the rendered text too).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "model/gguf_checkpoint.h"
#include "model/model.h"
#include "chat/chat_format.h"
#include "chat/chat_json.h"
#include "tokenizer/tokenizer.h"
#include "util/file.h"

namespace qvl::cli {

namespace {

void print_ids(const std::vector<int32_t>& ids, bool json) {
  if (json) {
    nlohmann::json out = {{"ids", ids}, {"count", ids.size()}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
}

// A conversation file: {"messages": [...], "tools": [...]} as sent to /v1/chat/completions, or the bare list.
int tokenize_chat(const std::string& cmd, const Tokenizer& tok, ChatTemplateKind kind, const std::string& path, bool json,
                  bool show_prompt, bool add_generation_prompt) {
  auto text = read_file_text(path, 64 << 20);
  if (!text.ok()) return fail(cmd, text.status().message());
  const auto body = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return fail(cmd, path + ": not valid JSON");
  const nlohmann::ordered_json* msgs = &body;
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.kind = kind;
  if (body.is_object()) {
    if (!body.contains("messages")) return fail(cmd, path + ": expected {\"messages\": [...]} or a list of messages");
    msgs = &body["messages"];
    if (body.contains("tools")) {
      auto tools = chat_tools_from_json(body["tools"]);
      if (!tools.ok()) return fail(cmd, path + ": " + tools.status().message());
      options.tools = std::move(tools).value();
    }
  }
  auto messages = chat_messages_from_json(*msgs);
  if (!messages.ok()) return fail(cmd, path + ": " + messages.status().message());
  const RenderedChat chat = render_chat_with_spans(*messages, options);
  const std::vector<int32_t> ids = tok.encode_prompt(chat.text, chat.user_spans);
  const int32_t pad = tok.token_id("<|image_pad|>");
  size_t images = 0;
  for (int32_t id : ids) images += id == pad;
  if (json) {
    nlohmann::json out = {{"ids", ids}, {"count", ids.size()}, {"images", images}};
    if (show_prompt) out["prompt"] = chat.text;
    std::printf("%s\n", out.dump().c_str());
  } else {
    if (show_prompt) std::printf("%s\n", chat.text.c_str());
    print_ids(ids, false);
  }
  if (images > 0)
    std::fprintf(stderr, "%s: %zu image(s): each <|image_pad|> (%d) stands for the image's tokens, (h/32)·(w/32) of its "
                 "resized size\n", cmd.c_str(), images, pad);
  return 0;
}

}  // namespace

int cmd_tokenize(const Args& args) {
  CommandLine cli("tokenize", "Prints the token ids of TEXT, of each line of --file or standard input (one output line per "
                              "input line), or of a conversation rendered by the chat template (--chat).");
  std::string model, text, file, chat;
  bool json = false, special = false, prompt = false, no_generation_prompt = false;
  add_model_option(cli, model, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  cli.add_flag("--json", json, "print {\"ids\": [...], \"count\": N} (one line per input)");
  cli.add_flag("--special", special, "match control tokens such as <|im_start|> in the text");
  auto* t = cli.add_option("TEXT", text, "the text (text starting with '-' goes after '--'); without TEXT, --file or --chat: "
                                         "standard input, line by line");
  auto* f = cli.add_option("--file", file, "tokenize each line of FILE ('-': standard input)")->type_name("FILE")->excludes(t);
  cli.add_option("--chat", chat, "a conversation as sent to /v1/chat/completions ({\"messages\", \"tools\"} or a list): "
                                 "the ids of the prompt the chat template makes of it")
      ->type_name("FILE.json")
      ->excludes(t)
      ->excludes(f);
  cli.add_flag("--prompt", prompt, "with --chat: print the rendered prompt too");
  cli.add_flag("--no-generation-prompt", no_generation_prompt, "with --chat: without the closing '<|im_start|>assistant\\n'");
  if (auto rc = cli.parse_args(args)) return *rc;
  const std::string& cmd = cli.command();
  {  // a hub id only from the cache: these commands read no weights
    auto dir = find_model_dir(cmd, model, /*download=*/false, revision);
    if (!dir.ok()) return fail(cmd, dir.status().message());
    model = *dir;
  }

  std::error_code ec;
  if (!file.empty() && file != "-" && std::filesystem::is_directory(file, ec))
    return fail(cmd, "--file " + file + ": is a directory; expected a text file, one input a line");
  // A GGUF's tokenizer and chat template are in its metadata or beside it, read as run reads them (no weights).
  std::optional<GgufFrontEnd> gguf;
  if (is_gguf_model(model)) {
    auto front = load_gguf_front_end(model);
    if (!front.ok()) return fail(cmd, front.status().message());
    gguf.emplace(std::move(*front));
  }
  std::optional<Tokenizer> own;
  const Tokenizer* tok = gguf ? &gguf->tokenizer : nullptr;
  if (!tok) {
    auto loaded = Tokenizer::load(model);
    if (!loaded.ok()) return fail(cmd, loaded.status().message());
    tok = &own.emplace(std::move(*loaded));
  }
  if (!chat.empty()) {
    auto kind = gguf ? Result<ChatTemplateKind>(gguf->chat_template) : read_chat_template_kind(model);
    if (!kind.ok()) return fail(cmd, kind.status().message());
    return tokenize_chat(cmd, *tok, *kind, chat, json, prompt, !no_generation_prompt);
  }
  if (!t->empty()) {
    print_ids(tok->encode(text, special), json);
    return 0;
  }
  // Line by line (the newline itself is not part of a line), printed as each is read.
  std::ifstream in;
  std::istream* src = &std::cin;
  if (!file.empty() && file != "-") {
    in.open(file, std::ios::binary);
    if (!in) return fail(cmd, file + ": cannot open");
    src = &in;
  }
  std::string line;
  while (std::getline(*src, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    print_ids(tok->encode(line, special), json);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace qvl::cli
