// An in-process qvl server on an ephemeral port serving the tiny test model, and the HTTP helpers the server
// tests share (JSON posts, SSE and NDJSON streams, test images as base64).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/test_model.h"
#include "server/image_input.h"
#include "server/server.h"
#include "test_paths.h"
#include "test_timing.h"
#include "util/file.h"

namespace qvl::test {

using json = nlohmann::ordered_json;

// The tiny model, written once per process into a temporary directory that is removed at exit. The path
// is never destroyed, so the exit handler can still read it.
inline const std::string& tiny_model_dir() {
  static const std::string* dir = [] {
    auto* d = new std::string(
        (std::filesystem::temp_directory_path() / ("qvl-test-server-" + std::to_string(::getpid()))).string());
    TestModelOptions o;
    o.preset = "tiny";
    o.seed = 1;
    o.out_dir = *d;
    o.model_files_dir = model_files_dir();
    Status s = make_test_model(o);
    if (!s.ok()) {
      std::fprintf(stderr, "make_test_model: %s\n", s.message().c_str());
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(tiny_model_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

// The tiny model with the Thinking models' chat template (models/qwen3-vl-2b-thinking): its files linked,
// chat_template.json replaced. Removed at exit like the tiny model.
inline const std::string& tiny_thinking_model_dir() {
  static const std::string* dir = [] {
    namespace fs = std::filesystem;
    const fs::path tiny = tiny_model_dir();
    auto* d = new std::string(tiny.string() + "-thinking");
    fs::create_directories(*d);
    for (const auto& e : fs::directory_iterator(tiny))
      if (e.path().filename() != "chat_template.json") fs::create_symlink(e.path(), fs::path(*d) / e.path().filename());
    fs::copy_file(fs::path(model_files_dir()) / ".." / "qwen3-vl-2b-thinking" / "chat_template.json",
                  fs::path(*d) / "chat_template.json", fs::copy_options::overwrite_existing);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(tiny_thinking_model_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

// The tiny model as an embedding or reranker checkpoint (make-test-model's tiny-embedding / tiny-reranker: the
// tiny weights with the model card that names the kind): the tiny model's files linked, README.md written.
inline std::string tiny_retrieval_model_dir(const std::string& kind) {
  namespace fs = std::filesystem;
  const fs::path tiny = tiny_model_dir();
  const std::string d = tiny.string() + "-" + kind;
  if (!fs::exists(fs::path(d) / "README.md")) {
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(tiny)) {
      std::error_code ec;
      fs::create_symlink(e.path(), fs::path(d) / e.path().filename(), ec);
    }
    std::string title = kind;
    title[0] = static_cast<char>(title[0] - 'a' + 'A');
    const std::string card = "# Qwen3-VL-" + title + " (tiny test model)\n";
    EXPECT_TRUE(write_file_bytes((fs::path(d) / "README.md").string(), card.data(), card.size()).ok());
    static std::vector<std::string>* made = [] {
      auto* v = new std::vector<std::string>();
      std::atexit([] {
        std::error_code ec;
        for (const auto& dir : *made) std::filesystem::remove_all(dir, ec);
      });
      return v;
    }();
    made->push_back(d);
  }
  return d;
}

inline std::string image_base64(const std::string& name) {
  auto bytes = read_file_bytes(data_dir() + "/images/" + name);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? server::base64_encode(bytes->data(), bytes->size()) : std::string();
}

inline std::string data_uri(const std::string& name, const char* mime = "image/png") {
  return std::string("data:") + mime + ";base64," + image_base64(name);
}

// The value of an unlabelled metric on a /metrics page ("\nNAME VALUE"); -1 when the page lacks it.
inline double metric(const std::string& page, const std::string& name) {
  const size_t at = page.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(page.substr(at + name.size() + 2));
}

// Options for a test server: tiny limits, one model thread, no access log.
inline server::ServerOptions test_options() {
  server::ServerOptions o;
  o.port = 0;
  o.model_id = "tiny";
  o.threads = 1;
  o.parallel = 2;
  o.queue = 4;
  o.context = 1024;
  o.timeout_s = scaled(120);
  return o;
}

struct Reply {
  int status = -1;  // -1: no answer (connection failed)
  std::string body;
  httplib::Headers headers;
  json json_body() const {
    try {
      return json::parse(body);
    } catch (const std::exception&) {
      ADD_FAILURE() << "not JSON: " << body.substr(0, 300);
      return json();
    }
  }
};

class ServerTest : public ::testing::Test {
 protected:
  void TearDown() override { server_.reset(); }

  // Starts a server; `load` replaces the tiny model's loader (to delay or fail loading).
  void start(server::ServerOptions o = test_options(), ModelLoader load = {}, bool wait_ready = true) {
    if (!load) {
      const std::string dir = tiny_model_dir();
      load = [dir] { return Model::load(dir); };
    }
    server_ = std::make_unique<server::Server>(o, load);
    Status s = server_->start();
    ASSERT_TRUE(s.ok()) << s.message();
    if (wait_ready) {
      ASSERT_TRUE(wait_for([&] { return server_->load_state() == LoadState::kReady; }, 60));
    }
  }

  // Polls `done` until it holds or `seconds` (at Release speed: scaled here) pass.
  static bool wait_for(const std::function<bool()>& done, double seconds) {
    const auto deadline = deadline_in(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  // A client of the server; its timeouts are at Release speed, scaled here.
  std::unique_ptr<httplib::Client> client(double read_timeout_s = 60) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(scaled_ms(read_timeout_s * 1000));
    c->set_write_timeout(scaled_ms(10'000));
    c->set_connection_timeout(scaled_ms(5'000));
    return c;
  }

  Reply get(const std::string& path, const httplib::Headers& headers = {}) const {
    auto r = client()->Get(path.c_str(), headers);
    return r ? Reply{r->status, r->body, r->headers} : Reply{};
  }

  Reply post(const std::string& path, const std::string& body, const httplib::Headers& headers = {},
             const char* type = "application/json") const {
    auto r = client()->Post(path.c_str(), headers, body, type);
    return r ? Reply{r->status, r->body, r->headers} : Reply{};
  }
  Reply post(const std::string& path, const json& body, const httplib::Headers& headers = {}) const {
    return post(path, body.dump(), headers);
  }

  // POSTs and hands each received piece of the body to on_data; returning false there hangs up.
  Reply post_stream(const std::string& path, const json& body, const std::function<bool(const std::string&)>& on_data,
                    const httplib::Headers& headers = {}) const {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = headers;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    Reply out;
    req.response_handler = [&](const httplib::Response& r) {
      out.status = r.status;
      out.headers = r.headers;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      out.body.append(data, n);
      return on_data(std::string(data, n));
    };
    auto c = client();
    auto r = c->send(req);
    if (!r && out.status < 0) return Reply{};
    return out;
  }
  Reply post_stream(const std::string& path, const json& body) const {
    return post_stream(path, body, [](const std::string&) { return true; });
  }

  // The JSON payloads of "data: ..." SSE events ("[DONE]" kept as the string).
  static std::vector<std::string> sse_events(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      if (end == std::string::npos) break;
      pos = end + 2;
    }
    return out;
  }

  static std::vector<json> ndjson_lines(const std::string& body) {
    std::vector<json> out;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find('\n', pos);
      if (end == std::string::npos) end = body.size();
      if (end > pos) out.push_back(json::parse(body.substr(pos, end - pos)));
      pos = end + 1;
    }
    return out;
  }

  static json chat_body(const std::string& text, int max_tokens, bool stream = false) {
    return json{{"model", "tiny"},
                {"messages", json::array({json{{"role", "user"}, {"content", text}}})},
                {"max_tokens", max_tokens},
                {"temperature", 0},
                {"stream", stream}};
  }

  std::unique_ptr<server::Server> server_;
};

}  // namespace qvl::test
