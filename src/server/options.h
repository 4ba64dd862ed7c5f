// The settings of `qvl serve` as plain values (where to listen, how many requests run and wait, limits and
// access rules), filled by the CLI from its flags and by tests directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/documents.h"
#include "model/kv_type.h"
#include "util/status.h"

namespace qvl::server {

// Ollama's /api/pull, done by whoever starts the server (the command line: qvl's hub client): `spec` is a
// hub model spec ("ORG/NAME", "ORG/NAME-GGUF:Q4_K_M", "modelscope:ORG/NAME"); progress is reported as files
// arrive; the result is the local model directory.
struct PullProgress {
  std::string file;               // the file that last received bytes
  int64_t file_done = 0, file_total = 0;
  int64_t all_done = 0, all_total = 0;
};
using PullFn = std::function<Result<std::string>(const std::string& spec, const std::function<void(const PullProgress&)>&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (tests); Server::port() says which
  std::string model_id;              // shown by /v1/models and /api/tags: the directory name or hub id
  std::string mode = "cpu";          // reported by /health

  int threads = 0;                   // model threads (the inference thread's pool); 0: one per physical core
  bool pin = false;                  // pin them, one per physical core
  int parallel = 4;                  // sessions decoding at once ("slots"), in one batched pass a round
  int slice_tokens = 64;             // prompt tokens (or vision work of the same cost) read per round
  int64_t image_cache_mb = 256;      // encoded images kept for later requests; 0: none
  int64_t prefix_cache_mb = 1024;    // finished requests' KV caches kept for follow-up turns; 0: none
  int64_t response_store_mb = 64;    // Responses API: stored responses (store: true) kept for previous_response_id
                                     // and GET /v1/responses/{id}, least recently used first out; 0: none kept
  int64_t context = 4096;            // KV cache per slot: prompt + generated tokens
  KVType kv_type = KVType::kF16;     // its storage
  int64_t min_pixels = -1;           // image size bounds for every request; -1: the model's processor config
  int64_t max_pixels = -1;
  double timeout_s = 600;            // per request, counted from its arrival; 0: none
  int queue = 16;                    // requests waiting for a slot; one more is refused with 503
  int ready_queue = 0;               // /readyz answers 503 while this many requests wait; 0: `queue` (full)
  std::vector<std::string> api_keys; // when any: `Authorization: Bearer K` on every API endpoint
  std::vector<std::string> cors_origins;  // allowed browser origins ("*": any); none: no CORS headers
  // Host header names accepted besides IP addresses, "localhost" and `host` ("*": any), so that a DNS name
  // an attacker controls cannot be rebound to this server (DNS rebinding).
  std::vector<std::string> allowed_hosts;
  std::string image_dir;             // local image paths may be read only from inside it; empty: refused
  // http(s) image and video URLs are fetched from these hosts ("*": any public host; an internal address only
  // when its host is named); empty: URLs refused. Each fetch within media_url_timeout_s.
  std::vector<std::string> media_url_hosts;
  double media_url_timeout_s = 20;
  size_t max_body = 20u << 20;       // request bodies over this are refused with 413
  int http_threads = 0;              // workers running API requests; 0: parallel + queue + 8 (at least 16)
  int max_connections = 256;         // connections open at once; more are answered 503 and closed (the probes
                                     // /livez, /readyz, /health and /metrics still answered on 8 more)
  int64_t decode_memory_mb = 0;      // images being decoded at once may hold this much (0: an eighth of the RAM,
                                     // within 1-8 GiB); a request waits for room or gets 503
  int max_connections_per_client = 64;  // connections open at once from one address (0: no limit)
  double header_timeout_s = 10;      // a request's header must arrive within this, however slowly it is sent
  double body_timeout_s = 60;        // and its body within this after the header
  double keep_alive_s = 5;           // an idle connection is closed after this
  bool access_log = false;           // one line per API request on stderr
  PullFn pull;                       // /api/pull's downloader (--allow-pull); null: /api/pull answers 403
  DocumentOptions documents;         // PDF pages: DPI cap, pages a request, the confined renderer's limits
  int64_t page_cache_mb = 256;       // documents' rendered pages kept for follow-up questions; 0: none
};

}  // namespace qvl::server
