// The shared option table and the parser every subcommand runs (help, typo suggestions, error messages).
#include "cli/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/json_grammar.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"
#include "util/file.h"
#include "util/thread_pool.h"
#include "util/cpu_budget.h"

namespace qvl::cli {

namespace {

// Help lines read "--threads N   model threads (default: 4, one per physical core)": the type name only
// after the option (no "=default", no validator text), the default and "required" after the description.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";  // a flag
    // CLI11 appends each check's description after a ':' ("low|high|auto:{low,high,auto}"): the type name
    // alone says it (no type name here has a ':').
    const std::string type = opt->get_type_name();
    std::string out = " " + type.substr(0, type.find(':'));
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    if (opt->get_required()) return desc + " (required)";
    if (!opt->get_default_str().empty()) desc += " (default: " + opt->get_default_str() + ")";
    return desc;
  }
};

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions
// ("--tmep" is one edit from "--temp").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// Every spelling of every option of `app`: "--temp", "-t", ...
std::vector<std::string> option_spellings(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string type_list() {
  return "f32, f16, bf16, q8_0 or q4_0";
}

// A number that parses completely, for the float options' validators.
bool parse_float(const std::string& s, float* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtof(s.c_str(), &end);
  return !s.empty() && *end == '\0' && errno != ERANGE;
}

// "--temp T": a float option checked by `ok`, whose value is handed to `set` after the check.
CLI::Option* add_float(CLI::App& app, const std::string& name, std::optional<float>& out, bool (*ok)(float),
                       const std::string& expects, const std::string& desc) {
  auto* opt = app.add_option_function<float>(name, [&out](const float& v) { out = v; }, desc);
  opt->type_name("X")->check(
      [ok, expects](const std::string& s) -> std::string {
        float v = 0;
        if (!parse_float(s, &v)) return "expects a number, got '" + s + "'";
        return ok(v) ? std::string() : "must be " + expects + ", got " + s;
      },
      "");
  return opt;
}

}  // namespace

template <typename T>
CLI::Option* add_hidden_alias(CLI::App& app, const std::string& name, T& value, CLI::Validator check) {
  // (CLI11 names a hidden option "" in its errors: the check names it.)
  CLI::Validator named(
      [check, name](std::string& v) -> std::string {
        std::string e = check(v);
        return e.empty() ? e : name + ": " + e;
      },
      "");
  return app.add_option(name, value, "")->group("")->check(named);
}
template CLI::Option* add_hidden_alias<int>(CLI::App&, const std::string&, int&, CLI::Validator);
template CLI::Option* add_hidden_alias<int64_t>(CLI::App&, const std::string&, int64_t&, CLI::Validator);
template CLI::Option* add_hidden_alias<std::string>(CLI::App&, const std::string&, std::string&, CLI::Validator);

CommandLine::CommandLine(std::string command, std::string description)
    : CLI::App(std::move(description), "qvl " + command), command_(std::move(command)) {
  option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // "--temp 1 --temp 0": 0
  set_help_flag("-h,--help", "print this help and exit");
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(28);
  this->formatter(formatter);
}

