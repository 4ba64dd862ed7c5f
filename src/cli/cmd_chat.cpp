// `qvl chat --model DIR [--image FILE ...] [--system TEXT] ...`: a conversation in the terminal, as people
// know it from `ollama run` and `llama-cli`: each line is a user turn, the answer streams back, the
// conversation goes on. `/image PATH` attaches a picture to the next turn, `/video PATH` a clip; Ctrl-C stops the answer being
// written (not the program); `/bye` or Ctrl-D ends. The encoded images and the conversation's KV cache are
// kept between turns, so a follow-up question reads only its own tokens. In a terminal: line editing and
// history (libedit; cli/line_editor.h), """ ... """ for a message of several lines, and what is typed while an
// answer streams waits for the next prompt.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/line_editor.h"
#include "cli/model_arg.h"
#include "cli/options.h"
#include "util/file.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "util/cpu_budget.h"

namespace qvl::cli {

namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

constexpr const char* kHelp =
    "  /image PATH   attach a picture (JPEG, PNG, WebP, GIF, BMP, PPM) to your next message\n"
    "  /file PATH [PAGES]  attach a PDF's pages (all, or e.g. 1-3,7) to your next message\n"
    "  /video PATH   attach a video clip (MP4, WebM, MKV, MOV, animated GIF/WebP) to your next message\n"
    "  /clear        forget the conversation (the system message stays)\n"
    "  \"\"\"           a message of several lines: start and end it with \"\"\"\n"
    "  Up, Down      earlier messages (kept in the history file; QVL_HISTORY names it)\n"
    "  /bye          quit (also /exit, Ctrl-D)\n"
    "  Ctrl-C        stop the answer being written\n";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

}  // namespace

