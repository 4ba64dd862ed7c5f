// The qvl binary's command line (src/cli/options.cpp): --help on every command, defaults shown from the values
// the code uses, unknown options and commands answered with the closest valid one, bad values named.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/convert.h"
#include "test_paths.h"
#include "test_process.h"
#include "tensor/quant.h"

namespace {

namespace fs = std::filesystem;

using qvl::test::contains;
using qvl::test::Ran;

// Runs `qvl args...` with stdout and stderr in files; returns its exit code and both outputs.
Ran qvl(const std::vector<std::string>& args) {
  const fs::path dir = fs::temp_directory_path() / ("qvl-cli-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  qvl::test::Proc p(QVL_BINARY, args, dir);
  Ran r;
  r.code = p.wait();
  r.out = p.out();
  r.err = p.err();
  // Leave nothing behind in the temporary directory (ctest runs each test in its own process).
  std::error_code ec;
  fs::remove(p.out_path(), ec);
  fs::remove(p.err_path(), ec);
  fs::remove(dir, ec);  // only once empty
  return r;
}

// The line of `help` that describes `option` (among its other spellings: "-c,--ctx,--ctx-size N").
std::string help_line(const std::string& help, const std::string& option) {
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);)
    if (contains(line, option + " ") || contains(line, option + ",")) return line;
  return "";
}

const std::vector<std::string> kConverted = {"tokenize", "preprocess", "run",  "bench",
                                              "quantize", "make-test-model", "serve", "pull"};

TEST(CliHelp, EveryConvertedCommandPrintsItsOptionsAndExitsZero) {
  for (const std::string& cmd : kConverted) {
    for (const char* flag : {"--help", "-h"}) {
      SCOPED_TRACE(cmd + " " + flag);
      Ran r = qvl({cmd, flag});
      EXPECT_EQ(r.code, 0) << r.err;
      EXPECT_TRUE(contains(r.out, "Usage: qvl " + cmd)) << r.out;
      EXPECT_TRUE(contains(r.out, "--help")) << r.out;
      EXPECT_EQ(r.err, "");
    }
  }
  // `qvl help run` is `qvl run --help`.
  Ran r = qvl({"help", "run"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "Usage: qvl run"));
}

TEST(CliParse, ServeReadsItsOptionsFromQvlEnvironmentVariables) {
  ::setenv("QVL_MAX_BODY", "5", 1);
  Ran r = qvl({"serve", "--demo"});
  Ran line = qvl({"serve", "--demo", "--max-body", "7"});  // the command line wins, and its value is the one named
  ::unsetenv("QVL_MAX_BODY");
  EXPECT_EQ(r.code, 2);
  // The bad value came from the environment: the variable is named, then the option it sets.
  EXPECT_TRUE(contains(r.err, "QVL_MAX_BODY (the environment, for --max-body)")) << r.err;
  EXPECT_TRUE(contains(r.err, "[1024")) << r.err;
  EXPECT_EQ(line.code, 2);
  EXPECT_TRUE(contains(line.err, "--max-body")) << line.err;
  EXPECT_FALSE(contains(line.err, "QVL_MAX_BODY")) << line.err;
  Ran help = qvl({"serve", "--help"});
  EXPECT_TRUE(contains(help.out, "QVL_")) << help.out;
}

TEST(CliParse, ServeExitsAtOnceOnABrokenModelDirectory) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("qvl-cli-badcfg-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(qvl::test::model_files_dir())) {
    if (e.path().extension() == ".json") std::filesystem::copy_file(e.path(), dir / e.path().filename(),
                                                                    std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_vl", "text_config": 5)";
  Ran r = qvl({"serve", "--model", dir.string(), "--port", "1"});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "config.json")) << r.err;
  EXPECT_FALSE(contains(r.err, "listening")) << r.err;
}

TEST(CliHelp, TopLevelHelpListsTheCommands) {
  for (const char* flag : {"help", "--help", "-h"}) {
    Ran r = qvl({flag});
    EXPECT_EQ(r.code, 0);
    for (const std::string& cmd : kConverted) EXPECT_TRUE(contains(r.out, "  " + cmd + " ")) << cmd;
    EXPECT_TRUE(contains(r.out, "  serve ")) << r.out;
  }
  for (const char* topic : {"help", "version"}) {  // help on the two words that are not commands
    Ran h = qvl({"help", topic});
    EXPECT_EQ(h.code, 0) << topic << ": " << h.err;
    EXPECT_FALSE(contains(h.err, "unknown command")) << h.err;
  }
  EXPECT_TRUE(contains(qvl({"help", "version"}).out, "Usage: qvl version"));
  Ran none = qvl({});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.err, "usage: qvl <command>"));
}