namespace {

// llama.cpp's GPU options mean nothing here: qvl runs on the CPU. "-ngl N", "--n-gpu-layers N", "--gpu-layers N"
// (and their "=N" forms) are taken out of `args`, with one line saying so.
Args drop_gpu_options(const std::string& command, const Args& args) {
  Args out;
  bool said = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    if (name != "-ngl" && name != "--n-gpu-layers" && name != "--gpu-layers") {
      out.push_back(a);
      continue;
    }
    // The value: "=N" attached, or the next argument when it is one (llama.cpp's "-ngl 99", "-ngl all", "-ngl -1").
    auto negative_number = [](const std::string& v) {
      return v.size() > 1 && v[0] == '-' && std::all_of(v.begin() + 1, v.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (a.find('=') == std::string::npos && i + 1 < args.size() && !args[i + 1].empty() &&
        (args[i + 1][0] != '-' || negative_number(args[i + 1])))
      ++i;
    if (!said)
      std::fprintf(stderr, "%s: ignoring %s: qvl runs on the CPU (no layers to offload to a GPU)\n", command.c_str(),
                   name.c_str());
    said = true;
  }
  return out;
}

}  // namespace

std::optional<int> CommandLine::parse_args(const Args& given) {
  const Args args = drop_gpu_options(get_name(), given);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes a vector from its back
  const std::string hint = "; run '" + get_name() + " --help' for the options";
  try {
    parse(std::move(reversed));
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    std::fputs(help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    // The whole command line is read before any value is checked, so the arguments no option took are
    // known here whatever the error: an unknown option is reported first, it is the likeliest cause.
    for (const std::string& arg : remaining()) {
      if (arg.size() < 2 || arg[0] != '-') continue;
      const std::string name = arg.substr(0, arg.find('='));
      const std::string near = closest_match(name, option_spellings(*this));
      if (!near.empty())
        std::fprintf(stderr, "%s: unknown option '%s'; did you mean '%s'?\n", get_name().c_str(), name.c_str(),
                     near.c_str());
      else
        std::fprintf(stderr, "%s: unknown option '%s'%s\n", get_name().c_str(), name.c_str(), hint.c_str());
      return 2;
    }
    if (!remaining().empty()) {
      std::fprintf(stderr, "%s: unexpected argument '%s'%s\n", get_name().c_str(), remaining().front().c_str(),
                   hint.c_str());
      return 2;
    }
    std::string what = e.what();
    if (what.rfind(": ", 0) == 0) what.erase(0, 2);  // a hidden alias's error, named by its check
    // A bad value that came from the option's environment variable (qvl serve's QVL_*), not from the command
    // line: the message names the variable, which is what the user has to fix.
    if (const size_t colon = what.find(':'); what.rfind("--", 0) == 0 && colon != std::string::npos) {
      const CLI::Option* opt = get_option_no_throw(what.substr(0, colon));
      const bool on_line = opt && std::any_of(args.begin(), args.end(), [&](const std::string& a) {
        const std::string name = a.substr(0, a.find('='));
        return name.rfind("--", 0) == 0 ? opt->check_lname(name.substr(2)) : name.rfind("-", 0) == 0 && opt->check_sname(name.substr(1));
      });
      if (opt && !on_line && !opt->get_envname().empty() && std::getenv(opt->get_envname().c_str()))
        what = opt->get_envname() + " (the environment, for " + what.substr(0, colon) + ")" + what.substr(colon);
    }
    std::fprintf(stderr, "%s: %s%s\n", get_name().c_str(), what.c_str(), hint.c_str());
    return 2;
  }
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  auto strip = [](const std::string& s) { return s.substr(std::min(s.find_first_not_of('-'), s.size())); };
  const std::string w = strip(word);
  if (w.size() < 2) return "";  // "-x": every one-letter option is one edit away; no guess is better
  // A typo is at most one edit in three characters: "tmep" (1 of 4) yes, "xyz" for "run" (3 of 3) no.
  const size_t allowed = std::max<size_t>(1, std::min<size_t>(3, w.size() / 3));
  std::string best;
  size_t best_d = allowed + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(w, strip(c));
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty()) return best;
  // Not a typo: the option of which the word is a part or which is a part of the word, the longest overlap
  // ("--ctx-len": "--ctx"; "--max" : "--max-tokens"), at least 3 letters.
  size_t best_len = 2;
  for (const std::string& c : candidates) {
    const std::string cs = strip(c);
    const size_t overlap = w.find(cs) != std::string::npos ? cs.size() : cs.find(w) != std::string::npos ? w.size() : 0;
    if (overlap > best_len) best_len = overlap, best = c;
  }
  return best;
}

CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE) return "expects an integer, got '" + s + "'";
        if (v < lo || v > hi) return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s;
        return {};
      },
      "");
}

// ---- Model ---------------------------------------------------------------------------------------------------

