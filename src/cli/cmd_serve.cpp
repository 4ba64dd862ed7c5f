// `qvl serve --model M | --demo [options]`: the HTTP server (OpenAI, Ollama and the legacy endpoints), loading
// the model in the background and stopping gracefully on SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "cli/cli.h"
#include "model/bundled_files.h"
#include "model/test_model.h"
#include "model/resolve.h"
#include "server/server.h"

namespace qvl::cli {

int cmd_serve(const std::vector<std::string>& args);

namespace {

const char kServeUsage[] =
    "usage: qvl serve --model DIR|HUB_ID [options]\n"
    "       qvl serve --demo [--model-files DIR] [options]   (a tiny generated test model)\n"
    "options:\n"
    "  --host ADDR            listen address (default 127.0.0.1)\n"
    "  --port N               listen port (default 8080)\n"
    "  --threads N            model threads (default: one per physical core)\n"
    "  --pin                  pin the model threads, one per physical core (within taskset's CPUs)\n"
    "  --text-weights T       f32, f16, bf16, q8_0 or q4_0, quantized at load (default: see qvl help)\n"
    "  --vision-weights T\n"
    "  --parallel N           requests decoding at once (default 1)\n"
    "  --ctx N                context per request: prompt + answer tokens (default 4096)\n"
    "  --kv-type T            KV cache storage: f16 (default, half the memory) or f32\n"
    "  --min-pixels N         image size bounds (default: the model's preprocessor_config.json)\n"
    "  --max-pixels N\n"
    "  --timeout SEC          per request, queueing included; 0: none (default 600)\n"
    "  --queue N              requests waiting for a slot; more get 503 (default 16)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' (repeatable)\n"
    "  --cors ORIGIN          allow browser requests from ORIGIN, or * (repeatable)\n"
    "  --allowed-host NAME    accept requests whose Host is NAME (repeatable; * for any); IP addresses,\n"
    "                         localhost and --host are always accepted (see docs/API.md)\n"
    "  --max-connections N    connections open at once; more get 503 (default 256)\n"
    "  --image-dir DIR        allow requests to name local image files inside DIR\n"
    "  --max-body BYTES       largest request body (default 20971520)\n"
    "  --shutdown-grace SEC   on SIGTERM/SIGINT, time given to running requests (default 10)\n"
    "  --model-files DIR      with --demo: the checkpoint's config and tokenizer files\n"
    "                         (default: the files that ship with qvl, models/qwen3-vl-2b-instruct)\n"
    "  --quiet                no access log";

Result<double> parse_seconds(const std::string& option, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || !(v >= 0) || v > 1e7) {
    return Status::Error(option + " expects seconds (a number >= 0), got '" + value + "'");
  }
  return v;
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
  const std::string cmd = "serve";
  server::ServerOptions o;
  WeightTypes weight_types = default_weight_types();
  o.access_log = true;
  std::string model_spec, model_files;
  bool demo = false;
  double grace = 10;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string* v = i + 1 < args.size() ? &args[i + 1] : nullptr;
    auto need = [&]() -> bool {
      if (!v) return false;
      ++i;
      return true;
    };
    auto integer = [&](long long lo, long long hi, auto& out) -> int {
      if (!need()) return fail(cmd, a + " needs a value\n" + kServeUsage);
      auto r = parse_int(a, *v, lo, hi);
      if (!r.ok()) return fail(cmd, r.status().message());
      out = static_cast<std::remove_reference_t<decltype(out)>>(*r);
      return 0;
    };
    auto seconds = [&](double& out) -> int {
      if (!need()) return fail(cmd, a + " needs a value\n" + kServeUsage);
      auto r = parse_seconds(a, *v);
      if (!r.ok()) return fail(cmd, r.status().message());
      out = *r;
      return 0;
    };
    auto text = [&](std::string& out) -> int {
      if (!need()) return fail(cmd, a + " needs a value\n" + kServeUsage);
      out = *v;
      return 0;
    };
    int rc = 0;
    std::string s;
    if (a == "--model" || a == "-m") {
      rc = text(model_spec);
    } else if (a == "--demo") {
      demo = true;
    } else if (a == "--model-files") {
      rc = text(model_files);
    } else if (a == "--host") {
      rc = text(o.host);
    } else if (a == "--port") {
      rc = integer(1, 65535, o.port);
    } else if (a == "--threads" || a == "-t") {
      rc = integer(1, 1024, o.threads);
    } else if (a == "--text-weights" || a == "--vision-weights") {
      std::string name;
      rc = text(name);
      WeightType t;
      if (rc == 0 && !weight_type_from_name(name, &t))
        return fail(cmd, a + ": unknown type '" + name + "' (f32, f16, bf16, q8_0, q4_0)");
      if (rc == 0) (a == "--text-weights" ? weight_types.text : weight_types.vision) = t;
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--kv-type") {
      std::string name;
      rc = text(name);
      if (rc == 0 && !kv_type_from_name(name, &o.kv_type)) return fail(cmd, a + ": unknown type '" + name + "' (f16, f32)");
    } else if (a == "--parallel") {
      rc = integer(1, 64, o.parallel);
    } else if (a == "--ctx") {
      rc = integer(16, 1 << 20, o.context);
    } else if (a == "--min-pixels") {
      rc = integer(1, 1ll << 40, o.min_pixels);
    } else if (a == "--max-pixels") {
      rc = integer(1, 1ll << 40, o.max_pixels);
    } else if (a == "--timeout") {
      rc = seconds(o.timeout_s);
    } else if (a == "--queue") {
      rc = integer(0, 100000, o.queue);
    } else if (a == "--api-key") {
      if (!(rc = text(s))) {
        if (s.empty()) return fail(cmd, "--api-key is empty");
        o.api_keys.push_back(s);
      }
    } else if (a == "--cors") {
      if (!(rc = text(s))) o.cors_origins.push_back(s);
    } else if (a == "--allowed-host") {
      if (!(rc = text(s))) o.allowed_hosts.push_back(s);
    } else if (a == "--max-connections") {
      rc = integer(1, 100000, o.max_connections);
    } else if (a == "--image-dir") {
      rc = text(o.image_dir);
    } else if (a == "--max-body") {
      rc = integer(1024, 1ll << 34, o.max_body);
    } else if (a == "--shutdown-grace") {
      rc = seconds(grace);
    } else if (a == "--quiet") {
      o.access_log = false;
    } else {
      return fail(cmd, "unexpected argument '" + a + "'\n" + kServeUsage);
    }
    if (rc) return rc;
  }
  if (demo && !model_spec.empty()) return fail(cmd, "give --model or --demo, not both");
  if (!demo && model_spec.empty()) {
    return fail(cmd, std::string("--model is required: a model directory or a hub id such as "
                                 "Qwen/Qwen3-VL-2B-Instruct (or --demo for a tiny test model)\n") + kServeUsage);
  }

