// `qvl run --model DIR [--image FILE ...] -p TEXT [-n N] [--temp T] [--seed S] ...`: answers one prompt in
// the terminal, streaming the text to stdout and the progress and timings to stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/cli.h"
#include "engine/generate.h"
#include "io/npy.h"
#include "kernels/kernels.h"
#include "util/file.h"

namespace qvl::cli {

namespace {

const char kRunUsage[] =
    "usage: qvl run --model DIR [--image FILE ...] -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "               [--seed S] [--system TEXT] [--threads N] [--ctx N] [--min-pixels N] [--max-pixels N]\n"
    "               [--text-weights T] [--vision-weights T] [--kv-type f16|f32] [--pin] [--ignore-eos] [--dump DIR]\n"
    "  T: f32, f16, bf16, q8_0 or q4_0 (quantized at load; default: as stored)";

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int cmd_run(const Args& args) {
  const std::string cmd = "run";
  std::string model_dir, prompt, system, dump_dir;
  std::vector<std::string> image_paths;
  bool have_prompt = false;
  int threads = ThreadPool::physical_cores();
  bool pin = false;
  GenerateOptions opts;
  WeightTypes weight_types = default_weight_types();
  bool temp_set = false, topk_set = false, topp_set = false, seed_set = false;
  float temp = 0, top_p = 0;
  long long top_k = 0, seed = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    auto need = [&](const std::string* v) { return v ? 0 : fail(cmd, a + " needs a value\n" + kRunUsage); };
    auto integer = [&](long long lo, long long hi, long long& out) -> int {
      const std::string* v = value();
      if (int rc = need(v)) return rc;
      auto r = parse_int(a, *v, lo, hi);
      if (!r.ok()) return fail(cmd, r.status().message());
      out = *r;
      return 0;
    };
    auto real = [&](float& out) -> int {
      const std::string* v = value();
      if (int rc = need(v)) return rc;
      char* end = nullptr;
      out = std::strtof(v->c_str(), &end);
      if (v->empty() || *end) return fail(cmd, a + " expects a number, got '" + *v + "'");
      return 0;
    };
    long long n = 0;
    int rc = 0;
    if (a == "--model" || a == "-m") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      model_dir = *v;
    } else if (a == "--image" || a == "-i") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      image_paths.push_back(*v);
    } else if (a == "-p" || a == "--prompt") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      prompt = *v;
      have_prompt = true;
    } else if (a == "--system") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      system = *v;
    } else if (a == "--dump") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      dump_dir = *v;
    } else if (a == "-n" || a == "--max-tokens") {
      if ((rc = integer(0, 1 << 20, n))) return rc;
      opts.max_tokens = static_cast<int>(n);
    } else if (a == "--threads" || a == "-t") {
      if ((rc = integer(1, 1024, n))) return rc;
      threads = static_cast<int>(n);
    } else if (a == "--ctx") {
      if ((rc = integer(16, 1 << 20, n))) return rc;
      opts.context = n;
    } else if (a == "--min-pixels") {
      if ((rc = integer(1, 1ll << 40, n))) return rc;
      opts.image.min_pixels = n;
    } else if (a == "--max-pixels") {
      if ((rc = integer(1, 1ll << 40, n))) return rc;
      opts.image.max_pixels = n;
    } else if (a == "--temp") {
      if ((rc = real(temp))) return rc;
      temp_set = true;
    } else if (a == "--top-p") {
      if ((rc = real(top_p))) return rc;
      topp_set = true;
    } else if (a == "--top-k") {
      if ((rc = integer(0, 1 << 30, top_k))) return rc;
      topk_set = true;
    } else if (a == "--seed") {
      if ((rc = integer(0, (1ll << 62), seed))) return rc;
      seed_set = true;
    } else if (a == "--kv-type") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      if (!kv_type_from_name(*v, &opts.kv_type)) return fail(cmd, a + ": unknown type '" + *v + "' (f16, f32)");
    } else if (a == "--text-weights" || a == "--vision-weights") {
      const std::string* v = value();
      if ((rc = need(v))) return rc;
      WeightType t;
      if (!weight_type_from_name(*v, &t)) return fail(cmd, a + ": unknown type '" + *v + "' (f32, f16, bf16, q8_0, q4_0)");
      (a == "--text-weights" ? weight_types.text : weight_types.vision) = t;
    } else if (a == "--ignore-eos") {
      opts.ignore_eos = true;
    } else if (a == "--pin") {
      pin = true;
    } else {
      return fail(cmd, "unexpected argument '" + a + "'\n" + kRunUsage);
    }
  }
  if (model_dir.empty()) return fail(cmd, std::string("--model DIR is required\n") + kRunUsage);
  if (!have_prompt) return fail(cmd, std::string("-p TEXT is required\n") + kRunUsage);

  // Images first, so a bad file fails before the model loads.
  std::vector<ImageRGB> images;
  for (const std::string& path : image_paths) {
    auto img = load_image_file(path);
    if (!img.ok()) return fail(cmd, img.status().message());
    images.push_back(std::move(img).value());
  }

  std::fprintf(stderr, "loading %s ...\n", model_dir.c_str());
  const double t_load = now_ms();
  auto model = Model::load(model_dir, weight_types, threads);
  if (!model.ok()) return fail(cmd, model.status().message());
  const double load_ms = now_ms() - t_load;
  std::fprintf(stderr, "loaded in %.0f ms (%.2f GB of weights mapped; text %s, vision %s), %d threads, %s kernels\n",
               load_ms, (*model)->mapped_bytes() / 1e9, weight_type_name((*model)->text_weight_type()),
               weight_type_name((*model)->vision_weight_type()), threads, kernels().name);

  auto defaults = SamplingParams::from_generation_config((*model)->generation());
  if (!defaults.ok()) return fail(cmd, defaults.status().message());
  opts.sampling = *defaults;
  if (temp_set) opts.sampling.temperature = temp;
  if (topk_set) opts.sampling.top_k = static_cast<int>(top_k);
  if (topp_set) opts.sampling.top_p = top_p;
  if (seed_set) opts.sampling.seed = static_cast<uint64_t>(seed);

  std::vector<ChatMessage> messages;
  if (!system.empty()) {
    ChatMessage s;
    s.role = "system";
    s.content_string = system;
    messages.push_back(s);
  }
  messages.push_back(user_message(images.size(), prompt));

  DumpFn dump_fn;
  if (!dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dump_dir, ec);
    if (ec) return fail(cmd, dump_dir + ": cannot create: " + ec.message());
    dump_fn = [&](const std::string& name, const float* data, const std::vector<int64_t>& shape) {
      size_t count = 1;
      for (int64_t d : shape) count *= static_cast<size_t>(d);
      Status s = write_npy(dump_dir + "/" + name + ".npy", "<f4", shape, data, count * sizeof(float));
      if (!s.ok()) std::fprintf(stderr, "qvl run: dump: %s\n", s.message().c_str());
    };
  }

  ThreadPool pool(threads);
  if (pin) {
    auto cpus = pool.pin_to_cores();
    if (!cpus.ok()) return fail(cmd, cpus.status().message());
  }
  GenerateCallbacks cb;
  cb.progress = [&](const char* phase) {
    if (std::string(phase) == "vision") std::fprintf(stderr, "encoding %zu image(s) ...\n", images.size());
    if (std::string(phase) == "prefill") std::fprintf(stderr, "reading the prompt ...\n");
  };
  cb.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  if (!dump_dir.empty()) cb.dump = &dump_fn;
  auto r = generate(**model, pool, messages, images, opts, cb);
  if (!r.ok()) return fail(cmd, r.status().message());
  std::printf("\n");
  if (!dump_dir.empty()) {
    std::string ids = "[";
    for (size_t k = 0; k < r->tokens.size(); ++k) ids += (k ? ", " : "") + std::to_string(r->tokens[k]);
    ids += "]\n";
    Status s = write_file_bytes(dump_dir + "/generated_ids.json", ids.data(), ids.size());
    if (!s.ok()) return fail(cmd, s.message());
  }
  const GenerateTimings& t = r->timings;
  std::fprintf(stderr,
               "\nload %.0f ms | preprocess %.0f ms | image encode %.0f ms (%d image tokens) | prefill %.0f ms "
               "(%d tokens, %.1f tok/s) | first token %.0f ms | decode %d tokens in %.0f ms (%.2f tok/s) | %s\n",
               load_ms, t.preprocess_ms, t.vision_ms, t.image_tokens, t.prefill_ms, t.prompt_tokens,
               t.prefill_ms > 0 ? t.prompt_tokens / (t.prefill_ms / 1000) : 0.0, t.ttft_ms, t.generated_tokens,
               t.decode_ms, t.decode_ms > 0 ? t.generated_tokens / (t.decode_ms / 1000) : 0.0,
               finish_reason_name(r->finish));
  return 0;
}

}  // namespace qvl::cli