CLI::Option* add_model_option(CLI::App& app, std::string& model, ModelSpec spec) {
  if (spec == ModelSpec::kDirectoryOrHubId) {
    return app.add_option("-m,--model", model,
                          "a model directory, or a hub id (Qwen/Qwen3-VL-2B-Instruct, modelscope:ORG/NAME) taken "
                          "from the hub's local cache, or downloaded into it on first use (qvl pull)")
        ->type_name("DIR|HUB_ID");
  }
  return app.add_option("-m,--model", model,
                        "the model directory (a checkpoint, or one written by 'qvl quantize' or 'qvl make-test-model')")
      ->type_name("DIR");
}

CLI::Option* add_revision_option(CLI::App& app, std::string& revision) {
  return app.add_option("--revision", revision,
                        "with a hub id: the branch, tag or commit to use (a pinned commit never changes under you)")
      ->type_name("R")
      ->default_str("the hub's default branch");
}

CLI::Option* add_mmproj_option(CLI::App& app, std::string& mmproj) {
  return app.add_option("--mmproj", mmproj,
                        "a GGUF model's vision file (mmproj-*.gguf), where it is not beside the model's .gguf; a "
                        "GGUF with no vision file answers text only")
      ->type_name("FILE")
      ->default_str("the mmproj beside the model's file");
}

CLI::Option* add_model_files_option(CLI::App& app, std::string& dir) {
  return app.add_option("--model-files", dir,
                        "the checkpoint's config and tokenizer files (config.json, tokenizer.json, ...)")
      ->type_name("DIR")
      ->default_str("the files built into qvl, models/qwen3-vl-2b-instruct");
}

// ---- Threads -------------------------------------------------------------------------------------------------

void add_thread_options(CLI::App& app, int& threads, bool* pin) {
  const int cores = default_threads();
  app.add_option("-t,--threads", threads, "model threads")
      ->type_name("N")
      ->check(integer_in(1, 1024))
      ->each([](const std::string& value) {
        // Allowed, for tests and for taking turns on purpose, but rarely what was meant.
        int cpus = 0;
        allowed_core_cpus(&cpus);
        const long n = std::strtol(value.c_str(), nullptr, 10);
        if (cpus > 0 && n > cpus)
          std::fprintf(stderr,
                       "qvl: --threads %ld is more than the %d CPUs this process may use: the threads will take turns "
                       "on them, slower than --threads %d\n",
                       n, cpus, cpus);
      })
      ->default_str(std::to_string(threads > 0 ? threads : cores) +
                    (threads <= 0 || threads == cores
                         ? ", one per physical core this process may use, within its cgroup CPU quota"
                         : ""));
  if (pin) app.add_flag("--pin", *pin, "pin the model threads, one per physical core (within taskset's CPUs)");
}

// ---- Weights -------------------------------------------------------------------------------------------------

void add_weight_options(CLI::App& app, WeightTypes& types, GgufWriteTypes* gguf) {
  auto add = [&](const std::string& name, std::optional<WeightType>& type, std::string* gguf_type, const std::string& what) {
    const std::string list = gguf ? std::string(gguf_write_type_list()) + " (K-quants: --format gguf)" : type_list();
    app.add_option_function<std::string>(
           name,
           [&type, gguf_type](const std::string& s) {
             WeightType t;
             if (weight_type_from_name(s, &t)) type = t;
             if (gguf_type) *gguf_type = s;
           },
           "storage of the " + what + " weights, converted at load: " + list)
        ->type_name("T")
        ->check(
            [list, allow_gguf = gguf != nullptr](const std::string& s) -> std::string {
              WeightType t;
              if (weight_type_from_name(s, &t) || (allow_gguf && is_gguf_write_type(s))) return std::string();
              return "unknown type '" + s + "' (" + list + ")";
            },
            "")
        ->default_str(type ? weight_type_name(*type) : "as stored");
  };
  add("--text-weights", types.text, gguf ? &gguf->text : nullptr, "text decoder's");
  add("--vision-weights", types.vision, gguf ? &gguf->vision : nullptr, "vision tower's");
}