  const int threads = o.threads > 0 ? o.threads : ThreadPool::physical_cores();
  server::ModelLoader loader;
  std::string demo_dir;
  if (demo) {
    if (model_files.empty()) {
      auto files = bundled_model_files_dir();
      if (!files.ok()) return fail(cmd, files.status().message());
      model_files = *files;
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::path(model_files) / "tokenizer.json", ec) ||
        !std::filesystem::is_regular_file(std::filesystem::path(model_files) / "config.json", ec)) {
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
      return Model::load(demo_dir, weight_types, threads);
    };
  } else {
    auto located = resolve_model(model_spec);
    if (!located.ok()) return fail(cmd, located.status().message());
    o.model_id = located->id;
    loader = [dir = located->dir, weight_types, threads]() { return Model::load(dir, weight_types, threads); };
  }
  auto remove_demo = [&] {
    std::error_code ec;
    if (!demo_dir.empty()) std::filesystem::remove_all(demo_dir, ec);
  };

  sigset_t stop_signals = block_stop_signals();
  server::Server server(o, loader);
  if (Status s = server.start(); !s.ok()) {
    remove_demo();
    return fail(cmd, s.message());
  }
  std::fprintf(stderr, "qvl serve: listening on http://%s:%d; loading %s ...\n", o.host.c_str(), server.port(),
               o.model_id.c_str());
  bool announced = false;
  for (;;) {
    timespec tick{0, 250 * 1000 * 1000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "qvl serve: %s: finishing %d running request(s) (up to %g s), then exiting\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", server.busy_slots() + server.queue_depth(), grace);
      break;
    }
    if (server.load_state() == server::LoadState::kFailed) {
      std::fprintf(stderr, "qvl serve: %s\n", server.load_error().c_str());
      server.shutdown(0);
      remove_demo();
      return 1;
    }
    if (!announced && server.load_state() == server::LoadState::kReady) {
      announced = true;
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