TEST(CliHelp, DefaultsComeFromTheCode) {
  const qvl::WeightTypes defaults = qvl::default_weight_types();
  ASSERT_TRUE(defaults.text && defaults.vision);
  const Ran run = qvl({"run", "--help"});
  ASSERT_EQ(run.code, 0);
  // The issue: `qvl run --help` said "as stored"; the weights default to q8_0.
  EXPECT_TRUE(contains(help_line(run.out, "--text-weights"), "(default: q8_0)")) << run.out;
  EXPECT_TRUE(contains(help_line(run.out, "--text-weights"),
                       std::string("(default: ") + qvl::weight_type_name(*defaults.text) + ")"));
  EXPECT_TRUE(contains(help_line(run.out, "--vision-weights"),
                       std::string("(default: ") + qvl::weight_type_name(*defaults.vision) + ")"));
  EXPECT_FALSE(contains(run.out, "as stored"));
  EXPECT_TRUE(contains(help_line(run.out, "--max-tokens"), "(default: 256)"));
  EXPECT_TRUE(contains(help_line(run.out, "--ctx"), "(default: 4096)"));
  EXPECT_TRUE(contains(help_line(run.out, "--kv-type"), "(default: f16)"));
  EXPECT_TRUE(contains(help_line(run.out, "--vision-attention"), "(default: auto)"));
  // bench's own defaults.
  const Ran bench = qvl({"bench", "--help"});
  EXPECT_TRUE(contains(help_line(bench.out, "--max-tokens"), "(default: 64)")) << bench.out;
  EXPECT_TRUE(contains(help_line(bench.out, "--runs"), "(default: 3)"));
  EXPECT_TRUE(contains(help_line(bench.out, "--prompt"), "Describe this image."));
}

TEST(CliErrors, UnknownOptionSuggestsTheClosest) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const Case cases[] = {
      {{"run", "-m", "DIR", "-p", "hi", "--tmep", "0.5"}, "qvl run: unknown option '--tmep'; did you mean '--temp'?\n"},
      {{"run", "--modle", "DIR", "-p", "hi"}, "qvl run: unknown option '--modle'; did you mean '--model'?\n"},
      {{"bench", "--modle=DIR"}, "qvl bench: unknown option '--modle'; did you mean '--model'?\n"},
      {{"bench", "-m", "DIR", "--thread", "2"}, "qvl bench: unknown option '--thread'; did you mean '--threads'?\n"},
      {{"quantize", "--vison-weights", "q4_0"},
       "qvl quantize: unknown option '--vison-weights'; did you mean '--vision-weights'?\n"},
      {{"make-test-model", "--preest", "tiny"},
       "qvl make-test-model: unknown option '--preest'; did you mean '--preset'?\n"},
      {{"preprocess", "--max-pixel", "5"}, "qvl preprocess: unknown option '--max-pixel'; did you mean '--max-pixels'?\n"},
      {{"tokenize", "--jsn", "x"}, "qvl tokenize: unknown option '--jsn'; did you mean '--json'?\n"},
      {{"serve", "--prot", "9"}, "qvl serve: unknown option '--prot'; did you mean '--port'?\n"},
      {{"pull", "--revison", "x", "a/b"}, "qvl pull: unknown option '--revison'; did you mean '--revision'?\n"},
  };
  for (const Case& c : cases) {
    Ran r = qvl(c.args);
    EXPECT_EQ(r.code, 2) << c.expected;
    EXPECT_EQ(r.err, c.expected);
  }
  // A one-letter option is one edit from every other: no guess.
  EXPECT_FALSE(contains(qvl({"tokenize", "-m", "DIR", "-x"}).err, "did you mean"));
  // Nothing close: no guess, the help hint instead.
  Ran r = qvl({"run", "--zzzzzzzz"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "unknown option '--zzzzzzzz'")) << r.err;
  EXPECT_FALSE(contains(r.err, "did you mean"));
  EXPECT_TRUE(contains(r.err, "qvl run --help"));
}

