// The HTTP server of `qvl serve`: the API routes, access control (Host, Origin, API keys, CORS), /health,
// /metrics and the page, in front of one Scheduler that loads and owns the model.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/options.h"
#include "engine/scheduler.h"
#include "util/status.h"

namespace qvl::server {

// What the model loader reports while it downloads the model (written by the loader, read by /health).
struct LoadProgress {
  std::atomic<bool> downloading{false};
  std::atomic<int64_t> done_bytes{0};
  std::atomic<int64_t> total_bytes{0};
};

class Server {
 public:
  // `load` runs on the inference thread once start() is called; /health answers 503 "loading" until it
  // returns, or 503 "downloading" with the percentage while `progress` says the loader downloads.
  Server(ServerOptions options, ModelLoader load, std::shared_ptr<const LoadProgress> progress = nullptr);
  ~Server();  // shutdown(0)
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free port), starts answering HTTP at once and starts loading the model in
  // the background. Errors: the address cannot be bound, --image-dir is not a directory.
  Status start();
  int port() const;
  // The Host header values requests may carry, for the start-up log: "localhost, box, box.local and any IP
  // address; add a name with --allowed-host NAME". Listening beyond loopback adds the machine's own names.
  std::string accepted_hosts() const;

  LoadState load_state() const;
  std::string load_error() const;
  int queue_depth() const;
  int busy_slots() const;

  // Graceful stop, idempotent: /readyz and new requests get 503 and /health says "shutting_down"; running and queued
  // requests get up to grace_s seconds to finish, then are cancelled (streams end with an error event);
  // then the HTTP server closes and the inference thread ends.
  void shutdown(double grace_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qvl::server