int cmd_chat(const Args& args) {
  CommandLine cli("chat", "A conversation in the terminal: type a message, the answer streams back. /image PATH, /video PATH "
                          "attaches a picture, Ctrl-C stops an answer, /bye quits.");
  std::string model_dir, system;
  std::vector<std::string> image_paths;
  int threads = default_threads();
  bool pin = false;
  GenerateOptions opts;
  opts.max_tokens = 1024;
  WeightTypes weight_types = default_weight_types();
  SamplingArgs sampling;
  add_model_option(cli, model_dir, ModelSpec::kDirectoryOrHubId)->required();
  std::string revision;
  add_revision_option(cli, revision);
  std::string mmproj;
  add_mmproj_option(cli, mmproj);
  add_image_option(cli, image_paths);
  cli.add_option("--system", system, "a system message before the conversation")->type_name("TEXT");
  add_max_tokens_option(cli, opts.max_tokens);
  add_sampling_options(cli, sampling);
  add_thread_options(cli, threads, &pin);
  add_weight_options(cli, weight_types);
  std::string vision_attention = "auto";
  add_vision_attention_option(cli, vision_attention);
  add_context_options(cli, opts.context, opts.kv_type);
  add_image_size_options(cli, opts.image.min_pixels, opts.image.max_pixels);
  ImageDecodeLimits decode;
  add_image_page_option(cli, decode.page);
  DocumentArgs documents;
  add_document_file_options(cli, documents, "a PDF document for the first message: its pages go to the model as "
                            "images (repeatable; /file PATH [PAGES] attaches one later)");
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), opts.image.min_pixels, opts.image.max_pixels)) return *rc;
  const std::string& cmd = cli.command();
  {
    auto dir = find_model_dir(cmd, model_dir, true, revision);
    if (!dir.ok()) return fail(cmd, dir.status().message());
    model_dir = *dir;
  }
  std::vector<ImageRGB> pending;  // attached to the next user message
  std::vector<ContentPart> pending_parts;  // their parts, in order: an image, or a document page's label and image
  for (const std::string& path : image_paths) {
    auto img = load_image_file(path, decode);
    if (!img.ok()) return fail(cmd, img.status().message());
    pending.push_back(std::move(img).value());
    pending_parts.push_back({ContentPart::Kind::kImage, ""});
  }
  auto first_docs = documents.open();  // checked before the model loads, rendered after
  if (!first_docs.ok()) return fail(cmd, first_docs.status().message());

  const bool interactive = isatty(STDIN_FILENO);
  LoadingLine loading(model_dir);
  auto model = Model::load(model_dir, weight_types, threads, mmproj);
  loading.stop();
  if (!model.ok()) return fail(cmd, model.status().message());
  apply_vision_attention(cmd, **model, vision_attention);
  if ((*model)->kind() != ModelKind::kChat)
    return fail(cmd, model_dir + " is a Qwen3-VL " + model_kind_name((*model)->kind()) + " model: it does not answer "
                     "prompts; use `qvl embed` (embeddings) or `qvl serve` (" + model_kind_serves((*model)->kind()) + ")");
  auto defaults = SamplingParams::from_generation_config((*model)->generation());
  if (!defaults.ok()) return fail(cmd, defaults.status().message());
  opts.sampling = *defaults;
  sampling.apply_to(opts.sampling);
  ThreadPool pool(threads);
  if (pin) {
    auto cpus = pool.pin_to_cores();
    if (!cpus.ok()) return fail(cmd, cpus.status().message());
  }
  // Ctrl-C sets a flag instead of ending the program; reads are not restarted, so it also wakes a prompt.
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  {
    const ModelFacts& f = (*model)->facts();
    std::fprintf(stderr, "%s: Qwen3-VL %s (%s%s, %s weights), context %lld tokens, %d thread%s, %s kernels.\n",
                 std::filesystem::path(model_dir).filename().c_str(), f.parameter_size.c_str(),
                 chat_template_kind_name((*model)->chat_template()), f.vision ? "" : ", text only",
                 f.quantization_level.c_str(), static_cast<long long>(opts.context), threads, threads == 1 ? "" : "s", kernels().name);
    std::fputs("Type a message (\"\"\" for several lines); /help for commands.\n", stderr);
  }
  LineEditor editor(interactive, interactive ? chat_history_path() : "");
  PageCache page_cache(size_t{256} << 20);
  int64_t pending_tokens = 0;  // image tokens of the pending documents' pages
  // A document's pages attached to the next message, rendered now (each within what the context has left).
  auto attach_document = [&](const DocumentFile& doc) -> Status {
    const PreprocessOptions o = page_bounds(opts.image, {}, (*model)->image_config());
    QVL_ASSIGN_OR_RETURN(RenderedPages r, render_document_file(doc, (*model)->image_config(), o, documents.options,
                                                               opts.context - pending_tokens, &page_cache));
    int64_t tokens = 0;
    for (const PagePlan& p : r.plans) tokens += p.tokens;
    pending_tokens += tokens;
    append_page_parts(pending_parts, r.plans);
    for (ImageRGB& img : r.images) pending.push_back(std::move(img));
    std::fprintf(stderr, "(attached %s: %s at %.0f DPI, %lld image tokens; rendered in %.2f s)\n", doc.path.c_str(),
                 describe_pages(r.plans).c_str(), r.plans[0].dpi, static_cast<long long>(tokens), r.seconds);
    return Status::Ok();
  };
  for (const DocumentFile& doc : *first_docs)
    if (Status s = attach_document(doc); !s.ok()) return fail(cmd, s.message());

  ImageCache image_cache(size_t{256} << 20);
  PrefixCache prefix_cache(size_t{512} << 20);
  std::vector<ChatMessage> messages;
  std::vector<ImageRGB> images;  // every image of the conversation, in order
  std::vector<std::shared_ptr<const PreprocessedVideo>> videos, pending_videos;  // every video, in order
  auto reset = [&] {
    messages.clear();
    images.clear();
    videos.clear();
    if (!system.empty()) {
      ChatMessage s;
      s.role = "system";
      s.content_string = system;
      messages.push_back(s);
    }
  };
  reset();

  std::string line;
  int failed = 0;  // turns and commands that failed: a script's chat exits 1 when any did
  for (;;) {
    g_interrupted.store(false);
    const std::string prompt = !interactive ? "" : pending.empty() && pending_videos.empty() ? ">>> " : ">>> (attached) ";
    const LineEditor::Got got = editor.read(prompt, line);
    if (got == LineEditor::Got::kInterrupted || (got == LineEditor::Got::kEnd && g_interrupted.load())) {
      // Ctrl-C at the prompt: a fresh prompt (end of input is Ctrl-D)
      std::cin.clear();
      clearerr(stdin);
      std::fputs("\n(Ctrl-C stops an answer; /bye or Ctrl-D quits)\n", stderr);
      continue;
    }
    if (got == LineEditor::Got::kEnd) break;  // end of input
    const std::string text = trim(line);
    if (text.empty()) continue;
    if (text == "/bye" || text == "/exit" || text == "/quit") break;
    if (text == "/help" || text == "/?") {
      std::fputs(kHelp, stderr);
      continue;
    }
    if (text == "/clear") {
      reset();
      pending.clear();
      pending_parts.clear();
      pending_tokens = 0;
      pending_videos.clear();
      std::fputs("(conversation cleared)\n", stderr);
      continue;
    }
    if (text == "/image" || text.rfind("/image ", 0) == 0) {  // not /images: that is an unknown command
      const std::string path = trim(text.substr(6));
      if (path.empty()) {
        ++failed;
        std::fputs("usage: /image PATH\n", stderr);
        continue;
      }
      auto img = load_image_file(path, decode);
      if (!img.ok()) {
        ++failed;
        std::fprintf(stderr, "%s\n", img.status().message().c_str());
        continue;
      }
      std::fprintf(stderr, "(attached %s, %dx%d)\n", path.c_str(), img->width, img->height);
      pending.push_back(std::move(img).value());
      pending_parts.push_back({ContentPart::Kind::kImage, ""});
      continue;
    }
    if (text == "/file" || text.rfind("/file ", 0) == 0) {
      // /file PATH [PAGES]: the last word is the selection when PATH names no file with it and it reads as one
      // ("2", "1-3,7", "5-", "all").
      std::string path = trim(text.substr(5)), pages;
      if (const size_t sp = path.find_last_of(' '); sp != std::string::npos && !std::filesystem::exists(path)) {
        const std::string last = path.substr(sp + 1);
        if (last == "all" || (!last.empty() && last.find_first_not_of("0123456789,-") == std::string::npos)) {
          pages = last;
          path = trim(path.substr(0, sp));
        }
      }
      if (path.empty()) {
        ++failed;
        std::fputs("usage: /file PATH [PAGES]   (a PDF; PAGES like 1-3,7, default all)\n", stderr);
        continue;
      }
      auto doc = open_document_file(path, pages, documents.options);
      Status s = doc.ok() ? attach_document(*doc) : doc.status();
      if (!s.ok()) {
        ++failed;
        std::fprintf(stderr, "%s\n", s.message().c_str());
      }
      continue;
    }
    if (text == "/video" || text.rfind("/video ", 0) == 0) {
      const std::string path = trim(text.substr(6));
      if (path.empty()) {
        ++failed;
        std::fputs("usage: /video PATH\n", stderr);
        continue;
      }
      auto bytes = read_file_bytes(path, uint64_t{8} << 30);
      if (!bytes.ok()) {
        ++failed;
        std::fprintf(stderr, "%s\n", bytes.status().message().c_str());
        continue;
      }
      VideoOptions vo;
      vo.max_tokens = opts.context;
      auto v = preprocess_video_file(*bytes, (*model)->video_config(), vo);
      if (!v.ok()) {
        ++failed;
        std::fprintf(stderr, "%s: %s\n", path.c_str(), v.status().message().c_str());
        continue;
      }
      std::fprintf(stderr, "(attached %s: %zu frames, %d groups of %d tokens at %dx%d)\n", path.c_str(), v->indices.size(),
                   v->grid_t, v->tokens_per_group(), v->resized.width, v->resized.height);
      pending_videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(v).value()));
      continue;
    }
    if (text[0] == '/') {
      ++failed;
      std::fprintf(stderr, "unknown command %s; /help lists them\n", text.c_str());
      continue;
    }

    const size_t attached = pending.size(), attached_videos = pending_videos.size();
    ChatMessage user = user_message(0, attached_videos, text);
    user.content_parts.insert(user.content_parts.begin(), pending_parts.begin(), pending_parts.end());
    messages.push_back(std::move(user));
    for (ImageRGB& img : pending) images.push_back(std::move(img));
    pending.clear();
    pending_parts.clear();
    pending_tokens = 0;
    for (auto& v : pending_videos) videos.push_back(std::move(v));
    pending_videos.clear();

    editor.hold_input();  // typed from now on: kept for the next prompt, not mixed into the answer
    Session session(**model, SessionCaches{&image_cache, &prefix_cache});
    GenerateCallbacks cb;
    cb.keep_going = [] { return !g_interrupted.load(); };
    Status s = session.start(pool, messages, images, videos, opts, cb);
    if (!s.ok()) {  // a prompt over the context, a bad image: this turn is taken back
      editor.release_input();
      ++failed;
      std::fprintf(stderr, "%s\n", s.message().c_str());
      messages.pop_back();
      images.resize(images.size() - attached);
      videos.resize(videos.size() - attached_videos);
      continue;
    }
    while (!session.done()) {
      if (g_interrupted.load()) session.cancel();
      Session::Step step = session.step(pool);
      if (!step.text.empty()) {
        std::fwrite(step.text.data(), 1, step.text.size(), stdout);
        std::fflush(stdout);
      }
    }
    const GenerateResult& r = session.result();
    std::fputs("\n", stdout);
    std::fflush(stdout);
    editor.release_input();
    if (r.finish == FinishReason::kCancelled) std::fputs("(stopped)\n", stderr);
    const GenerateTimings& t = r.timings;
    if (interactive)
      std::fprintf(stderr, "(%d tokens, %.1f tok/s; %d of %d prompt tokens cached)\n", t.generated_tokens,
                   t.decode_ms > 0 ? t.generated_tokens * 1000.0 / t.decode_ms : 0.0, t.cached_tokens, t.prompt_tokens);
    ChatMessage answer;
    answer.role = "assistant";
    answer.content_string = r.text;
    messages.push_back(answer);
  }
  if (interactive) std::fputs("\n", stdout);
  if (editor.ended_in_block()) {
    std::fputs("the input ended inside a \"\"\" block (no closing \"\"\"); its text was not sent\n", stderr);
    ++failed;
  }
  if (failed > 0 && !interactive) {
    std::fprintf(stderr, "qvl %s: %d turn%s or command%s of the input failed (above)\n", cmd.c_str(), failed,
                 failed == 1 ? "" : "s", failed == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

}  // namespace qvl::cli
