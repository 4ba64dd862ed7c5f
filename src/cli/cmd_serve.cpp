// `qvl serve --model M | --demo [options]`: the HTTP server (OpenAI, Ollama and the legacy endpoints), loading
// the model in the background and stopping gracefully on SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "cli/cli.h"
#include "cli/options.h"
#include "io/pdf.h"
#include "util/sandbox.h"
#include "cli/progress_bar.h"
#include "kernels/kernels.h"
#include "model/bundled_files.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "model/gguf_checkpoint.h"
#include "model/image_processor.h"
#include "model/test_model.h"
#include "hub/hub.h"
#include "hub/resolve.h"
#include "server/server.h"
#include "util/builtin_files.h"
#include "util/cpu_budget.h"
#include "util/sd_notify.h"

namespace qvl::cli {

int cmd_serve(const std::vector<std::string>& args);

namespace {

// Every option also reads QVL_<NAME> from the environment (--max-body: QVL_MAX_BODY), for containers and
// service units; a flag on the command line wins over the environment. The help shows each name.
void add_environment_names(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty() || opt->get_lnames().front() == "help" || opt->get_group().empty()) continue;
    std::string name = "QVL_";
    for (char c : opt->get_lnames().front()) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    opt->envname(name);
    opt->description(opt->get_description() + " [" + name + "]");
  }
}

CLI::Validator seconds_in(double hi) {
  return CLI::Validator(
      [hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || errno == ERANGE || !(x >= 0) || x > hi)
          return "expects seconds (a number in [0, " + std::to_string(static_cast<long long>(hi)) + "]), got '" + v + "'";
        return "";
      },
      "");
}