// ---- Context -------------------------------------------------------------------------------------------------

void add_context_options(CLI::App& app, int64_t& context, KVType& kv_type) {
  app.add_option("-c,--ctx", context, "context: prompt + answer tokens (also --ctx-size)")
      ->type_name("N")
      ->check(integer_in(16, 1 << 20))
      ->default_str(std::to_string(context));
  add_hidden_alias(app, "--ctx-size", context, integer_in(16, 1 << 20));
  app.add_option_function<std::string>(
         "--kv-type",
         [&kv_type](const std::string& s) { kv_type_from_name(s, &kv_type); },
         "KV cache storage: f16 (half the memory) or f32 (exactly the reference's values)")
      ->type_name("T")
      ->check(
          [](const std::string& s) -> std::string {
            KVType t;
            return kv_type_from_name(s, &t) ? std::string() : "unknown type '" + s + "' (f16, f32)";
          },
          "")
      ->default_str(kv_type_name(kv_type));
}

// ---- Vision attention ----------------------------------------------------------------------------------------

void add_vision_attention_option(CLI::App& app, std::string& choice) {
  app.add_option("--vision-attention", choice,
                 "the vision tower's attention arithmetic: f32 (exact to float32 rounding), bf16 (queries, keys, "
                 "probabilities and values rounded to bfloat16 and multiplied by AVX512_BF16's vdpbf16ps: faster on "
                 "large images; f32 on CPUs without it) or auto (bf16 where the CPU has it and the vision weights are "
                 "quantized, whose own error is ~50x larger; else f32)")
      ->type_name("P")
      ->check(
          [](const std::string& s) -> std::string {
            AttentionPrecision p;
            return s == "auto" || parse_attention_precision(s, &p) ? std::string()
                                                                   : "unknown precision '" + s + "' (auto, f32, bf16)";
          },
          "")
      ->default_str(choice);
}

void apply_vision_attention(const std::string& command, Model& model, const std::string& choice) {
  AttentionPrecision want = AttentionPrecision::kF32;
  if (choice == "auto") {
    const WeightType t = model.vision_weight_type();
    const bool quantized = t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || is_kquant(t);
    want = quantized && effective_attention_precision(AttentionPrecision::kBF16) == AttentionPrecision::kBF16
               ? AttentionPrecision::kBF16
               : AttentionPrecision::kF32;
  } else {
    parse_attention_precision(choice, &want);
    if (effective_attention_precision(want) != want)
      std::fprintf(stderr,
                   "qvl %s: --vision-attention %s: the %s kernels have no bf16 dot product (AVX512_BF16); the vision "
                   "tower's attention runs in f32\n",
                   command.c_str(), attention_precision_name(want), kernels().name);
  }
  model.set_vision_attention(effective_attention_precision(want));
}

// ---- Image size ----------------------------------------------------------------------------------------------

void add_image_size_options(CLI::App& app, int64_t& min_pixels, int64_t& max_pixels) {
  auto shown = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("the model's preprocessor_config.json"); };
  app.add_option("--min-pixels", min_pixels, "images with fewer pixels are scaled up")
      ->type_name("N")
      ->check(integer_in(1, 1ll << 40))
      ->default_str(shown(min_pixels));
  app.add_option("--max-pixels", max_pixels, "images with more pixels are scaled down")
      ->type_name("N")
      ->check(integer_in(1, 1ll << 40))
      ->default_str(shown(max_pixels));
}

std::optional<int> check_image_sizes(const std::string& command, int64_t min_pixels, int64_t max_pixels) {
  if (min_pixels > 0 && max_pixels > 0 && min_pixels > max_pixels)
    return fail(command, "--min-pixels " + std::to_string(min_pixels) + " is larger than --max-pixels " +
                             std::to_string(max_pixels) + "; give a minimum at most the maximum");
  return std::nullopt;
}

