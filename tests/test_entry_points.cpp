// The paths a user takes across features, through the qvl binary itself: a lone copy of the executable in an
// empty folder (its small files built in), a GGUF pair through `serve` (file, folder, --mmproj, text only),
// the model's facts agreeing between endpoints, the machine's own names accepted on a LAN bind, llama.cpp's
// spellings of the options, and --version.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "test_process.h"
#include "test_timing.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using qvl::test::contains;
using qvl::test::Proc;
using qvl::test::Ran;
using qvl::test::run;
using qvl::test::slurp;

// A folder of its own for one test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("qvl-entry-" + name + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  close(s);
  return ntohs(a.sin_port);
}

// Waits until GET /health answers 200 (the model loaded) or `server` exits; false on exit or after 120 s
// (scaled).
bool wait_ready(Proc& server, int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  for (const auto deadline = qvl::test::deadline_in(120); std::chrono::steady_clock::now() < deadline;) {
    if (auto r = c.Get("/health"); r && r->status == 200) return true;
    if (!server.running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string image_data_uri() {
  const std::string png = slurp(qvl::test::data_dir() + "/images/png_rgb8_256x256.png");
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < png.size(); i += 3) {
    const uint32_t v = (uint8_t(png[i]) << 16) | (uint8_t(png[i + 1]) << 8) | uint8_t(png[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += b64[(v >> k) & 63];
  }
  if (i < png.size()) {
    uint32_t v = uint8_t(png[i]) << 16;
    if (i + 1 < png.size()) v |= uint8_t(png[i + 1]) << 8;
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += i + 1 < png.size() ? b64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return "data:image/png;base64," + out;
}

json chat_body(bool with_image) {
  json content = json::array({{{"type", "text"}, {"text", "Say hi."}}});
  if (with_image) content.push_back({{"type", "image_url"}, {"image_url", {{"url", image_data_uri()}}}});
  return {{"model", "m"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", content}}}}};
}

// A lone copy of the executable, in an empty folder: the tiny model written, quantized to a GGUF pair, run.
class LoneBinary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir("lone");
    const fs::path bin = root_->path / "bin";
    fs::create_directories(bin);
    fs::copy_file(QVL_BINARY, bin / "qvl");
    qvl_ = (bin / "qvl").string();
    // make-test-model with no --model-files: the files built into the binary.
    Ran made = run(qvl_, {"make-test-model", "--preset", "tiny", "--seed", "1", "--out", (root_->path / "st").string(),
                          "--threads", "1"}, root_->path, bin);
    ASSERT_EQ(made.code, 0) << made.err;
    Ran q = run(qvl_, {"quantize", "--model", (root_->path / "st").string(), "--out", (root_->path / "pair").string(),
                       "--format", "gguf", "--threads", "1"}, root_->path);
    ASSERT_EQ(q.code, 0) << q.err;
    for (const auto& e : fs::directory_iterator(root_->path / "pair")) {
      (e.path().filename().string().find("mmproj") != std::string::npos ? mmproj_ : text_) = e.path().string();
    }
    ASSERT_FALSE(text_.empty());
    ASSERT_FALSE(mmproj_.empty());
    // The text file alone in a folder of its own (as Ollama's store keeps files apart by digest).
    fs::create_directories(root_->path / "alone");
    fs::copy_file(text_, root_->path / "alone" / "model.gguf");
    alone_ = (root_->path / "alone" / "model.gguf").string();
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  static TempDir* root_;
  static std::string qvl_, text_, mmproj_, alone_;
};
TempDir* LoneBinary::root_ = nullptr;
std::string LoneBinary::qvl_, LoneBinary::text_, LoneBinary::mmproj_, LoneBinary::alone_;

TEST_F(LoneBinary, VersionNamesTheBuildTheCompilerAndTheKernels) {
  Ran v = run(qvl_, {"--version"}, root_->path);
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_EQ(v.out.rfind("qvl 0.", 0), 0u) << v.out;
  EXPECT_TRUE(contains(v.out, "\ncompiler: ")) << v.out;
  EXPECT_TRUE(contains(v.out, "\nkernels: ")) << v.out;
}

TEST_F(LoneBinary, ServesTheDemoWithNothingBesideIt) {
  const int port = free_port();
  Proc server(qvl_, {"serve", "--demo", "--port", std::to_string(port), "--threads", "1", "--quiet"}, root_->path,
              fs::path(qvl_).parent_path());
  ASSERT_TRUE(wait_ready(server, port)) << server.err();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(static_cast<time_t>(qvl::test::scaled(120)), 0);
  auto r = c.Post("/v1/chat/completions", chat_body(true).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0) << server.err();
}

// A PDF's pages through a copied binary: its confined worker is the copy itself, re-entered (posix_spawn of
// /proc/self/exe), and Poppler's programs come from PATH.
TEST_F(LoneBinary, ReadsAPdfWithNothingBesideIt) {
  Ran r = run(qvl_, {"run", "--model", (root_->path / "st").string(), "--file", qvl::test::data_dir() + "/pdf/three_a4.pdf",
                     "--pages", "2", "--max-pixels", "200704", "-p", "What does it say?", "-n", "2", "--threads", "1"},
              root_->path);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "page 2 rendered")) << r.err;
  EXPECT_TRUE(contains(r.err, "176 image tokens")) << r.err;
}

TEST_F(LoneBinary, RunsAGgufPairAndATextGgufWithAndWithoutMmproj) {
  const std::string image = qvl::test::data_dir() + "/images/png_rgb8_256x256.png";
  // The pair: the mmproj beside the file.
  Ran pair = run(qvl_, {"run", "-m", text_, "-i", image, "-p", "hi", "-n", "2", "-t", "1"}, root_->path);
  EXPECT_EQ(pair.code, 0) << pair.err;
  EXPECT_TRUE(contains(pair.err, "image tokens")) << pair.err;
  // The text file alone: text answers, images refused with what to do.
  Ran text = run(qvl_, {"run", "-m", alone_, "-p", "hi", "-n", "2", "-t", "1"}, root_->path);
  EXPECT_EQ(text.code, 0) << text.err;
  Ran refused = run(qvl_, {"run", "-m", alone_, "-i", image, "-p", "hi", "-n", "2", "-t", "1"}, root_->path);
  EXPECT_NE(refused.code, 0);
  EXPECT_TRUE(contains(refused.err, "--mmproj")) << refused.err;
  // --mmproj names the vision file kept elsewhere.
  Ran given = run(qvl_, {"run", "-m", alone_, "--mmproj", mmproj_, "-i", image, "-p", "hi", "-n", "2", "-t", "1"},
                  root_->path);
  EXPECT_EQ(given.code, 0) << given.err;
  EXPECT_TRUE(contains(given.err, "image tokens")) << given.err;
  Ran missing = run(qvl_, {"run", "-m", alone_, "--mmproj", "/nonexistent/mmproj.gguf", "-p", "hi"}, root_->path);
  EXPECT_NE(missing.code, 0);
  EXPECT_TRUE(contains(missing.err, "--mmproj /nonexistent/mmproj.gguf: no such file")) << missing.err;
  // bench and chat take the same model arguments.
  Ran bench = run(qvl_, {"bench", "-m", alone_, "--mmproj", mmproj_, "-p", "hi", "-n", "2", "--runs", "1", "-t", "1"},
                  root_->path);
  EXPECT_EQ(bench.code, 0) << bench.err;
  // tokenize and preprocess read a GGUF's tokenizer and processor settings as run does (nothing beside the file
  // here: its metadata and the family's built-in files), and agree with the checkpoint it was made from.
  for (const std::string& gguf : {text_, alone_}) {
    Ran ids = run(qvl_, {"tokenize", "-m", gguf, "--json", "Hello, world"}, root_->path);
    EXPECT_EQ(ids.code, 0) << ids.err;
    Ran want = run(qvl_, {"tokenize", "-m", qvl::test::model_files_dir(), "--json", "Hello, world"}, root_->path);
    EXPECT_EQ(ids.out, want.out) << ids.err;
  }
  Ran pre = run(qvl_, {"preprocess", "-m", text_, "-i", image}, root_->path);
  EXPECT_EQ(pre.code, 0) << pre.err;
  EXPECT_TRUE(contains(pre.out, "grid_thw")) << pre.out;
}

// `qvl serve` takes what `qvl run` takes: the .gguf file, the folder holding the pair, --mmproj, and a text
// GGUF alone (images then get a 400 that says what to load). The model's facts agree between endpoints.
TEST_F(LoneBinary, ServesGgufFilesFoldersAndTextOnly) {
  struct Case {
    std::vector<std::string> model;
    bool vision;
  };
  const std::vector<Case> cases = {{{"--model", text_}, true},
                                   {{"--model", fs::path(text_).parent_path().string()}, true},
                                   {{"--model", alone_, "--mmproj", mmproj_}, true},
                                   {{"--model", alone_}, false}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model[1] + (k.model.size() > 2 ? " " + k.model[3] : ""));
    const int port = free_port();
    std::vector<std::string> args = {"serve", "--port", std::to_string(port), "--threads", "1", "--quiet"};
    args.insert(args.end(), k.model.begin(), k.model.end());
    Proc server(qvl_, args, root_->path);
    ASSERT_TRUE(wait_ready(server, port)) << server.err();
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(static_cast<time_t>(qvl::test::scaled(120)), 0);
    auto text = c.Post("/v1/chat/completions", chat_body(false).dump(), "application/json");
    ASSERT_TRUE(text);
    EXPECT_EQ(text->status, 200) << text->body;
    auto image = c.Post("/v1/chat/completions", chat_body(true).dump(), "application/json");
    ASSERT_TRUE(image);
    if (k.vision) {
      EXPECT_EQ(image->status, 200) << image->body;
    } else {
      EXPECT_EQ(image->status, 400) << image->body;
      EXPECT_TRUE(contains(image->body, "--mmproj")) << image->body;
      EXPECT_TRUE(contains(server.err(), "serving text only")) << server.err();
    }

    // One source for the model's facts.
    auto health = json::parse(c.Get("/health")->body);
    const json& info = health["model_info"];
    auto show = json::parse(c.Post("/api/show", R"({"model": "m"})", "application/json")->body);
    auto tags = json::parse(c.Get("/api/tags")->body);
    auto models = json::parse(c.Get("/v1/models")->body);
    const std::string metrics = c.Get("/metrics")->body;
    EXPECT_EQ(info["format"], "gguf");
    EXPECT_EQ(info["vision"], k.vision);
    EXPECT_EQ(show["model_info"]["general.parameter_count"], info["parameters"]);
    EXPECT_EQ(show["details"]["parameter_size"], info["size"]);
    EXPECT_EQ(tags["models"][0]["details"]["parameter_size"], info["size"]);
    std::string level = info["text_weights"].get<std::string>();
    for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(tags["models"][0]["details"]["quantization_level"], level);
    EXPECT_EQ(tags["models"][0]["details"]["format"], "gguf");
    EXPECT_EQ(models["data"][0]["qvl"]["parameters"], info["parameters"]);
    EXPECT_TRUE(contains(metrics, "qvl_model_parameters " + std::to_string(info["parameters"].get<int64_t>()) + "\n"))
        << metrics;
    EXPECT_TRUE(contains(metrics, "text_weights=\"" + info["text_weights"].get<std::string>() + "\"")) << metrics;
    const bool lists_vision = contains(show["capabilities"].dump(), "\"vision\"");
    EXPECT_EQ(lists_vision, k.vision);
    EXPECT_EQ(models["data"][0]["input_modalities"], k.vision ? json::array({"text", "image"}) : json::array({"text"}));

    server.signal(SIGTERM);
    EXPECT_EQ(server.wait(), 0) << server.err();
  }
}

TEST_F(LoneBinary, ServeRefusesABadGgufBeforeListening) {
  const fs::path bad = root_->path / "bad.gguf";
  std::ofstream(bad) << "not a gguf";
  Ran r = run(qvl_, {"serve", "--model", bad.string(), "--port", "1"}, root_->path);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "bad.gguf")) << r.err;
  EXPECT_FALSE(contains(r.err, "listening")) << r.err;
  Ran dir_mmproj = run(qvl_, {"serve", "--model", (root_->path / "st").string(), "--mmproj", mmproj_, "--port", "1"},
                       root_->path);
  EXPECT_EQ(dir_mmproj.code, 2);
  EXPECT_TRUE(contains(dir_mmproj.err, "drop --mmproj")) << dir_mmproj.err;
}

// llama.cpp's and Ollama's spellings: -c/--ctx-size, --temperature, --n-predict, -ngl N or -1 (ignored with one
// line), several files after one -i; an unknown option names the closest one; help shows no parser text.
TEST_F(LoneBinary, AcceptsLlamaCppSpellings) {
  const std::string image448 = qvl::test::data_dir() + "/images/png_rgb8_448x448.png";
  const std::string st = (root_->path / "st").string();
  Ran r = run(qvl_, {"run", "-m", st, "-c", "1024", "--temperature", "0", "--n-predict", "2", "-ngl", "99", "-i",
                     image448, image448, "-p", "hi", "-t", "1", "--max-pixels", "50176"}, root_->path);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "ignoring -ngl: qvl runs on the CPU")) << r.err;
  EXPECT_TRUE(contains(r.err, "decode 2 tokens")) << r.err;
  EXPECT_TRUE(contains(r.err, "(98 image tokens)")) << r.err;  // two images of 49
  Ran alone = run(qvl_, {"run", "-m", st, "-p", "hi", "-n", "1", "-t", "1", "-ngl"}, root_->path);
  EXPECT_EQ(alone.code, 0) << alone.err;
  Ran all = run(qvl_, {"run", "-m", st, "-ngl", "-1", "-p", "hi", "-n", "1", "-t", "1"}, root_->path);  // llama.cpp's "all"
  EXPECT_EQ(all.code, 0) << all.err;
  Ran size = run(qvl_, {"run", "-m", st, "-p", "hi", "-n", "1", "-t", "1", "--ctx-size", "8"}, root_->path);
  EXPECT_NE(size.code, 0);
  EXPECT_TRUE(contains(size.err, "--ctx")) << size.err;
  Ran unknown = run(qvl_, {"run", "-m", st, "-p", "hi", "--ctx-len", "9"}, root_->path);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(contains(unknown.err, "did you mean '--ctx")) << unknown.err;
  for (const char* command : {"run", "serve", "quantize", "bench", "chat", "pull"}) {
    Ran help = run(qvl_, {command, "--help"}, root_->path);
    EXPECT_EQ(help.code, 0) << command;
    EXPECT_FALSE(contains(help.out, ":{")) << help.out;
    EXPECT_FALSE(contains(help.out, "FLOAT in")) << help.out;
    EXPECT_FALSE(contains(help.out, ":INT")) << help.out;
  }
  Ran serve_help = run(qvl_, {"serve", "--help"}, root_->path);
  EXPECT_TRUE(contains(serve_help.out, "--alias")) << serve_help.out;
  EXPECT_TRUE(contains(serve_help.out, "--mmproj")) << serve_help.out;
}