// Blocks SIGINT and SIGTERM in this thread before any other starts, so every thread inherits the mask and
// the main loop receives them with sigtimedwait (no async handler).
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  CommandLine cli("serve", "The HTTP server: OpenAI- and Ollama-compatible APIs, the older deployments' endpoints and "
                           "a chat page (docs/API.md). The model loads (or downloads) in the background. Every option can also be "
                           "set in the environment as QVL_<OPTION> (--max-body: QVL_MAX_BODY).");
  server::ServerOptions o;
  WeightTypes weight_types = default_weight_types();
  std::string model_spec, model_files;
  bool demo = false, quiet = false, allow_pull = false;
  double grace = 10;
  add_model_option(cli, model_spec, ModelSpec::kDirectoryOrHubId);
  std::string revision;
  add_revision_option(cli, revision);
  cli.add_flag("--demo", demo, "serve a tiny generated test model (random weights: gibberish answers)");
  add_model_files_option(cli, model_files);
  std::string alias;
  cli.add_option("--alias", alias,
                 "the model's name in the APIs (/v1/models, responses' \"model\", /api/tags; also "
                 "--served-model-name)")
      ->type_name("NAME")->default_str("the hub id, or the model's directory or file name");
  add_hidden_alias(cli, "--served-model-name", alias);
  std::string mmproj;
  add_mmproj_option(cli, mmproj);
  cli.add_option("--host", o.host, "listen address (0.0.0.0: every interface; see docs/API.md before exposing it)")
      ->type_name("ADDR")->default_str(o.host);
  cli.add_option("--port", o.port, "listen port")->type_name("N")->check(integer_in(1, 65535))->default_str(std::to_string(o.port));
  add_thread_options(cli, o.threads, &o.pin);
  add_weight_options(cli, weight_types);
  cli.add_option("--parallel", o.parallel, "requests decoding at once (slots)")->type_name("N")->check(integer_in(1, 64))
      ->default_str(std::to_string(o.parallel));
  cli.add_option("--prefill-slice", o.slice_tokens,
                 "prompt tokens read per round between two tokens of the running answers (vision work of the same "
                 "cost): smaller keeps streams smoother, larger reads prompts faster")
      ->type_name("N")->check(integer_in(1, 1 << 20))->default_str(std::to_string(o.slice_tokens));
  cli.add_option("--image-cache-mb", o.image_cache_mb, "encoded images kept for later requests (MiB; 0: none)")
      ->type_name("MIB")->check(integer_in(0, 1 << 24))->default_str(std::to_string(o.image_cache_mb));
  cli.add_option("--prefix-cache-mb", o.prefix_cache_mb,
                 "KV caches of finished requests kept so follow-up turns read only their new tokens (MiB; 0: none)")
      ->type_name("MIB")->check(integer_in(0, 1 << 24))->default_str(std::to_string(o.prefix_cache_mb));
  cli.add_option("--response-store-mb", o.response_store_mb,
                 "Responses API: stored responses kept for previous_response_id (MiB of their JSON; least recently "
                 "used evicted first; 0: none kept)")
      ->type_name("MIB")->check(integer_in(0, 1 << 20))->default_str(std::to_string(o.response_store_mb));
  add_context_options(cli, o.context, o.kv_type);
  std::string vision_attention = "auto";
  add_vision_attention_option(cli, vision_attention);
  add_image_size_options(cli, o.min_pixels, o.max_pixels);
  add_document_options(cli, o.documents);
  cli.add_option("--page-cache-mb", o.page_cache_mb,
                 "rendered PDF pages kept so follow-up questions about a document render nothing again (MiB; 0: none)")
      ->type_name("MIB")->check(integer_in(0, 1 << 24))->default_str(std::to_string(o.page_cache_mb));
  cli.add_option("--timeout", o.timeout_s, "per request, queueing included; 0: none")->check(seconds_in(1e7))
      ->type_name("SEC")->default_str("600");
  cli.add_option("--queue", o.queue, "requests waiting for a slot; more get 503")->type_name("N")
      ->check(integer_in(0, 100000))->default_str(std::to_string(o.queue));
  cli.add_option("--ready-queue", o.ready_queue,
                 "GET /readyz answers 503 while N requests wait, so a load balancer sends new work elsewhere "
                 "(0: when the queue is full)")
      ->type_name("N")->check(integer_in(0, 100000))->default_str("0");
  cli.add_option("--api-key", o.api_keys, "require 'Authorization: Bearer KEY' (repeatable: any of the keys)")
      ->type_name("KEY")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->allow_extra_args(false);
  cli.add_option("--cors", o.cors_origins, "allow browser requests from ORIGIN, or * (repeatable)")->type_name("ORIGIN")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->allow_extra_args(false);
  cli.add_option("--allowed-host", o.allowed_hosts,
                 "accept requests whose Host is NAME (repeatable; * for any); IP addresses, localhost and --host are "
                 "always accepted")
      ->type_name("NAME")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->allow_extra_args(false);
  cli.add_option("--max-connections", o.max_connections, "connections open at once; more get 503")->type_name("N")
      ->check(integer_in(1, 100000))->default_str(std::to_string(o.max_connections));
  cli.add_option("--decode-memory-mb", o.decode_memory_mb,
                 "memory for decoding images and videos, all requests together (MiB; a request waits for room or gets 503; "
                 "0: an eighth of the RAM, within 1-8 GiB)")
      ->type_name("MIB")->check(integer_in(0, 1 << 24))->default_str("0");
  cli.add_option("--max-connections-per-client", o.max_connections_per_client,
                 "connections open at once from one client address; more get 503 (0: no limit; behind a proxy "
                 "every connection comes from the proxy)")
      ->type_name("N")->check(integer_in(0, 100000))->default_str(std::to_string(o.max_connections_per_client));
  cli.add_option("--image-dir,--media-dir", o.image_dir, "allow requests to name local image and video files inside DIR")->type_name("DIR");
  cli.add_flag("--allow-pull", allow_pull,
               "let clients download models into the hub cache with Ollama's /api/pull (the server's disk, bandwidth "
               "and HF_TOKEN); off: /api/pull answers 403");
  cli.add_option("--allow-media-urls", o.media_url_hosts,
                 "fetch http(s) image and video URLs of these hosts ('*': any public host; a loopback or private "
                 "address only when its host is named); off by default")
      ->type_name("HOST[,HOST...]")->delimiter(',');
  cli.add_option("--media-url-timeout", o.media_url_timeout_s, "time limit of one URL fetch, redirects included")
      ->check(seconds_in(600))->default_str("20");
  cli.add_option("--max-body", o.max_body, "largest request body in bytes (after decompression)")->type_name("BYTES")
      ->check(integer_in(1024, 1ll << 34))->default_str(std::to_string(o.max_body));
  cli.add_option("--shutdown-grace", grace, "on SIGTERM/SIGINT, time given to running requests")->check(seconds_in(1e7))
      ->type_name("SEC")->default_str("10");
  cli.add_flag("--quiet", quiet, "no access log");
  add_environment_names(cli);
  if (auto rc = cli.parse_args(args)) return *rc;
  if (auto rc = check_image_sizes(cli.command(), o.min_pixels, o.max_pixels)) return *rc;
  const std::string& cmd = cli.command();
  o.access_log = !quiet;
  for (const std::string& k : o.api_keys) {
    if (k.empty()) return fail(cmd, "--api-key is empty");
  }
  if (demo && !model_spec.empty()) return fail(cmd, "give --model or --demo, not both");
  if (demo && !mmproj.empty()) return fail(cmd, "--mmproj is for a GGUF --model, not --demo");
  if (demo && !revision.empty()) return fail(cmd, "--revision is for a hub id given as --model, not --demo");
  if (!revision.empty())
    if (Status st = hub::check_revision(revision); !st.ok()) return fail(cmd, "--revision: " + st.message());
  if (!demo && model_spec.empty()) {
    return fail(cmd, "--model is required: a model directory or a hub id such as Qwen/Qwen3-VL-2B-Instruct (or --demo "
                     "for a tiny test model); run 'qvl serve --help' for the options");
  }

  const int threads = o.threads > 0 ? o.threads : default_threads();
  ModelLoader loader;
  auto progress = std::make_shared<server::LoadProgress>();
  std::string demo_dir;
  if (demo) {
    if (model_files.empty()) model_files = bundled_model_files();
    std::error_code ec;
    if (!model_file_exists((std::filesystem::path(model_files) / "tokenizer.json").string()) ||
        !model_file_exists((std::filesystem::path(model_files) / "config.json").string())) {
      return fail(cmd, "--demo builds a tiny model from the checkpoint's config and tokenizer files, but " + model_files +
                           " has no config.json and tokenizer.json; pass --model-files DIR (a Qwen3-VL model "
                           "directory, e.g. from huggingface-cli download Qwen/Qwen3-VL-2B-Instruct)");
    }
    std::string tmpl = (std::filesystem::temp_directory_path(ec) / "qvl-demo-XXXXXX").string();
    if (ec || !mkdtemp(tmpl.data())) return fail(cmd, "cannot create a temporary directory for the demo model");
    demo_dir = tmpl;
    o.model_id = "qvl-demo-tiny";
    loader = [demo_dir, model_files, weight_types, threads]() -> Result<std::unique_ptr<Model>> {
      TestModelOptions t;
      t.preset = "tiny";
      t.seed = 1;
      t.out_dir = demo_dir;
      t.model_files_dir = model_files;
      QVL_RETURN_IF_ERROR(make_test_model(t));
      auto model = Model::load(demo_dir, weight_types, threads);
      // Loaded (the weights mapped, the rest read): the files go now, so a server killed with SIGKILL
      // leaves no 50 MB directory behind in /tmp. The mapping outlives the unlinked file.
      std::error_code ec;
      std::filesystem::remove_all(demo_dir, ec);
      return model;
    };
  } else {
    // A hub id not in the cache downloads on the inference thread, so /health answers (503 "downloading" with
    // the percentage) and the download's progress goes to the log meanwhile.
    ResolveOptions check;
    check.download = false;
    check.revision = revision;
    auto cached = resolve_model(model_spec, check);
    if (cached.ok()) {
      o.model_id = cached->id;
      // A model at hand is checked before listening, so a broken one exits at once, as any other bad argument
      // does (the weights are read in the background): a model directory's configs; a GGUF's pair of files
      // and their headers (its config is its metadata).
      Status st;
      if (is_gguf_model(cached->dir)) {
        auto pair = locate_gguf_pair(cached->dir, mmproj);
        st = pair.status();
        if (st.ok()) st = GgufFile::open(pair->text).status();
        if (st.ok() && !pair->mmproj.empty()) st = GgufFile::open(pair->mmproj).status();
        if (st.ok() && pair->mmproj.empty())
          std::fprintf(stderr, "qvl serve: warning: %s has no vision file beside it (mmproj-*.gguf) and no --mmproj "
                               "was given: serving text only, requests with images or videos get 400\n",
                       cached->dir.c_str());
      } else {
        if (!mmproj.empty()) st = Status::Error("--mmproj " + mmproj + ": a vision file is for a GGUF model, but " +
                                                cached->dir + " is a model directory; drop --mmproj");
        if (st.ok()) st = ModelConfig::load(cached->dir).status();
        if (st.ok()) st = GenerationConfig::load(cached->dir).status();
        if (st.ok()) st = ImageProcessorConfig::load(cached->dir).status();
      }
      if (!st.ok()) return fail(cmd, st.message());
    } else if (auto spec = hub::parse_model_spec(hub::split_gguf_tag(model_spec).first);
               spec.ok() && !std::filesystem::exists(model_spec)) {
      // (A GGUF repository's tag, ORG/NAME-GGUF:Q4_K_M, downloads the file of that quantization.)
      const std::string tag = hub::split_gguf_tag(model_spec).second;
      o.model_id = spec->second + (tag.empty() ? "" : ":" + tag);
    } else {
      return fail(cmd, cached.status().message());
    }
    loader = [model_spec, revision, mmproj, weight_types, threads, progress]() -> Result<std::unique_ptr<Model>> {
      ProgressBar bar(stderr, "qvl serve: download", /*tty=*/0);
      ResolveOptions r;
      r.revision = revision;
      r.on_progress = [&](const hub::Progress& p) {
        progress->total_bytes.store(p.all_total);
        progress->done_bytes.store(p.all_done);
        progress->downloading.store(!p.finished);
        bar.update(p);
      };
      r.on_warning = [](const std::string& w) { std::fprintf(stderr, "qvl serve: warning: %s\n", w.c_str()); };
      auto located = resolve_model(model_spec, r);
      progress->downloading.store(false);
      if (!located.ok()) return located.status();
      return Model::load(located->dir, weight_types, threads, mmproj);
    };
  }
  // Every model loaded (at start-up or a hub download) gets --vision-attention.
  loader = [inner = std::move(loader), cmd, vision_attention]() -> Result<std::unique_ptr<Model>> {
    auto m = inner();
    if (m.ok()) apply_vision_attention(cmd, **m, vision_attention);
    return m;
  };
  if (!alias.empty()) o.model_id = alias;
  // Ollama's /api/pull, with --allow-pull only (it spends the server's disk, bandwidth and HF_TOKEN): into the
  // hub's cache, as `qvl pull` does (the environment's endpoint, token, offline mode).
  if (allow_pull) o.pull = [](const std::string& spec, const std::function<void(const server::PullProgress&)>& progress) -> Result<std::string> {
    const auto [id_spec, tag] = hub::split_gguf_tag(spec);
    QVL_ASSIGN_OR_RETURN(auto parsed, hub::parse_model_spec(id_spec));
    hub::PullOptions p;
    p.source = parsed.first;
    p.repo_id = parsed.second;
    p.gguf_tag = tag;
    p.on_progress = [&progress](const hub::Progress& h) {
      progress(server::PullProgress{h.file, h.file_done, h.file_total, h.all_done, h.all_total});
    };
    return hub::pull(p);
  };
  auto remove_demo = [&] {
    std::error_code ec;
    if (!demo_dir.empty()) std::filesystem::remove_all(demo_dir, ec);
  };

  sigset_t stop_signals = block_stop_signals();
  server::Server server(o, loader, progress);
  if (Status s = server.start(); !s.ok()) {
    remove_demo();
    return fail(cmd, s.message());
  }
  std::fprintf(stderr, "qvl serve: listening on http://%s:%d; loading %s ...\n", o.host.c_str(), server.port(),
               o.model_id.c_str());
  if (o.threads > 0) {
    std::fprintf(stderr, "qvl serve: %d model thread(s) (--threads)\n", o.threads);
  } else {
    std::fprintf(stderr, "qvl serve: %s\n", cpu_budget().describe().c_str());
  }
  std::fprintf(stderr, "qvl serve: kernels %s\n", kernels_reason().c_str());
  std::fprintf(stderr, "qvl serve: accepting Host %s\n", server.accepted_hosts().c_str());
  if (Status docs = pdf_renderer_available(); docs.ok())
    std::fprintf(stderr, "qvl serve: PDF documents rendered by Poppler in confined workers (%s)%s\n",
                 sandbox_isolation().c_str(),
                 sandbox_has_landlock() ? ""
                                        : "; warning: this kernel has no Landlock, so a compromised worker could read "
                                          "what the server's user can read");
  else
    std::fprintf(stderr, "qvl serve: PDF documents refused (501): %s\n", docs.message().c_str());
  // A Type=notify service unit (deploy/systemd) waits for READY=1; elsewhere these do nothing.
  auto notify = [](const std::string& state) {
    if (Status st = sd_notify(state); !st.ok()) std::fprintf(stderr, "qvl serve: warning: %s\n", st.message().c_str());
  };
  notify("STATUS=loading " + o.model_id);
  bool announced = false;
  for (;;) {
    timespec tick{0, 250 * 1000 * 1000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      notify("STOPPING=1\nSTATUS=draining");
      std::fprintf(stderr, "qvl serve: %s: finishing %d running request(s) (up to %g s), then exiting\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", server.busy_slots() + server.queue_depth(), grace);
      break;
    }
    if (server.load_state() == LoadState::kFailed) {
      std::fprintf(stderr, "qvl serve: %s\n", server.load_error().c_str());
      server.shutdown(0);
      remove_demo();
      return 1;
    }
    if (!announced && server.load_state() == LoadState::kReady) {
      announced = true;
      notify("READY=1\nSTATUS=serving " + o.model_id + " on port " + std::to_string(server.port()));
      std::fprintf(stderr, "qvl serve: model ready; serving %s on http://%s:%d\n", o.model_id.c_str(), o.host.c_str(),
                   server.port());
    }
  }
  server.shutdown(grace);
  remove_demo();
  std::fprintf(stderr, "qvl serve: stopped\n");
  return 0;
}

}  // namespace qvl::cli