void add_document_options(CLI::App& app, DocumentOptions& o) {
  app.add_option("--pdf-max-dpi", o.max_dpi,
                 "PDF pages are rendered at the DPI that fits the image budget (max_pixels), never finer than this")
      ->type_name("DPI")->check(integer_in(18, 600))->default_str(std::to_string(o.max_dpi));
  app.add_option("--pdf-max-pages", o.max_pages_per_request, "PDF pages one request may send, all documents together")
      ->type_name("N")->check(integer_in(1, 2000))->default_str(std::to_string(o.max_pages_per_request));
  app.add_option("--pdf-page-timeout", o.pdf.render_timeout_s,
                 "time (wall clock and CPU) the confined renderer may take for one PDF page")
      ->type_name("SEC")->check(CLI::Range(0.5, 600.0))->default_str("20");
  app.add_option_function<int64_t>(
         "--pdf-worker-memory-mb", [&o](int64_t mb) { o.pdf.worker_memory_bytes = static_cast<uint64_t>(mb) << 20; },
         "address space of each confined PDF renderer (MiB)")
      ->type_name("MIB")->check(integer_in(64, 1 << 20))->default_str(std::to_string(o.pdf.worker_memory_bytes >> 20));
}

void add_document_file_options(CLI::App& app, DocumentArgs& args, const std::string& file_help) {
  app.add_option("--file", args.files, file_help)
      ->type_name("FILE")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->allow_extra_args(false);
  app.add_option("--pages", args.pages, "the pages of each --file to send, e.g. 1-3,7 (default: all)")->type_name("PAGES");
  add_document_options(app, args.options);
}

Result<std::vector<DocumentFile>> DocumentArgs::open() const {
  if (!pages.empty() && files.empty()) return Status::Error("--pages selects pages of a --file; give the PDF with --file");
  std::vector<DocumentFile> docs;
  for (const std::string& path : files) {
    QVL_ASSIGN_OR_RETURN(DocumentFile doc, open_document_file(path, pages, options));
    docs.push_back(std::move(doc));
  }
  return docs;
}

void add_image_page_option(CLI::App& app, int& page) {
  app.add_option("--page", page, "the page of a multi-page image file (TIFF) to read, counting from 0")
      ->type_name("N")
      ->check(integer_in(0, 9999))
      ->default_str("0");
}

// ---- Video ---------------------------------------------------------------------------------------------------

void add_video_options(CLI::App& app, VideoArgs& args) {
  app.add_option("--video", args.files,
                 "a video file (MP4/MOV, MKV/WebM, AVI, MPEG-TS, animated GIF or WebP); repeat for several, in order")
      ->type_name("FILE")
      ->allow_extra_args(true)  // "--video a.mp4 b.mp4", as "--image" takes several
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--fps", args.options.fps, "video frames sampled per second")
      ->type_name("F")
      ->check(
          [](const std::string& v) -> std::string {
            float x = 0;
            if (!parse_float(v, &x)) return "expects a number, got '" + v + "'";
            return x >= 0.01f && x <= 1000.0f ? std::string() : "must be in [0.01, 1000], got " + v;
          },
          "")
      ->default_str("the model's video_preprocessor_config.json (2)");
  app.add_option("--video-min-pixels", args.options.min_pixels, "videos with fewer pixels (all sampled frames) are scaled up")
      ->type_name("N")
      ->check(integer_in(1, 1ll << 40))
      ->default_str("the model's video_preprocessor_config.json");
  app.add_option("--video-max-pixels", args.options.max_pixels,
                 "videos with more pixels (all sampled frames together) are scaled down")
      ->type_name("N")
      ->check(integer_in(1, 1ll << 40))
      ->default_str("the model's video_preprocessor_config.json");
  app.add_option("--max-frames", args.options.max_frames, "at most this many frames sampled from a video")
      ->type_name("N")
      ->check(integer_in(1, 2048))
      ->default_str("768");
}

// ---- Prompt --------------------------------------------------------------------------------------------------

