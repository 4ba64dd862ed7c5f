// The qvl binary: dispatches to a subcommand.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/options.h"
#include "kernels/kernels.h"
#include "util/version.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const qvl::cli::Args&);
  const char* synopsis;  // its main options, then what it does
};

const Command kCommands[] = {
    {"tokenize", qvl::cli::cmd_tokenize,
     "--model DIR [--json] [--special] [TEXT | --file F | --chat F.json [--prompt]]\n"
     "      print token ids: of a text, of each line of a file or stdin, of a conversation's prompt"},
    {"preprocess", qvl::cli::cmd_preprocess,
     "--model DIR --image FILE [--min-pixels N] [--max-pixels N] [--out FILE.npy]\n"
     "      resize and patchify an image as the model sees it"},
    {"run", qvl::cli::cmd_run,
     "--model DIR [--image FILE ...] -p TEXT [-n N] [--temp T] [--seed S] [--dump DIR] ...\n"
     "      answer a prompt about images, streamed to stdout"},
    {"chat", qvl::cli::cmd_chat,
     "--model DIR [--image FILE ...] [--system TEXT] [-n N] [--temp T] ...\n"
     "      a conversation in the terminal (/image PATH attaches a picture, Ctrl-C stops an answer)"},
    {"serve", qvl::cli::cmd_serve,
     "--model DIR|HUB_ID | --demo [--host H] [--port N] [--parallel N] ...\n"
     "      OpenAI/Ollama-compatible HTTP server and web page (docs/API.md)"},
    {"bench", qvl::cli::cmd_bench,
     "--model DIR [--image FILE] [-p TEXT] [-n N] [--runs R] [--json] ...\n"
     "      time load, vision, prefill, first token, decode, memory"},
    {"quantize", qvl::cli::cmd_quantize,
     "--model DIR --out DIR [--text-weights T] [--vision-weights T] [--format qvl|gguf]\n"
     "      write a model directory with converted weights (fast start)"},
    {"make-test-model", qvl::cli::cmd_make_test_model,
     "--preset tiny|2b|4b|8b|tiny-4b|tiny-8b[-embedding|-reranker] --seed N --out DIR\n      write a model directory with generated weights"},
    {"embed", qvl::cli::cmd_embed,
     "--model DIR [TEXT ...] [--image FILE ...] [--images-dir DIR] [--input-file F.jsonl] [--output F.npy]\n"
     "      vectors of texts, images and videos from a Qwen3-VL-Embedding model (JSONL or .npy)"},
    {"pull", qvl::cli::cmd_pull,
     "MODEL [--revision R] [--source hf|modelscope] [--cache-dir DIR]\n      download from the hub"},
};

void print_usage(FILE* out) {
  std::fputs("qvl — Qwen3-VL on CPUs\n\nusage: qvl <command> [options]   (qvl <command> --help: its "
             "options)\n\ncommands:\n",
             out);
  for (const Command& c : kCommands) std::fprintf(out, "  %s %s\n", c.name, c.synopsis);
  std::fputs("  help [COMMAND]\n      this text, or COMMAND's options\n  --version\n      the version, compiler and the "
             "kernels this CPU gets\n", out);
}

// qvl --version: what this binary is and which kernels it runs here.
int print_version() {
  std::printf("qvl %s\ncompiler: %s\nkernels: %s\n", qvl::version(), qvl::compiler().c_str(),
              qvl::kernels_reason().c_str());
  return 0;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

int unknown_command(const std::string& name) {
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.push_back(c.name);
  names.push_back("help");
  names.push_back("version");
  const std::string near = qvl::cli::closest_match(name, names);
  if (!near.empty())
    std::fprintf(stderr, "qvl: unknown command '%s'; did you mean '%s'?\n", name.c_str(), near.c_str());
  else
    std::fprintf(stderr, "qvl: unknown command '%s' (try 'qvl help')\n", name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    if (argc > 2) {  // qvl help run = qvl run --help
      const std::string topic = argv[2];
      if (topic == "help" || topic == "--help" || topic == "-h") {
        print_usage(stdout);
        return 0;
      }
      if (topic == "version" || topic == "--version" || topic == "-V") {
        std::printf("Usage: qvl version (or qvl --version, qvl -V)\nPrints qvl's version, the compiler that built it "
                    "and the kernel table this CPU runs.\n");
        return 0;
      }
      const Command* c = find_command(argv[2]);
      return c ? c->run({"--help"}) : unknown_command(argv[2]);
    }
    print_usage(stdout);
    return 0;
  }
  if (command == "--version" || command == "-V" || command == "version") {
    if (qvl::Status st = qvl::check_isa_request(); !st.ok()) {
      std::fprintf(stderr, "qvl: %s\n", st.message().c_str());
      return 2;
    }
    return print_version();
  }
  const Command* c = find_command(command);
  if (!c) return unknown_command(command);
  // A kernel table forced with QVL_ISA that this machine cannot run is refused, never silently replaced.
  if (qvl::Status st = qvl::check_isa_request(); !st.ok()) {
    std::fprintf(stderr, "qvl %s: %s\n", command.c_str(), st.message().c_str());
    return 2;
  }
  return c->run(qvl::cli::Args(argv + 2, argv + argc));
}
