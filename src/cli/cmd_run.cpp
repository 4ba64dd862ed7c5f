// `qvl run --model DIR [--image FILE ...] [--video FILE ...] -p TEXT [-n N] [--temp T] [--seed S] ...`: answers one prompt in
// the terminal, streaming the text to stdout and the progress and timings to stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "engine/documents.h"
#include "engine/generate.h"
#include "io/npy.h"
#include "kernels/kernels.h"
#include "util/file.h"
#include "util/cpu_budget.h"

namespace qvl::cli {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int cmd_run(const Args& args) {
  CommandLine cli("run", "Answers a prompt about images and videos in the terminal: the text streams to stdout, progress and "
                         "timings go to stderr.");
  std::string model_dir, prompt, system, dump_dir;
  std::vector<std::string> image_paths;
  int threads = default_threads();
  bool pin = false;
  GenerateOptions opts;
  WeightTypes weight_types = default_weight_types();
  SamplingArgs sampling;
  add_model_option(cli, model_dir, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  std::string mmproj;
  add_mmproj_option(cli, mmproj);
  add_image_option(cli, image_paths);
  add_prompt_option(cli, prompt)->required();
  cli.add_option("--system", system, "a system message before the prompt")->type_name("TEXT");
  add_max_tokens_option(cli, opts.max_tokens);
  add_sampling_options(cli, sampling);
  JsonOutputArgs json_output;
  PerImageArgs per_image;
  add_per_image_options(cli, per_image);
  add_json_output_options(cli, json_output);
  cli.add_flag("--ignore-eos", opts.ignore_eos, "keep generating past end-of-sequence tokens (up to -n)");
  add_thread_options(cli, threads, &pin);
  add_weight_options(cli, weight_types);
  std::string vision_attention = "auto";
  add_vision_attention_option(cli, vision_attention);
  add_context_options(cli, opts.context, opts.kv_type);
  add_image_size_options(cli, opts.image.min_pixels, opts.image.max_pixels);
  ImageDecodeLimits decode;
  add_image_page_option(cli, decode.page);
  VideoArgs video;
  add_video_options(cli, video);
  DocumentArgs documents;
  add_document_file_options(cli, documents, "a PDF document: its pages go to the model as images, \"Page n: \" before "
                            "each (repeatable)");
  cli.add_option("--dump", dump_dir, "write every named intermediate as .npy, and generated_ids.json, into DIR")
      ->type_name("DIR");
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), opts.image.min_pixels, opts.image.max_pixels)) return *rc;
  const std::string& cmd = cli.command();
  {
    auto dir = find_model_dir(cmd, model_dir, true, revision);
    if (!dir.ok()) return fail(cmd, dir.status().message());
    model_dir = *dir;
  }

  if (Status s = json_output.apply_to(opts); !s.ok()) return fail(cmd, s.message());
  if (Status s = per_image.apply_to(opts, image_paths.size()); !s.ok()) return fail(cmd, s.message());
  // Images first, so a bad file fails before the model loads.
  std::vector<ImageRGB> images;
  for (const std::string& path : image_paths) {
    auto img = load_image_file(path, decode);
    if (!img.ok()) return fail(cmd, img.status().message());
    images.push_back(std::move(img).value());
  }
  // Documents: read and their page lists checked (a confined pdfinfo) before the model loads.
  auto opened = documents.open();
  if (!opened.ok()) return fail(cmd, opened.status().message());
  const std::vector<DocumentFile> docs = std::move(opened).value();
  // Videos: read and probed before the model loads (a bad file fails first), decoded after (the model's
  // video_preprocessor_config.json decides the sampling and size).
  std::vector<std::vector<uint8_t>> video_files;
  for (const std::string& path : video.files) {
    auto bytes = read_file_bytes(path, uint64_t{8} << 30);
    if (!bytes.ok()) return fail(cmd, bytes.status().message());
    auto info = probe_video(*bytes);
    if (!info.ok()) return fail(cmd, path + ": " + info.status().message());
    video_files.push_back(std::move(bytes).value());
  }

  std::fprintf(stderr, "loading %s ...\n", model_dir.c_str());
  const double t_load = now_ms();
  auto model = Model::load(model_dir, weight_types, threads, mmproj);
  if (!model.ok()) return fail(cmd, model.status().message());
  apply_vision_attention(cmd, **model, vision_attention);
  if ((*model)->kind() != ModelKind::kChat)
    return fail(cmd, model_dir + " is a Qwen3-VL " + model_kind_name((*model)->kind()) + " model: it does not answer "
                     "prompts; use `qvl embed` (embeddings) or `qvl serve` (" + model_kind_serves((*model)->kind()) + ")");
  const double load_ms = now_ms() - t_load;
  std::fprintf(stderr, "loaded in %.0f ms (%.2f GB of weights mapped; text %s, vision %s), %d threads, %s kernels\n",
               load_ms, (*model)->mapped_bytes() / 1e9, weight_type_name((*model)->text_weight_type()),
               weight_type_name((*model)->vision_weight_type()), threads, kernels().name);
  if (!(*model)->kept_matrices().empty())
    std::fprintf(stderr, "%zu matrices kept their stored type (widths not a multiple of 32, e.g. %s)\n",
                 (*model)->kept_matrices().size(), (*model)->kept_matrices()[0].c_str());

  auto defaults = SamplingParams::from_generation_config((*model)->generation());
  if (!defaults.ok()) return fail(cmd, defaults.status().message());
  opts.sampling = *defaults;
  sampling.apply_to(opts.sampling);

  std::vector<ChatMessage> messages;
  if (!system.empty()) {
    ChatMessage s;
    s.role = "system";
    s.content_string = system;
    messages.push_back(s);
  }
  ChatMessage user = user_message(images.size(), video_files.size(), prompt);
  if (!docs.empty()) {
    // The documents' pages after the images: "Page n: " and the page, each (engine/documents.h).
    const PreprocessOptions o = page_bounds(opts.image, {}, (*model)->image_config());
    std::vector<ContentPart> pages;
    const size_t image_files = images.size();
    int64_t tokens = 0;
    for (const DocumentFile& doc : docs) {
      auto r = render_document_file(doc, (*model)->image_config(), o, documents.options, opts.context - tokens, nullptr);
      if (!r.ok()) return fail(cmd, r.status().message());
      for (const PagePlan& p : r->plans) tokens += p.tokens;
      std::fprintf(stderr, "%s: %s rendered at %.0f DPI in %.2f s\n", doc.path.c_str(), describe_pages(r->plans).c_str(),
                   r->plans[0].dpi, r->seconds);
      append_page_parts(pages, r->plans);
      for (ImageRGB& img : r->images) images.push_back(std::move(img));
    }
    user.content_parts.insert(user.content_parts.begin() + static_cast<std::ptrdiff_t>(image_files), pages.begin(),
                              pages.end());
  }
  messages.push_back(std::move(user));
  std::vector<std::shared_ptr<const PreprocessedVideo>> videos;
  video.options.max_tokens = opts.context;
  for (size_t k = 0; k < video_files.size(); ++k) {
    const double t0 = now_ms();
    auto v = preprocess_video_file(video_files[k], (*model)->video_config(), video.options);
    if (!v.ok()) return fail(cmd, video.files[k] + ": " + v.status().message());
    std::fprintf(stderr, "%s: %zu frames sampled at %.2f fps of video, %d groups of %d tokens at %dx%d (%.0f ms)\n",
                 video.files[k].c_str(), v->indices.size(), v->video_fps, v->grid_t, v->tokens_per_group(),
                 v->resized.width, v->resized.height, now_ms() - t0);
    videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(v).value()));
  }

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
    if (std::string(phase) == "vision") {
      if (videos.empty()) std::fprintf(stderr, "encoding %zu image(s) ...\n", images.size());
      else std::fprintf(stderr, "encoding %zu image(s) and %zu video(s) ...\n", images.size(), videos.size());
    }
    if (std::string(phase) == "prefill") std::fprintf(stderr, "reading the prompt ...\n");
  };
  cb.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  if (!dump_dir.empty()) cb.dump = &dump_fn;
  auto r = generate(**model, pool, messages, images, videos, opts, cb);
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
               "\nload %.0f ms | preprocess %.0f ms | image encode %.0f ms (%d image tokens%s) | prefill %.0f ms "
               "(%d tokens, %.1f tok/s) | first token %.0f ms | decode %d tokens in %.0f ms (%.2f tok/s) | %s\n",
               load_ms, t.preprocess_ms, t.vision_ms, t.image_tokens,
               t.videos > 0 ? (", " + std::to_string(t.video_tokens) + " video tokens").c_str() : "", t.prefill_ms, t.prompt_tokens,
               t.prefill_ms > 0 ? t.prompt_tokens / (t.prefill_ms / 1000) : 0.0, t.ttft_ms, t.generated_tokens,
               t.decode_ms, t.decode_ms > 0 ? t.generated_tokens / (t.decode_ms / 1000) : 0.0,
               finish_reason_name(r->finish));
  return 0;
}

}  // namespace qvl::cli
