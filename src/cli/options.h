// The one command-line option table: every option several subcommands share is declared here once (as in
// llama.cpp's common/arg.cpp), bound to the plain structs the code uses, with its default shown from the
// very value the code starts from; each subcommand adds the groups it needs to its CommandLine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "engine/documents.h"
#include "engine/generate.h"
#include "model/gguf_export.h"
#include "model/video_processor.h"
#include "engine/sampler.h"
#include "model/convert.h"
#include "model/kv_type.h"
#include "model/model.h"
#include "kernels/attention.h"

namespace qvl::cli {

// A subcommand's parser: a CLI::App named "qvl <command>" with qvl's help layout ("(default: X)" after
// each description) and "the last value wins" for options given twice.
class CommandLine : public CLI::App {
 public:
  CommandLine(std::string command, std::string description);
  const std::string& command() const { return command_; }

  // Parses args into the bound variables. nullopt: go on. Otherwise the exit code, the message printed:
  // 0 after --help (help on stdout); 2 on an unknown option ("unknown option '--tmep'; did you mean
  // '--temp'?"), a bad value or a missing option (CLI11's message and "run 'qvl <command> --help'").
  // llama.cpp's -ngl N / --n-gpu-layers N are dropped first, with one line saying qvl runs on the CPU.
  std::optional<int> parse_args(const Args& args);