TEST(CliErrors, BadValueNamesTheOption) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {{"run", "-m", "DIR", "-p", "hi", "--threads", "0"}, {"qvl run: ", "--threads", "[1, 1024]", "got 0"}},
      {{"run", "-m", "DIR", "-p", "hi", "-t", "many"}, {"--threads", "expects an integer, got 'many'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--text-weights", "q3"}, {"--text-weights", "unknown type 'q3'", "q8_0"}},
      {{"bench", "-m", "DIR", "--kv-type", "f8"}, {"--kv-type", "unknown type 'f8'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--vision-attention", "fp8"}, {"--vision-attention", "unknown precision 'fp8'", "(auto, f32, bf16)"}},
      {{"run", "-m", "DIR", "-p", "hi", "--temp", "-1"}, {"--temp", ">= 0"}},
      {{"run", "-m", "DIR", "-p", "hi", "--top-p", "1.5"}, {"--top-p", "[0, 1]"}},
      {{"run", "-m", "DIR", "-p", "hi", "--logit-bias", "9707"}, {"--logit-bias", "expects ID=BIAS", "got '9707'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--fps", "abc"}, {"--fps: expects a number, got 'abc'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--fps", "0"}, {"--fps: must be in [0.01, 1000], got 0"}},
      {{"chat", "-m", "DIR", "--logit-bias", "9707=101"}, {"--logit-bias", "[-100, 100]", "got '9707=101'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--logit-bias", "x=1"}, {"--logit-bias", "got 'x=1'"}},
      {{"run", "-m", "DIR", "-p", "hi", "--ctx", "8"}, {"--ctx", "[16, 1048576]"}},
      {{"bench", "-m", "DIR", "-n", "0"}, {"--max-tokens", "[1, 1048576]"}},
      {{"quantize", "-m", "DIR", "--out", "OUT", "--threads", "2000"}, {"--threads", "[1, 1024]"}},
      {{"make-test-model", "--out", "OUT", "--preset", "7b"}, {"--preset", "2b, 4b or 8b"}},
      {{"preprocess", "-m", "DIR", "-i", "F", "--min-pixels", "0"}, {"--min-pixels"}},
      {{"run", "-p", "hi"}, {"--model is required", "qvl run --help"}},
      {{"run", "-m", "DIR"}, {"--prompt is required"}},
      {{"quantize", "-m", "DIR"}, {"--out is required"}},
      {{"tokenize", "-m", "DIR", "a", "--chat", "c.json"}, {"TEXT excludes --chat"}},
      {{"tokenize", "-m", "DIR", "a", "b"}, {"unexpected argument 'b'"}},
      {{"serve", "--demo", "--port", "70000"}, {"--port", "[1, 65535]"}},
      {{"serve", "--demo", "--timeout", "-3"}, {"--timeout", "seconds"}},
      {{"serve", "--demo", "--model", "x/y"}, {"--model or --demo, not both"}},
      {{"serve", "--demo", "--revision", "main"}, {"--revision is for a hub id given as --model, not --demo"}},
      {{"serve", "--model", "x/y", "--revision", "../../etc"}, {"--revision: revision '../../etc' is not a branch"}},
      {{"pull", "a/b", "--source", "gitlab"}, {"--source"}},
      // Both bounds given the wrong way round are refused by every command that takes them, as the API refuses them.
      {{"run", "-m", "DIR", "-p", "hi", "--min-pixels", "1000000", "--max-pixels", "1000"},
       {"qvl run: --min-pixels 1000000 is larger than --max-pixels 1000"}},
      {{"preprocess", "-m", "DIR", "-i", "F", "--min-pixels", "5000", "--max-pixels", "4000"}, {"qvl preprocess: --min-pixels 5000"}},
      {{"serve", "--demo", "--min-pixels", "5000", "--max-pixels", "4000"}, {"qvl serve: --min-pixels 5000"}},
      // What can only be a local path never goes to a hub.
      {{"run", "-m", "./no-such-model", "-p", "hi"}, {"./no-such-model: no such file or directory"}},
      {{"run", "-m", "no/such.gguf", "-p", "hi"}, {"no/such.gguf: no such file or directory"}},
  };
  for (const Case& c : cases) {
    Ran r = qvl(c.args);
    EXPECT_EQ(r.code, 2) << c.parts[0] << ": " << r.err;
    for (const std::string& part : c.parts) EXPECT_TRUE(contains(r.err, part)) << part << " in: " << r.err;
  }
}

