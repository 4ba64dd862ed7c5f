// `qvl embed --model DIR [TEXT ...] [--image FILE ...] [--images-dir DIR] [--input-file F.jsonl] ...`: embeds
// texts, images and videos with a Qwen3-VL-Embedding model without a server (indexing a folder of pictures),
// vectors out as JSONL or a float32 .npy matrix. The inputs go through the scheduler the server uses, --batch
// of them at a time, so they share batched forward passes and the image cache.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "engine/retrieval.h"
#include "engine/scheduler.h"
#include "io/image.h"
#include "io/npy.h"
#include "io/video.h"
#include "kernels/kernels.h"
#include "model/video_processor.h"
#include "util/cpu_budget.h"
#include "util/file.h"

namespace qvl::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// One input as read from the command line or a JSONL line: texts, image and video files, an instruction.
struct InputSpec {
  std::vector<std::string> texts, images, videos;
  std::string instruction;
  std::string where;  // "argument 2", "inputs.jsonl:7", "photos/cat.jpg"
};

Status read_list(const json& v, const std::string& where, std::vector<std::string>& out) {
  if (v.is_null()) return Status::Ok();
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return Status::Ok();
  }
  if (!v.is_array()) return Status::Error(where + ": expected a string or a list of strings");
  for (const json& s : v) {
    if (!s.is_string()) return Status::Error(where + ": expected a list of strings");
    out.push_back(s.get<std::string>());
  }
  return Status::Ok();
}

// A JSONL line: a string (a text) or {"text", "image", "video", "instruction"}.
Result<InputSpec> parse_line(const std::string& line, const std::string& where) {
  auto j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return Status::Error(where + ": not JSON (each line is a string or an object {\"text\", "
                                                     "\"image\", \"video\", \"instruction\"})");
  InputSpec s;
  s.where = where;
  if (j.is_string()) {
    s.texts.push_back(j.get<std::string>());
    return s;
  }
  if (!j.is_object()) return Status::Error(where + ": expected a string or an object");
  for (const auto& [key, value] : j.items())
    if (key != "text" && key != "image" && key != "video" && key != "instruction")
      return Status::Error(where + ": unknown field \"" + key + "\"; a line has text, image, video and instruction");
  QVL_RETURN_IF_ERROR(read_list(j.value("text", json()), where + " text", s.texts));
  QVL_RETURN_IF_ERROR(read_list(j.value("image", json()), where + " image", s.images));
  QVL_RETURN_IF_ERROR(read_list(j.value("video", json()), where + " video", s.videos));
  if (j.contains("instruction") && j["instruction"].is_string()) s.instruction = j["instruction"].get<std::string>();
  return s;
}

bool is_image_name(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* x : {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".pnm", ".ico"})
    if (e == x) return true;
  return false;
}

// "12 / 100 inputs, 3.4/s, 26 s left": redrawn in place on a terminal, a line every 5 s otherwise.
class InputProgress {
 public:
  explicit InputProgress(size_t total) : total_(total), tty_(::isatty(2) == 1), start_(Clock::now()), last_(start_) {}
  void update(size_t done) {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (done < total_ && since < (tty_ ? 0.1 : 5.0)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double left = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    std::fprintf(stderr, "%sembed: %zu / %zu inputs, %.1f/s, %.0f s left%s", tty_ ? "\r\033[K" : "", done, total_, rate,
                 left, tty_ ? "" : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  size_t total_;
  bool tty_;
  Clock::time_point start_, last_;
};

}  // namespace

int cmd_embed(const Args& args) {
  CommandLine cli("embed", "Embeds texts, images and videos with a Qwen3-VL-Embedding model: one vector per input, as "
                           "JSONL (stdout by default) or a float32 .npy matrix; progress on stderr.");
  std::string model_dir, input_file, images_dir, output, instruction;
  std::vector<std::string> texts, image_paths;
  int64_t dimensions = 0;
  int threads = default_threads();
  int batch = 4;
  WeightTypes weight_types = default_weight_types();
  int64_t min_pixels = -1, max_pixels = -1;
  add_model_option(cli, model_dir, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  cli.add_option("text", texts, "texts to embed, each an input of its own")->type_name("TEXT");
  cli.add_option("--image", image_paths, "image files to embed, each an input of its own (texts go before --image)")
      ->type_name("FILE");
  cli.add_option("--images-dir", images_dir, "embed every image file in DIR (sorted by name), each an input")
      ->type_name("DIR");
  cli.add_option("--input-file", input_file, "a JSONL file: each line a text, or {\"text\", \"image\", \"video\", "
                                             "\"instruction\"} (files relative to the current directory)")
      ->type_name("FILE");
  cli.add_option("--instruction", instruction, "the task instruction of inputs without their own (default: "
                                               "\"Represent the user's input.\")")
      ->type_name("TEXT");
  const CLI::Option* dimensions_opt =
      cli.add_option("--dimensions", dimensions, "keep the first N values of each vector, renormalised (Matryoshka)")
          ->type_name("N");
  cli.add_option("--output", output, "write the vectors here: FILE.npy (float32 [inputs, dims]) or FILE.jsonl "
                                     "(default: JSONL on stdout)")
      ->type_name("FILE");
  cli.add_option("--batch", batch, "inputs encoded together (the server's slots)")->check(CLI::Range(1, 64))->default_str("4");
  add_thread_options(cli, threads);
  add_weight_options(cli, weight_types);
  std::string vision_attention = "auto";
  add_vision_attention_option(cli, vision_attention);
  add_image_size_options(cli, min_pixels, max_pixels);
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), min_pixels, max_pixels)) return *rc;
  const std::string& cmd = cli.command();
  {
    auto dir = find_model_dir(cmd, model_dir, true, revision);
    if (!dir.ok()) return fail(cmd, dir.status().message());
    model_dir = *dir;
  }

