// The qvl binary: dispatches to a subcommand.
#include <cstdio>
#include <cstring>

#include "cli/cli.h"

namespace {

const char kUsage[] =
    "qvl — Qwen3-VL-2B-Instruct on CPUs\n"
    "\n"
    "usage: qvl <command> [options]\n"
    "\n"
    "commands:\n"
    "  tokenize    --model DIR [--json] [--special] TEXT   print token ids\n"
    "  preprocess  --model DIR --image FILE [--min-pixels N] [--max-pixels N] [--out FILE.npy]\n"
    "                                                      resize and patchify an image as the model sees it\n"
    "  run         --model DIR [--image FILE ...] -p TEXT [-n N] [--temp T] [--seed S] [--dump DIR] ...\n"
    "                                                      answer a prompt about images, streamed to stdout\n"
    "  serve       --model DIR|HUB_ID | --demo [--host H] [--port N] [--parallel N] ...\n"
    "                                                      OpenAI/Ollama-compatible HTTP server and web page (docs/API.md)\n"
    "  bench       --model DIR [--image FILE] [-p TEXT] [-n N] [--runs R] [--json] ...\n"
    "                                                      time load, vision, prefill, first token, decode, memory\n"
    "  quantize    --model DIR --out DIR [--text-weights T] [--vision-weights T]\n"
    "                                                      write a model directory with converted weights (fast start)\n"
    "  make-test-model --preset tiny|2b --seed N --out DIR  write a model directory with generated weights\n"
    "  help                                                this text\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  qvl::cli::Args args(argv + 2, argv + argc);
  if (command == "tokenize") return qvl::cli::cmd_tokenize(args);
  if (command == "preprocess") return qvl::cli::cmd_preprocess(args);
  if (command == "run") return qvl::cli::cmd_run(args);
  if (command == "bench") return qvl::cli::cmd_bench(args);
  if (command == "serve") return qvl::cli::cmd_serve(args);
  if (command == "quantize") return qvl::cli::cmd_quantize(args);
  if (command == "make-test-model") return qvl::cli::cmd_make_test_model(args);
  std::fprintf(stderr, "qvl: unknown command '%s' (try 'qvl help')\n", command.c_str());
  return 2;
}