TEST(CliErrors, UnknownCommandSuggestsTheClosest) {
  Ran r = qvl({"rnu", "--help"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "qvl: unknown command 'rnu'; did you mean 'run'?\n");
  EXPECT_EQ(qvl({"quantise"}).err, "qvl: unknown command 'quantise'; did you mean 'quantize'?\n");
  EXPECT_EQ(qvl({"make-testmodel"}).err, "qvl: unknown command 'make-testmodel'; did you mean 'make-test-model'?\n");
  Ran far = qvl({"xyzzy"});
  EXPECT_EQ(far.code, 2);
  EXPECT_FALSE(contains(far.err, "did you mean"));
  EXPECT_TRUE(contains(far.err, "qvl help"));
}

// The parsed values reach the commands: a tiny model is written, tokenized, preprocessed, run and benched.
TEST(CliParse, OptionsReachTheCommands) {
  const fs::path dir = fs::temp_directory_path() / ("qvl-cli-model-" + std::to_string(getpid()));
  Ran made = qvl({"make-test-model", "--preset", "tiny", "--seed", "1", "--out", dir.string(), "--model-files",
                  QVL_MODEL_FILES_DIR, "--threads", "1"});
  ASSERT_EQ(made.code, 0) << made.err;

  Ran tok = qvl({"tokenize", "--model=" + dir.string(), "--json", "Hello world"});
  EXPECT_EQ(tok.code, 0) << tok.err;
  EXPECT_TRUE(contains(tok.out, "\"count\":2")) << tok.out;
  Ran dashed = qvl({"tokenize", "-m", dir.string(), "--", "-x"});  // text starting with '-' after "--"
  EXPECT_EQ(dashed.code, 0) << dashed.err;

  const std::string image = std::string(QVL_TEST_DATA_DIR) + "/images/png_rgb8_448x448.png";
  Ran pre = qvl({"preprocess", "-m", dir.string(), "--image", image, "--min-pixels", "3136", "--max-pixels", "50176"});
  EXPECT_EQ(pre.code, 0) << pre.err;
  EXPECT_TRUE(contains(pre.out, "resized     224x224")) << pre.out;

  // --image twice: two images, in order (twice the image tokens of one); the last -n wins.
  Ran one = qvl({"run", "-m", dir.string(), "-i", image, "-p", "hi", "-n", "2", "--temp", "0", "-t", "1",
                 "--min-pixels", "3136", "--max-pixels", "50176"});
  Ran two = qvl({"run", "-m", dir.string(), "-i", image, "--image", image, "-p", "hi", "-n", "9", "-n", "2",
                 "--temp", "0", "-t", "1", "--min-pixels", "3136", "--max-pixels", "50176", "--kv-type", "f32", "--text-weights", "f32"});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(two.code, 0) << two.err;
  EXPECT_TRUE(contains(one.err, "(49 image tokens)")) << one.err;
  EXPECT_TRUE(contains(two.err, "(98 image tokens)")) << two.err;
  EXPECT_TRUE(contains(two.err, "decode 2 tokens")) << two.err;
  EXPECT_TRUE(contains(two.err, "text f32, vision q8_0")) << two.err;

  // Per-image resolution, in --image order: 64x96 is 2x3 tokens, 96x128 3x4; one value sizes every image;
  // detail low is the model's smallest budget (256² pixels: 64 tokens) within the run's --min-pixels.
  Ran sized = qvl({"run", "-m", dir.string(), "-i", image, "-i", image, "-p", "hi", "-n", "1", "-t", "1",
                   "--resized", "64x96,96x128"});
  EXPECT_EQ(sized.code, 0) << sized.err;
  EXPECT_TRUE(contains(sized.err, "(18 image tokens)")) << sized.err;
  Ran all = qvl({"run", "-m", dir.string(), "-i", image, "-i", image, "-p", "hi", "-n", "1", "-t", "1", "--resized", "64x96"});
  EXPECT_TRUE(contains(all.err, "(12 image tokens)")) << all.err;
  Ran low = qvl({"run", "-m", dir.string(), "-i", image, "-i", image, "-p", "hi", "-n", "1", "-t", "1", "--detail", "low,high"});
  EXPECT_EQ(low.code, 0) << low.err;
  EXPECT_TRUE(contains(low.err, "(260 image tokens)")) << low.err;  // 64 + 196 (448² at the model's budget)
  Ran wrong = qvl({"run", "-m", dir.string(), "-i", image, "-p", "hi", "--resized", "64x96,96x128"});
  EXPECT_NE(wrong.code, 0);
  EXPECT_TRUE(contains(wrong.err, "--resized: 2 values for 1 image(s)")) << wrong.err;
  EXPECT_NE(qvl({"run", "-m", dir.string(), "-i", image, "-p", "hi", "--resized", "64"}).code, 0);

  // --logit-bias reaches run's sampler (chat's: CliChat), in both spellings: +100 on token 9707 ("Hello") makes the
  // answer that token each time, even sampled; an id past the vocabulary is refused by the engine.
  Ran biased = qvl({"run", "-m", dir.string(), "-p", "hi", "-n", "3", "-t", "1", "--temp", "0", "--logit-bias", "9707=100"});
  EXPECT_EQ(biased.code, 0) << biased.err;
  EXPECT_EQ(biased.out, "HelloHelloHello\n");
  Ran llama = qvl({"run", "-m", dir.string(), "-p", "hi", "-n", "3", "-t", "1", "--temp", "1.2", "--logit-bias",
                   "9707+100,14990-5", "--logit-bias", "9707=90"});
  EXPECT_EQ(llama.code, 0) << llama.err;
  EXPECT_EQ(llama.out, "HelloHelloHello\n");
  Ran outside = qvl({"run", "-m", dir.string(), "-p", "hi", "-n", "1", "-t", "1", "--logit-bias", "151669=1"});
  EXPECT_EQ(outside.code, 2);  // a bad argument, as a prompt over the context
  EXPECT_TRUE(contains(outside.err, "token id 151669 is outside the vocabulary [0, 151669)")) << outside.err;

  Ran bench = qvl({"bench", "-m", dir.string(), "-p", "Hi", "-n", "2", "--runs", "1", "--json", "--threads", "1"});
  EXPECT_EQ(bench.code, 0) << bench.err;
  EXPECT_TRUE(contains(bench.out, "\"runs\":1")) << bench.out;
  EXPECT_TRUE(contains(bench.out, "\"generated_tokens\":2")) << bench.out;

  // --vision-attention reaches the vision tower (bf16 where this CPU has the tile, else f32 and a line saying
  // so); the tile choice and the first token's parts, which add up to the first token, are in the JSON.
  Ran b16 = qvl({"bench", "-m", dir.string(), "-i", image, "-n", "4", "--runs", "1", "--json", "--threads", "1",
                 "--vision-attention", "bf16"});
  ASSERT_EQ(b16.code, 0) << b16.err;
  const auto j = nlohmann::json::parse(b16.out);
  const bool has_bf16 = qvl::effective_attention_precision(qvl::AttentionPrecision::kBF16) == qvl::AttentionPrecision::kBF16;
  EXPECT_EQ(j["vision_attention"], has_bf16 ? "bf16" : "f32");
  EXPECT_EQ(contains(b16.err, "runs in f32"), !has_bf16) << b16.err;
  EXPECT_EQ(j["tiles"]["attention_kv_block"], qvl::tile_choice().attn_kv_block);
  EXPECT_EQ(j["tiles"]["core"], qvl::tile_choice().core);
  double sum = 0;
  for (const auto& [part, ms] : j["first_token_breakdown_ms"].items()) sum += ms.get<double>();
  EXPECT_NEAR(sum, j["ttft_ms"].get<double>(), 0.05 * j["ttft_ms"].get<double>() + 0.5) << b16.out;
  for (const char* part : {"vision_gemm", "vision_attention", "vision_merger", "prefill_gemm", "prefill_attention"})
    EXPECT_GT(j["first_token_breakdown_ms"][part].get<double>(), 0.0) << part << ": " << b16.out;
  // A decode step's parts (per token after the first) add up to a step: 1 / decode_tok_s.
  ASSERT_EQ(j["generated_tokens"], 4) << b16.out;
  double step = 0;
  for (const char* part : {"gemm", "attention", "other"}) {
    EXPECT_GT(j["decode_breakdown_ms_per_token"][part].get<double>(), 0.0) << part << ": " << b16.out;
    step += j["decode_breakdown_ms_per_token"][part].get<double>();
  }
  EXPECT_NEAR(step, 1000 / j["decode_tok_s"].get<double>(), 0.05 * step + 0.05) << b16.out;
  // auto (the default): bf16 with quantized vision weights (the default q8_0) where the CPU has it, f32 with
  // float weights.
  for (const char* weights : {"q8_0", "f32"}) {
    Ran a = qvl({"bench", "-m", dir.string(), "-i", image, "-n", "1", "--runs", "1", "--json", "--threads", "1",
                 "--vision-weights", weights});
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["vision_attention"], has_bf16 && std::string(weights) == "q8_0" ? "bf16" : "f32")
        << weights;
    EXPECT_FALSE(contains(a.err, "runs in f32")) << "auto says nothing: " << a.err;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