  // The inputs, read and checked before the model loads.
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < texts.size(); ++i) specs.push_back({{texts[i]}, {}, {}, "", "text argument " + std::to_string(i + 1)});
  for (const std::string& p : image_paths) specs.push_back({{}, {p}, {}, "", "--image"});
  if (!images_dir.empty()) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(images_dir, ec))
      if (e.is_regular_file() && is_image_name(e.path())) files.push_back(e.path());
    if (ec) return fail(cmd, images_dir + ": cannot list the directory: " + ec.message());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) specs.push_back({{}, {f.string()}, {}, "", "--images-dir"});
  }
  if (!input_file.empty()) {
    std::ifstream in(input_file);
    if (!in) return fail(cmd, input_file + ": cannot open the input file");
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto s = parse_line(line, input_file + ":" + std::to_string(n));
      if (!s.ok()) return fail(cmd, s.status().message());
      specs.push_back(std::move(*s));
    }
  }
  if (specs.empty()) return fail(cmd, "nothing to embed: give texts, --image FILE, --images-dir DIR or --input-file F.jsonl");
  for (InputSpec& s : specs) {
    if (s.instruction.empty()) s.instruction = instruction;
    for (const auto* list : {&s.images, &s.videos})
      for (const std::string& f : *list)
        if (!fs::is_regular_file(f)) return fail(cmd, s.where + ": " + f + ": no such file");
    // An image's format from its first bytes, so that a stray file fails now, not after the model has loaded.
    for (const std::string& f : s.images) {
      std::ifstream in(f, std::ios::binary);
      std::vector<uint8_t> head(64);
      in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
      head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
      if (detect_image_format(head) == ImageFormat::kUnknown)
        return fail(cmd, s.where + ": " + f + ": not an image qvl reads (JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm or TIFF)");
    }
  }
  const bool npy = output.size() > 4 && output.compare(output.size() - 4, 4, ".npy") == 0;

  std::fprintf(stderr, "loading %s ...\n", model_dir.c_str());
  SchedulerOptions so;
  so.threads = threads;
  so.parallel = batch;
  so.queue = batch;
  so.load = [&]() -> Result<std::unique_ptr<Model>> {
    auto m = Model::load(model_dir, weight_types, threads);
    if (m.ok()) apply_vision_attention(cmd, **m, vision_attention);
    return m;
  };
  Scheduler scheduler(so);
  scheduler.start();
  while (scheduler.state() == LoadState::kLoading) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (scheduler.state() == LoadState::kFailed) return fail(cmd, scheduler.load_error());
  const Model& model = *scheduler.model();
  if (model.kind() != ModelKind::kEmbedding)
    return fail(cmd, model_dir + " is a " + std::string(model_kind_name(model.kind())) + " model; qvl embed needs a "
                     "Qwen3-VL-Embedding model (its model card's title or config.json names it; see docs/API.md)");
  if (dimensions_opt->count() > 0 && (dimensions < 1 || dimensions > model.config().text.hidden_size))
    return fail(cmd, "--dimensions " + std::to_string(dimensions) + ": expected 1 to " +
                         std::to_string(model.config().text.hidden_size));
  std::fprintf(stderr, "loaded in %.0f ms; %zu inputs, %d at a time, %d threads, %s kernels\n", scheduler.load_ms(),
               specs.size(), batch, threads, kernels().name);

  GenerateOptions options = retrieval_options(model, max_pixels);
  if (min_pixels > 0) options.image.min_pixels = std::min(min_pixels, options.image.max_pixels);
  // Each input: its files decoded when it is queued (at most --batch + 1 in memory).
  auto make_request = [&](const InputSpec& s) -> Result<InferenceRequest> {
    InferenceRequest r;
    RetrievalInput in;
    in.texts = s.texts;
    in.images = s.images.size();
    in.videos = s.videos.size();
    in.instruction = s.instruction;
    r.messages = embedding_messages(in);
    r.options = options;
    for (const std::string& f : s.images) {
      auto img = load_image_file(f);
      if (!img.ok()) return Status::Error(s.where + ": " + img.status().message());
      r.images.push_back(std::move(*img));
    }
    for (const std::string& f : s.videos) {
      auto bytes = read_file_bytes(f, uint64_t{8} << 30);
      if (!bytes.ok()) return Status::Error(s.where + ": " + bytes.status().message());
      VideoOptions vo;
      vo.fps = 1;
      vo.max_frames = 64;
      vo.qwen_vl_utils = true;
      vo.max_tokens = options.context;
      auto v = preprocess_video_file(*bytes, model.video_config(), vo);
      if (!v.ok()) return Status::Error(s.where + ": " + f + ": " + v.status().message());
      r.videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(*v)));
    }
    return r;
  };

  std::vector<std::vector<float>> vectors(specs.size());
  std::deque<std::pair<size_t, std::shared_ptr<Job>>> inflight;
  InputProgress progress(specs.size());
  size_t done = 0;
  int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t next = 0; next < specs.size() || !inflight.empty();) {
    if (next < specs.size() && inflight.size() < static_cast<size_t>(batch) + 1) {
      auto r = make_request(specs[next]);
      if (!r.ok()) return fail(cmd, r.status().message());
      auto s = scheduler.submit(std::move(*r));
      if (s.error == SubmitError::kNone) {
        inflight.emplace_back(next++, std::move(s.job));
        continue;
      }
      // The queue holds --batch inputs besides the running ones; full, the next one waits for the oldest.
      if (s.error != SubmitError::kQueueFull || inflight.empty())
        return fail(cmd, specs[next].where + ": could not be queued (" +
                             (s.error == SubmitError::kQueueFull ? "queue full" : "the engine is stopping") + ")");
    }
    auto [i, job] = inflight.front();
    inflight.pop_front();
    JobUpdate u;
    do u = job->wait(std::chrono::milliseconds(200));
    while (!u.finished);
    if (u.error != JobError::kNone) return fail(cmd, specs[i].where + ": " + u.error_message);
    auto v = embedding_vector(u.result.hidden, dimensions);
    if (!v.ok()) return fail(cmd, v.status().message());
    vectors[i] = std::move(*v);
    tokens += u.result.timings.prompt_tokens;
    progress.update(++done);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "embedded %zu inputs (%lld prompt tokens) in %.2f s: %.2f inputs/s\n", specs.size(),
               static_cast<long long>(tokens), s, s > 0 ? static_cast<double>(specs.size()) / s : 0.0);

  const int64_t dims = static_cast<int64_t>(vectors[0].size());
  if (npy) {
    std::vector<float> flat;
    flat.reserve(vectors.size() * static_cast<size_t>(dims));
    for (const auto& v : vectors) flat.insert(flat.end(), v.begin(), v.end());
    Status w = write_npy(output, "<f4", {static_cast<int64_t>(vectors.size()), dims}, flat.data(), flat.size() * 4);
    if (!w.ok()) return fail(cmd, w.message());
    std::fprintf(stderr, "wrote %s: float32 [%zu, %lld]\n", output.c_str(), vectors.size(), static_cast<long long>(dims));
    return 0;
  }
  std::FILE* out = stdout;
  if (!output.empty()) {
    out = std::fopen(output.c_str(), "w");
    if (!out) return fail(cmd, output + ": cannot write the output file");
  }
  for (size_t i = 0; i < vectors.size(); ++i) {
    const json line = {{"index", i}, {"input", specs[i].where}, {"embedding", vectors[i]}};
    // A file name need not be UTF-8: its bytes are replaced, not thrown on.
    std::fputs((line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n").c_str(), out);
  }
  if (std::ferror(out) || (out != stdout && std::fclose(out) != 0) || (out == stdout && std::fflush(stdout) != 0))
    return fail(cmd, (output.empty() ? std::string("stdout") : output) + ": write failed");
  return 0;
}

}  // namespace qvl::cli