// Bound to every interface, the machine's own name is a Host the server answers to (and the log says which
// names are); bound to loopback, only IP addresses and localhost are.
TEST_F(LoneBinary, AcceptsTheMachinesNameOnALanBind) {
  char buf[256] = {};
  ASSERT_EQ(gethostname(buf, sizeof buf - 1), 0);
  std::string name = buf;
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (name.empty() || name == "localhost") GTEST_SKIP() << "this machine's host name is '" << name << "'";
  for (const std::string bind : {"0.0.0.0", "127.0.0.1"}) {
    SCOPED_TRACE(bind);
    const int port = free_port();
    Proc server(qvl_, {"serve", "--demo", "--host", bind, "--port", std::to_string(port), "--api-key", "K",
                       "--threads", "1", "--quiet"}, root_->path);
    ASSERT_TRUE(wait_ready(server, port)) << server.err();
    httplib::Client c("127.0.0.1", port);
    httplib::Headers h = {{"Host", name + ":" + std::to_string(port)}, {"Authorization", "Bearer K"}};
    auto r = c.Get("/v1/models", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, bind == "0.0.0.0" ? 200 : 403) << r->body;
    auto evil = c.Get("/v1/models", {{"Host", "attacker.example"}, {"Authorization", "Bearer K"}});
    ASSERT_TRUE(evil);
    EXPECT_EQ(evil->status, 403);
    EXPECT_TRUE(contains(server.err(), "accepting Host localhost")) << server.err();
    EXPECT_EQ(contains(server.err(), ", " + name), bind == "0.0.0.0") << server.err();
    EXPECT_TRUE(contains(server.err(), "--allowed-host NAME")) << server.err();
    server.signal(SIGTERM);
    EXPECT_EQ(server.wait(), 0) << server.err();
  }
}

}  // namespace
