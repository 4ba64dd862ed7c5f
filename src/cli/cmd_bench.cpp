// `qvl bench --model M [--image FILE] [--video FILE] [-p TEXT] [-n N] [--runs R] [--json] ...`: times load, preprocess,
// vision encode, prefill, first token and decode on one prompt, several runs, and reports the medians
// and the peak resident memory.
#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/model_arg.h"
#include "cli/options.h"
#include "engine/generate.h"
#include "engine/retrieval.h"
#include "kernels/kernels.h"
#include "util/phase_clock.h"
#include "util/file.h"
#include "util/memory.h"
#include "util/cpu_budget.h"

namespace qvl::cli {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
}  // namespace

int cmd_bench(const Args& args) {
  CommandLine cli("bench", "Times load, preprocess, vision encode, prefill, first token and decode on one prompt: "
                           "the medians of several runs, and the peak resident memory.");
  std::string model_dir, image_path, prompt = "Describe this image.";
  int threads = default_threads(), runs = 3;
  bool pin = false;
  bool json = false;
  GenerateOptions opts;
  opts.max_tokens = 64;
  opts.ignore_eos = true;
  opts.sampling.temperature = 0;  // greedy: no sampling cost differences between runs
  WeightTypes types = default_weight_types();
  add_model_option(cli, model_dir, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  std::string mmproj;
  add_mmproj_option(cli, mmproj);
  add_image_option(cli, image_path);
  add_prompt_option(cli, prompt);
  add_max_tokens_option(cli, opts.max_tokens, 1);
  cli.add_option("--runs", runs, "timed runs; the medians are reported")
      ->type_name("R")
      ->check(integer_in(1, 1 << 20))
      ->default_str(std::to_string(runs));
  cli.add_flag("--json", json, "print one JSON object on stdout instead of the text lines");
  add_thread_options(cli, threads, &pin);
  add_weight_options(cli, types);
  std::string vision_attention = "auto";
  add_vision_attention_option(cli, vision_attention);
  add_context_options(cli, opts.context, opts.kv_type);
  add_image_size_options(cli, opts.image.min_pixels, opts.image.max_pixels);
  VideoArgs video;
  add_video_options(cli, video);
  DocumentArgs documents;
  add_document_file_options(cli, documents, "a PDF document whose pages are rendered (each run: the server renders "
                            "per request) and read after the image (repeatable)");
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), opts.image.min_pixels, opts.image.max_pixels)) return *rc;
  const std::string& cmd = cli.command();
  {
    auto dir = find_model_dir(cmd, model_dir, true, revision);
    if (!dir.ok()) return fail(cmd, dir.status().message());
    model_dir = *dir;
  }

  std::vector<ImageRGB> images;
  if (!image_path.empty()) {
    auto img = load_image_file(image_path);
    if (!img.ok()) return fail(cmd, img.status().message());
    images.push_back(std::move(img).value());
  }
  std::vector<std::vector<uint8_t>> video_files;
  for (const std::string& path : video.files) {
    auto bytes = read_file_bytes(path, uint64_t{8} << 30);
    if (!bytes.ok()) return fail(cmd, bytes.status().message());
    video_files.push_back(std::move(bytes).value());
  }
  auto opened = documents.open();
  if (!opened.ok()) return fail(cmd, opened.status().message());
  const std::vector<DocumentFile> docs = std::move(opened).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Model::load(model_dir, types, threads, mmproj);
  if (!model.ok()) return fail(cmd, model.status().message());
  apply_vision_attention(cmd, **model, vision_attention);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const size_t image_files = images.size();
  ChatMessage user = user_message(image_files, video_files.size(), prompt);
  // An embedding or reranker model: one pooled pass a run (its "first token" is the pass), on the reference's
  // conversation: the prompt and the images as one embedding input, or the prompt as the query of a pair whose
  // document is the images.
  const ModelKind kind = (*model)->kind();
  std::vector<ChatMessage> retrieval_conversation;
  if (kind != ModelKind::kChat) {
    if (!docs.empty()) return fail(cmd, "--file: documents are read by chat models; embed a page as an --image instead");
    const GenerateOptions r = retrieval_options(**model, opts.image.max_pixels);
    opts.pooled = true;
    opts.max_tokens = 0;
    opts.kv_type = r.kv_type;
    opts.context = r.context;
    opts.image.max_pixels = r.image.max_pixels;
    opts.image.min_pixels = opts.image.min_pixels > 0 ? std::min(opts.image.min_pixels, r.image.max_pixels) : r.image.min_pixels;
    opts.image.pil_resize = true;
    video.options.qwen_vl_utils = true;  // as the reference reads a video file: fps 1, at most 64 frames
    if (video.options.fps <= 0) video.options.fps = 1;
    if (video.options.max_frames <= 0) video.options.max_frames = 64;
    RetrievalInput in;
    in.images = image_files;
    in.videos = video_files.size();
    if (kind == ModelKind::kEmbedding) {
      in.texts = {prompt};
      retrieval_conversation = embedding_messages(in);
    } else {
      RetrievalInput query;
      query.texts = {prompt};
      retrieval_conversation = rerank_messages(query, in, "");
    }
    if (!json) std::fprintf(stderr, "a %s model: each run is one pooled pass (first token = the pass)\n", model_kind_name(kind));
  }
  video.options.max_tokens = opts.context;

  ThreadPool pool(threads);
  if (pin) {
    auto cpus = pool.pin_to_cores();
    if (!cpus.ok()) return fail(cmd, cpus.status().message());
  }
  std::vector<double> pre, vis, prefill, ttft, decode, video_ms, render_ms;
  // The first token's parts per run (util/phase_clock.h): the vision tower's GEMMs, attention, mergers and the
  // rest of it; the prefill's GEMMs (LM head included), attention and the rest; and what is left of the first
  // token (preprocessing, sampling, ...).
  const char* kParts[] = {"preprocess",    "vision_gemm",       "vision_attention", "vision_merger", "vision_other",
                          "prefill_gemm",  "prefill_attention", "prefill_other",    "rest"};
  constexpr size_t kNumParts = std::size(kParts);
  std::vector<std::array<double, kNumParts>> parts;
  // A decode step's parts per run, per token after the first: its GEMMs (LM head included), its attention (the
  // cache's keys and values widened and read), and the rest (norms, RoPE, sampling, ...).
  const char* kDecodeParts[] = {"gemm", "attention", "other"};
  std::vector<std::array<double, 3>> decode_parts;
  PhaseClock::enable(true);
  int document_pages = 0;
  GenerateTimings last;
  for (int r = 0; r < runs; ++r) {
    // Videos are decoded, sampled and resized per run (the server does it per request, before the engine).
    std::vector<std::shared_ptr<const PreprocessedVideo>> videos;
    const auto v0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < video_files.size(); ++k) {
      auto v = preprocess_video_file(video_files[k], (*model)->video_config(), video.options);
      if (!v.ok()) return fail(cmd, video.files[k] + ": " + v.status().message());
      videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(v).value()));
    }
    video_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - v0).count());
    // Documents: their pages rendered per run by the confined worker (no page cache), after the image.
    if (!docs.empty()) {
      images.resize(image_files);
      user = user_message(image_files, video_files.size(), prompt);
      const PreprocessOptions o = page_bounds(opts.image, {}, (*model)->image_config());
      std::vector<ContentPart> parts;
      double seconds = 0;
      int64_t tokens = 0;
      for (const DocumentFile& doc : docs) {
        auto rendered = render_document_file(doc, (*model)->image_config(), o, documents.options, opts.context - tokens, nullptr);
        if (!rendered.ok()) return fail(cmd, rendered.status().message());
        for (const PagePlan& p : rendered->plans) tokens += p.tokens;
        seconds += rendered->seconds;
        append_page_parts(parts, rendered->plans);
        for (ImageRGB& img : rendered->images) images.push_back(std::move(img));
      }
      document_pages = static_cast<int>(parts.size() / 2);
      user.content_parts.insert(user.content_parts.begin() + static_cast<std::ptrdiff_t>(image_files), parts.begin(),
                                parts.end());
      render_ms.push_back(seconds * 1000);
    }
    PhaseClock::reset();
    auto res = kind != ModelKind::kChat ? generate(**model, pool, retrieval_conversation, images, videos, opts)
                                        : generate(**model, pool, {user}, images, videos, opts);
    if (!res.ok()) return fail(cmd, res.status().message());
    const GenerateTimings& t = res->timings;
    {
      const auto ph = PhaseClock::totals_ms();
      auto at = [&](Phase p) { return ph[static_cast<size_t>(p)]; };
      const double vg = at(Phase::kVisionGemm), va = at(Phase::kVisionAttention), vm = at(Phase::kVisionMerger);
      const double pg = at(Phase::kPrefillGemm), pa = at(Phase::kPrefillAttention);
      parts.push_back({t.preprocess_ms, vg, va, vm, std::max(0.0, t.vision_ms - vg - va - vm), pg, pa,
                       std::max(0.0, t.prefill_ms - pg - pa),
                       std::max(0.0, t.ttft_ms - t.preprocess_ms - t.vision_ms - t.prefill_ms)});
      if (t.generated_tokens > 1) {
        const double steps = t.generated_tokens - 1, dg = at(Phase::kDecodeGemm) / steps,
                     da = at(Phase::kDecodeAttention) / steps;
        decode_parts.push_back({dg, da, std::max(0.0, t.decode_ms / steps - dg - da)});
      }
    }
    last = t;
    pre.push_back(t.preprocess_ms);
    vis.push_back(t.vision_ms);
    prefill.push_back(t.prefill_ms > 0 ? t.prompt_tokens / (t.prefill_ms / 1000) : 0);
    ttft.push_back(t.ttft_ms);
    // Decode rate over the tokens after the first (the first comes from the prefill).
    decode.push_back(t.generated_tokens > 1 && t.decode_ms > 0 ? (t.generated_tokens - 1) / (t.decode_ms / 1000) : 0);
    if (!json)
      std::fprintf(stderr, "run %d: vision %.0f ms, prefill %.0f ms (%d tokens), first token %.0f ms, decode %.2f tok/s\n",
                   r + 1, t.vision_ms, t.prefill_ms, t.prompt_tokens, t.ttft_ms, decode.back());
  }
  PhaseClock::enable(false);
  const double rss_mb = static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0);
  nlohmann::ordered_json breakdown = nlohmann::ordered_json::object();
  for (size_t k = 0; k < kNumParts; ++k) {
    std::vector<double> v;
    for (const auto& p : parts) v.push_back(p[k]);
    breakdown[kParts[k]] = median(v);
  }
  nlohmann::ordered_json decode_breakdown = nlohmann::ordered_json::object();
  for (size_t k = 0; k < std::size(kDecodeParts) && !decode_parts.empty(); ++k) {
    std::vector<double> v;
    for (const auto& p : decode_parts) v.push_back(p[k]);
    decode_breakdown[kDecodeParts[k]] = median(v);
  }
  const TileChoice& tiles = tile_choice();
  const AttentionPrecision va_ran = (*model)->vision_attention();
  nlohmann::ordered_json out = {
      {"load_ms", load_ms},
      {"preprocess_ms", median(pre)},
      {"vision_ms", median(vis)},
      {"prefill_tok_s", median(prefill)},
      {"ttft_ms", median(ttft)},
      {"decode_tok_s", median(decode)},
      {"peak_rss_mb", rss_mb},
      {"activations_mb", {{"vision", static_cast<double>(last.vision_activation_bytes) / (1024.0 * 1024.0)},
                          {"text", static_cast<double>(last.text_activation_bytes) / (1024.0 * 1024.0)}}},
      {"prompt_tokens", last.prompt_tokens},
      {"image_tokens", last.image_tokens},
      {"video_decode_ms", median(video_ms)},
      {"document_pages", document_pages},
      {"document_render_ms", render_ms.empty() ? 0.0 : median(render_ms)},
      {"video_frames", last.video_frames},
      {"video_tokens", last.video_tokens},
      {"generated_tokens", last.generated_tokens},
      {"runs", runs},
      {"threads", threads},
      {"kernels", kernels().name},
      {"kernels_reason", kernels_reason()},
      {"vision_attention", attention_precision_name(va_ran)},
      {"tiles", {{"core", tiles.core},
                 {"attention_q_block", tiles.attn_q_block},
                 {"attention_kv_block", tiles.attn_kv_block},
                 {"gemm_row_block", tiles.gemm_row_block},
                 {"source", tiles.source}}},
      {"first_token_breakdown_ms", breakdown},
      {"decode_breakdown_ms_per_token", decode_breakdown},
      {"text_weights", weight_type_name((*model)->text_weight_type())},
      {"vision_weights", weight_type_name((*model)->vision_weight_type())},
  };
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("model %s (text %s, vision %s), %d threads, %s kernels, median of %d runs\n", model_dir.c_str(),
                weight_type_name((*model)->text_weight_type()), weight_type_name((*model)->vision_weight_type()),
                threads, kernels().name, runs);
    std::printf("kernels %s\n", kernels_reason().c_str());
    std::printf("tiles for %s: attention blocks %d x %d, GEMM row block %d (%s); vision attention %s\n", tiles.core.c_str(),
                tiles.attn_q_block, tiles.attn_kv_block, tiles.gemm_row_block, tiles.source.c_str(),
                attention_precision_name(va_ran));
    std::printf("load %.0f ms | preprocess %.1f ms | vision %.0f ms (%d image tokens) | prefill %.1f tok/s (%d tokens) | "
                "first token %.0f ms | decode %.2f tok/s | peak RSS %.0f MB\n",
                load_ms, median(pre), median(vis), last.image_tokens, median(prefill), last.prompt_tokens, median(ttft),
                median(decode), rss_mb);
    std::printf("activations: vision %.1f MB, text %.1f MB (the forward passes' buffers at their largest)\n",
                static_cast<double>(last.vision_activation_bytes) / (1024.0 * 1024.0),
                static_cast<double>(last.text_activation_bytes) / (1024.0 * 1024.0));
    std::printf("first token:");
    for (size_t k = 0; k < kNumParts; ++k) std::printf("%s %s %.0f ms", k ? "," : "", kParts[k], breakdown[kParts[k]].get<double>());
    std::printf("\n");
    if (!decode_parts.empty()) {
      std::printf("decode, per token:");
      for (size_t k = 0; k < std::size(kDecodeParts); ++k)
        std::printf("%s %s %.2f ms", k ? "," : "", kDecodeParts[k], decode_breakdown[kDecodeParts[k]].get<double>());
      std::printf("\n");
    }
    if (!docs.empty())
      std::printf("documents: %d pages rendered in %.0f ms (each run; before the vision encode, not in first token)\n",
                  document_pages, median(render_ms));
    if (!video_files.empty())
      std::printf("video: decode + sample + resize %.0f ms | %d frames | %d video tokens\n", median(video_ms),
                  last.video_frames, last.video_tokens);
  }
  return 0;
}

}  // namespace qvl::cli