 private:
  std::string command_;
};

// The candidate closest to `word` by edit distance (Levenshtein, an adjacent transposition counting as one
// edit); when none is close enough to be a plausible typo, the one sharing the longest part with it (3
// letters or more); else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// Another spelling of an option (llama.cpp's, Ollama's), bound to the same value and left out of --help
// (the option's description names it); unknown-option suggestions still see it.
template <typename T>
CLI::Option* add_hidden_alias(CLI::App& app, const std::string& name, T& value, CLI::Validator check = {});

// ---- Model: --model/-m ------------------------------------------------------------------------------------
enum class ModelSpec { kDirectory, kDirectoryOrHubId };
// --model/-m DIR (or DIR|HUB_ID). Not required by itself: a command marks it ->required(), or (serve)
// checks it against --demo.
CLI::Option* add_model_option(CLI::App& app, std::string& model, ModelSpec spec = ModelSpec::kDirectory);
// --revision R: with a hub id, the branch, tag or commit to use (from the cache, or downloaded), as `qvl pull
// --revision` takes it; refused with a local path (resolve_model).
CLI::Option* add_revision_option(CLI::App& app, std::string& revision);
// --mmproj FILE: a GGUF model's vision file, where it is not beside the text model's file (llama.cpp's option).
CLI::Option* add_mmproj_option(CLI::App& app, std::string& mmproj);
// --model-files DIR: the checkpoint's config and tokenizer files (default: those that ship with qvl).
CLI::Option* add_model_files_option(CLI::App& app, std::string& dir);

// ---- Threads: --threads/-t N (1..1024; default default_threads()), --pin -----------------------------------
// `threads` may start at 0 (the callee's default_threads()) or at default_threads(): one per physical core
// this process may use, within its cgroup CPU quota (util/cpu_budget.h).
// --pin is added when `pin` is given.
void add_thread_options(CLI::App& app, int& threads, bool* pin = nullptr);

// ---- Weights: --text-weights T, --vision-weights T (f32, f16, bf16, q8_0, q4_0; default
// default_weight_types()) -----------------------------------------------------------------------------------
// With `gguf` (qvl quantize): the GGUF types too (q4_k, q5_k, q6_k, q4_k_m, q5_k_m), recorded there by name;
// `types` takes the names that are qvl storage types.
void add_weight_options(CLI::App& app, WeightTypes& types, GgufWriteTypes* gguf = nullptr);

// ---- Context: --ctx N (16..2^20), --kv-type f16|f32 ---------------------------------------------------------
void add_context_options(CLI::App& app, int64_t& context, KVType& kv_type);

// ---- Vision attention: --vision-attention auto|f32|bf16 (kernels/attention.h) -------------------------------
// `choice` starts as the default shown ("auto").
void add_vision_attention_option(CLI::App& app, std::string& choice);
// Sets the loaded model's vision attention: f32, bf16 (f32 on a CPU without AVX512_BF16, said on stderr), or
// auto: bf16 where the CPU has it and the vision weights are quantized (q8_0, q4_0, K-quants), else f32.
void apply_vision_attention(const std::string& command, Model& model, const std::string& choice);

// ---- Image size: --min-pixels N, --max-pixels N (1..2^40; -1: the model's preprocessor_config.json) -------
void add_image_size_options(CLI::App& app, int64_t& min_pixels, int64_t& max_pixels);
// After parsing: both given with --min-pixels over --max-pixels is refused (exit 2), as the API refuses it; one of
// them alone is bounded by the other's model default where it is used.
std::optional<int> check_image_sizes(const std::string& command, int64_t min_pixels, int64_t max_pixels);
// --page N: the page of multi-page image files (TIFF) that --image reads; 0, the first, by default.
void add_image_page_option(CLI::App& app, int& page);
// PDF documents: --pdf-max-dpi, --pdf-max-pages, --pdf-page-timeout, --pdf-worker-memory-mb.
void add_document_options(CLI::App& app, DocumentOptions& o);

// The documents of run, chat and bench: --file (repeatable), --pages (of each), and the --pdf-* options.
struct DocumentArgs {
  std::vector<std::string> files;
  std::string pages;
  DocumentOptions options;
  // Each --file read and its page list checked (a confined pdfinfo), before the model loads; --pages without
  // --file is an error.
  Result<std::vector<DocumentFile>> open() const;
};
void add_document_file_options(CLI::App& app, DocumentArgs& args, const std::string& file_help);

// ---- Prompt: --image/-i FILE, -p/--prompt TEXT ------------------------------------------------------------
CLI::Option* add_image_option(CLI::App& app, std::vector<std::string>& images);  // repeatable, in order
CLI::Option* add_image_option(CLI::App& app, std::string& image);                // one image
CLI::Option* add_prompt_option(CLI::App& app, std::string& prompt);

// ---- Generation: -n/--max-tokens N (min..2^20), --temp, --top-k, --top-p, --seed, --logit-bias -----------------------
CLI::Option* add_max_tokens_option(CLI::App& app, int& max_tokens, int min = 0);

// The sampling options a user gave; the others keep the model's generation_config.json values.
struct SamplingArgs {
  std::optional<float> temperature;  // --temp T (>= 0; 0: greedy)
  std::optional<int> top_k;          // --top-k K (0..2^30; 0: off)
  std::optional<float> top_p;        // --top-p P ([0, 1]; 1: off, 0: the most likely token)
  std::optional<uint64_t> seed;      // --seed S (0..2^62)
  // --logit-bias ID=BIAS (repeatable, or comma-separated; llama.cpp's ID+BIAS and ID-BIAS too): BIAS in
  // [-100, 100] added to token ID's logit (-100 bans it). An ID given again replaces its bias.
  std::map<int32_t, float> logit_bias;
  void apply_to(SamplingParams& params) const;
};
void add_sampling_options(CLI::App& app, SamplingArgs& sampling);

// ---- Structured output: --json (any JSON object), --json-schema FILE (JSON that schema accepts) -----------
struct JsonOutputArgs {
  bool any_object = false;
  std::string schema_file;
  // Sets options.json: reads and compiles the schema (an error names the file and the keyword).
  Status apply_to(GenerateOptions& options) const;
};
void add_json_output_options(CLI::App& app, JsonOutputArgs& args);

// ---- Video: --video FILE (repeatable), --fps F, --video-min-pixels N, --video-max-pixels N, --max-frames N ------
// Pixel bounds count all sampled frames together, as video_preprocessor_config.json's do.
struct VideoArgs {
  std::vector<std::string> files;
  VideoOptions options;
};
void add_video_options(CLI::App& app, VideoArgs& args);

// ---- Per-image resolution: --detail and --resized, one value per --image in order (one value: every image) --
// As an image part's fields in the API: detail low | high | auto (low: the model's smallest budget),
// resized HxW (qwen-vl-utils' resized_height x resized_width: that size rounded to multiples of 32).
struct PerImageArgs {
  std::vector<std::string> detail;
  std::vector<std::string> resized;
  // Sets options.per_image for n_images images; an error names the option and the value.
  Status apply_to(GenerateOptions& options, size_t n_images) const;
};
void add_per_image_options(CLI::App& app, PerImageArgs& args);

// ---- Validators (for options a single command owns) -------------------------------------------------------
// An integer in [lo, hi]: "must be in [1, 1024], got 0" / "expects an integer, got 'x'".
CLI::Validator integer_in(long long lo, long long hi);

}  // namespace qvl::cli