CLI::Option* add_image_option(CLI::App& app, std::vector<std::string>& images) {
  return app.add_option("-i,--image", images, "an image file (JPEG, PNG, WebP, GIF, BMP, ICO, PBM/PGM/PPM, TIFF); repeat for several, in order")
      ->type_name("FILE")
      ->allow_extra_args(true)  // "-i a.png b.png -p TEXT": every file up to the next option
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Option* add_image_option(CLI::App& app, std::string& image) {
  return app.add_option("-i,--image", image, "an image file (JPEG, PNG, WebP, GIF, BMP, ICO, PBM/PGM/PPM)")->type_name("FILE");
}

CLI::Option* add_prompt_option(CLI::App& app, std::string& prompt) {
  auto* opt = app.add_option("-p,--prompt", prompt, "the user's message")->type_name("TEXT");
  if (!prompt.empty()) opt->default_str("\"" + prompt + "\"");
  return opt;
}

// ---- Generation ----------------------------------------------------------------------------------------------

CLI::Option* add_max_tokens_option(CLI::App& app, int& max_tokens, int min) {
  add_hidden_alias(app, "--n-predict", max_tokens, integer_in(min, 1 << 20));
  add_hidden_alias(app, "--num-predict", max_tokens, integer_in(min, 1 << 20));
  return app.add_option("-n,--max-tokens", max_tokens, "new tokens at most (also --n-predict, --num-predict)")
      ->type_name("N")
      ->check(integer_in(min, 1 << 20))
      ->default_str(std::to_string(max_tokens));
}

void SamplingArgs::apply_to(SamplingParams& params) const {
  if (temperature) params.temperature = *temperature;
  if (top_k) params.top_k = *top_k;
  if (top_p) params.top_p = *top_p;
  if (seed) params.seed = *seed;
  if (!logit_bias.empty()) params.logit_bias.assign(logit_bias.begin(), logit_bias.end());
}

namespace {
// "ID=BIAS", "ID+BIAS" or "ID-BIAS" (llama.cpp's spelling): the error, or "" with id and bias set.
std::string parse_logit_bias(const std::string& s, int32_t& id, float& bias) {
  const size_t at = s.find_first_of("=+-");
  const std::string expect = "expects ID=BIAS (a token id, a bias in [-100, 100]; also ID+BIAS or ID-BIAS), got '" + s + "'";
  if (at == 0 || at == std::string::npos || at > 9) return expect;
  for (size_t i = 0; i < at; ++i)
    if (s[i] < '0' || s[i] > '9') return expect;
  const std::string value = s[at] == '=' ? s.substr(at + 1) : s.substr(at);
  if (!parse_float(value, &bias) || !(bias >= -SamplingParams::kMaxLogitBias && bias <= SamplingParams::kMaxLogitBias))
    return expect;
  id = static_cast<int32_t>(std::stol(s.substr(0, at)));
  return "";
}
}  // namespace

void add_sampling_options(CLI::App& app, SamplingArgs& s) {
  const std::string from_model = "the model's generation_config.json";
  add_float(app, "--temp", s.temperature, [](float v) { return v >= 0 && std::isfinite(v); }, ">= 0",
            "sampling temperature; 0: greedy (also --temperature)")
      ->type_name("T")
      ->default_str(from_model);
  add_float(app, "--temperature", s.temperature, [](float v) { return v >= 0 && std::isfinite(v); }, ">= 0", "")
      ->group("");
  app.add_option_function<int>("--top-k", [&s](const int& v) { s.top_k = v; }, "sample from the K likeliest tokens; 0: all")
      ->type_name("K")
      ->check(integer_in(0, 1 << 30))
      ->default_str(from_model);
  add_float(app, "--top-p", s.top_p, [](float v) { return v >= 0 && v <= 1; }, "in [0, 1]",
            "sample from the likeliest tokens whose probabilities add up to P; 1: all")
      ->type_name("P")
      ->default_str(from_model);
  app.add_option_function<long long>("--seed", [&s](const long long& v) { s.seed = static_cast<uint64_t>(v); },
                                     "random seed of the sampler")
      ->type_name("S")
      ->check(integer_in(0, 1ll << 62))
      ->default_str(std::to_string(SamplingParams{}.seed));
  app.add_option_function<std::vector<std::string>>(
         "--logit-bias",
         [&s](const std::vector<std::string>& v) {
           for (const std::string& item : v) {
             int32_t id = 0;
             float bias = 0;
             if (parse_logit_bias(item, id, bias).empty()) s.logit_bias[id] = bias;
           }
         },
         "add BIAS in [-100, 100] to token ID's logit before sampling; -100 bans the token (repeatable)")
      ->type_name("ID=BIAS")
      ->delimiter(',')
      ->check(
          [](const std::string& item) {
            int32_t id = 0;
            float bias = 0;
            return parse_logit_bias(item, id, bias);
          },
          "");
}

void add_per_image_options(CLI::App& app, PerImageArgs& args) {
  app.add_option("--detail", args.detail,
                 "per image, in --image order (one value: every image): low (the smallest budget), high or auto")
      ->type_name("low|high|auto")
      ->delimiter(',')
      ->check(CLI::IsMember({"low", "high", "auto"}));
  app.add_option("--resized", args.resized,
                 "per image, in --image order (one value: every image): an exact size HxW, rounded to multiples of 32")
      ->type_name("HxW")
      ->delimiter(',');
}

Status PerImageArgs::apply_to(GenerateOptions& options, size_t n_images) const {
  auto value = [&](const std::vector<std::string>& list, const char* name, size_t k) -> Result<std::string> {
    if (list.empty()) return std::string();
    if (list.size() != 1 && list.size() != n_images)
      return Status::Error(std::string("--") + name + ": " + std::to_string(list.size()) + " values for " +
                           std::to_string(n_images) + " image(s); give one for every image, or one for all");
    return list.size() == 1 ? list[0] : list[k];
  };
  if (detail.empty() && resized.empty()) return Status::Ok();
  options.per_image.assign(n_images, PreprocessOptions{});
  for (size_t k = 0; k < n_images; ++k) {
    QVL_ASSIGN_OR_RETURN(std::string d, value(detail, "detail", k));
    if (d == "low") options.per_image[k].max_pixels = 0;
    QVL_ASSIGN_OR_RETURN(std::string r, value(resized, "resized", k));
    if (r.empty()) continue;
    long long h = 0, w = 0;
    char x = 0, extra = 0;
    if (std::sscanf(r.c_str(), "%lld%c%lld%c", &h, &x, &w, &extra) != 3 || (x != 'x' && x != 'X') || h < 1 || w < 1 ||
        h > 65536 || w > 65536)
      return Status::Error("--resized: expected HxW with sides 1 to 65536 (e.g. 448x448), got '" + r + "'");
    options.per_image[k].resized_height = h;
    options.per_image[k].resized_width = w;
  }
  return Status::Ok();
}

Status JsonOutputArgs::apply_to(GenerateOptions& options) const {
  if (!schema_file.empty()) {
    auto text = read_file_text(schema_file, 1 << 20);
    if (!text.ok()) return text.status();
    const auto schema = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return Status::Error(schema_file + ": not valid JSON");
    auto g = JsonGrammar::from_schema(schema);
    if (!g.ok()) return Status::Error(schema_file + ": " + g.status().message());
    options.json = *g;
  } else if (any_object) {
    options.json = JsonGrammar::any_object();
  }
  return Status::Ok();
}

void add_json_output_options(CLI::App& app, JsonOutputArgs& args) {
  auto* any = app.add_flag("--json", args.any_object, "answer with a JSON object (constrained decoding)");
  app.add_option("--json-schema", args.schema_file, "answer with JSON that this schema accepts (constrained decoding)")
      ->type_name("FILE")
      ->excludes(any);
}

}  // namespace qvl::cli
