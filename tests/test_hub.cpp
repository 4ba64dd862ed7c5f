// qvl pull against a fake Hugging Face hub and ModelScope on 127.0.0.1 (tests/hub/fake_hub.py): the cache layout,
// no second download, resume after a dropped connection and after a killed process, corruption, HTTP errors,
// offline mode, redirects, tokens, and `qvl run` on the pulled snapshot.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "model/gguf_export.h"
#include "hub/hub.h"
#include "model/model.h"
#include "hub/resolve.h"
#include "util/digest.h"
#include "model/test_model.h"
#include "test_paths.h"
#include "test_timing.h"
#include "util/file.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kRepo[] = "qvl-test/Tiny-VL-0.1";
constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";

// A new empty directory under the process's own temporary folder, which is removed at exit (a run of these
// tests writes about a gigabyte of pulled models).
std::string fresh_dir(const std::string& tag) {
  static const fs::path* root = [] {
    auto* r = new fs::path(fs::temp_directory_path() / ("qvl-test-hub-" + std::to_string(::getpid())));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::temp_directory_path() / ("qvl-test-hub-" + std::to_string(::getpid())), ec);
    });
    return r;
  }();
  static int n = 0;
  const fs::path p = *root / (tag + "-" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The tiny test model's files, made once per process: what the fake hub serves.
const std::string& tiny_model() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("model");
    TestModelOptions o;
    o.preset = "tiny";
    o.seed = 1;
    o.out_dir = d;
    o.model_files_dir = test::model_files_dir();
    Status s = make_test_model(o);
    if (!s.ok()) {
      std::fprintf(stderr, "make_test_model: %s\n", s.message().c_str());
      std::abort();
    }
    return d;
  }();
  return dir;
}

struct Proc {
  pid_t pid = -1;
  int out_fd = -1;
};

// Starts argv with `env` added to the environment; stdout to a pipe (out_fd) or a file, stderr to a file.
Proc spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& stdout_file, const std::string& stderr_file) {
  int fds[2] = {-1, -1};
  if (stdout_file.empty() && ::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) {
      if (v.empty()) {
        ::unsetenv(k.c_str());
      } else {
        ::setenv(k.c_str(), v.c_str(), 1);
      }
    }
    if (stdout_file.empty()) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
    } else {
      const int f = ::open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(f, 1);
    }
    const int e = ::open(stderr_file.empty() ? "/dev/null" : stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(e, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (stdout_file.empty()) ::close(fds[1]);
  return {pid, stdout_file.empty() ? fds[0] : -1};
}

// Waits for a child for at most `seconds` (at Release speed: scaled here); kills it past that. Returns the exit
// status (-1: killed, timed out).
int wait_for(pid_t pid, double seconds) {
  const auto deadline = test::deadline_in(seconds);
  for (;;) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// tests/hub/fake_hub.py serving the tiny model, on an ephemeral port, stopped when this goes.
class FakeHub {
 public:
  explicit FakeHub(std::vector<std::string> faults = {}, std::string root = "") {
    log_ = fresh_dir("log") + "/requests.jsonl";
    std::vector<std::string> argv = {"python3", test::data_dir() + "/../hub/fake_hub.py", "--root",
                                     root.empty() ? tiny_model() : root,
                                     "--repo", kRepo, "--commit", kCommit, "--log", log_};
    argv.insert(argv.end(), faults.begin(), faults.end());
    proc_ = spawn(argv, {}, "", "");
    std::string line;
    char c;
    while (::read(proc_.out_fd, &c, 1) == 1 && c != '\n') line += c;
    if (line.rfind("PORT ", 0) == 0) port_ = std::stoi(line.substr(5));
  }
  ~FakeHub() {
    if (proc_.pid > 0) {
      ::kill(proc_.pid, SIGTERM);
      wait_for(proc_.pid, 5);
    }
    if (proc_.out_fd >= 0) ::close(proc_.out_fd);
  }
  bool ok() const { return port_ > 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> out;
    std::ifstream f(log_);
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  // GETs that fetched file bytes (resolve, CDN or ModelScope file API), not listings or HEADs.
  std::vector<nlohmann::json> file_gets() const {
    std::vector<nlohmann::json> out;
    for (const auto& r : requests()) {
      const std::string path = r["path"];
      if (r["method"] == "GET" && (path.find("/resolve/") != std::string::npos || path.rfind("/_cdn/", 0) == 0 ||
                                   path.find("/repo?") != std::string::npos)) {
        out.push_back(r);
      }
    }
    return out;
  }

 private:
  Proc proc_;
  int port_ = 0;
  std::string log_;
};

hub::PullOptions options(const FakeHub& hub, const std::string& cache, hub::Source source = hub::Source::kHuggingFace) {
  hub::PullOptions o;
  o.repo_id = kRepo;
  o.source = source;
  o.endpoint = hub.url();
  o.cache_dir = cache;
  // No token from this machine's environment or huggingface-cli's token file.
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HUGGING_FACE_HUB_TOKEN");
  ::unsetenv("MODELSCOPE_API_TOKEN");
  ::setenv("HF_TOKEN_PATH", "/nonexistent/qvl-test-token", 1);
  o.offline = 0;
  return o;
}

std::string hf_root(const std::string& cache) { return cache + "/models--qvl-test--Tiny-VL-0.1"; }

std::string file_sha256(const std::string& path) {
  auto h = sha256_file(path);
  return h.ok() ? *h : "error: " + h.status().message();
}

// Every file of the served model is in `dir` with the same bytes.
void expect_same_files(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(tiny_model())) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(file_sha256(dir + "/" + name), file_sha256(e.path().string())) << name;
  }
}

struct CliResult {
  int rc;
  std::string out, err;
  double seconds;
};

CliResult run_qvl(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  double timeout_s = 30) {
  const std::string d = fresh_dir("cli");
  std::vector<std::string> argv = {QVL_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto t0 = Clock::now();
  Proc p = spawn(argv, env, d + "/out", d + "/err");
  CliResult r;
  r.rc = wait_for(p.pid, timeout_s);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.out = read_file_text(d + "/out").ok() ? *read_file_text(d + "/out") : "";
  r.err = read_file_text(d + "/err").ok() ? *read_file_text(d + "/err") : "";
  while (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
  return r;
}

// The environment of a `qvl pull` against `hub` with the given cache: nothing from this machine's own setup.
std::map<std::string, std::string> pull_env(const FakeHub& hub, const std::string& cache) {
  return {{"HF_ENDPOINT", hub.url()}, {"HF_HUB_CACHE", cache}, {"HF_TOKEN", ""}, {"HF_HOME", cache + "/home"},
          {"HF_HUB_OFFLINE", ""},     {"MODELSCOPE_ENDPOINT", hub.url()}, {"MODELSCOPE_CACHE", cache}};
}

TEST(HubSpec, ParsesSourcesAndRejectsBadIds) {
  auto a = hub::parse_model_spec("Qwen/Qwen3-VL-2B-Instruct");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, hub::Source::kHuggingFace);
  EXPECT_EQ(a->second, "Qwen/Qwen3-VL-2B-Instruct");
  auto b = hub::parse_model_spec("modelscope:Qwen/Qwen3-VL-2B-Instruct");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, hub::Source::kModelScope);
  EXPECT_EQ(b->second, "Qwen/Qwen3-VL-2B-Instruct");
  auto c = hub::parse_model_spec("hf:Qwen/Qwen3-VL-2B-Instruct");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first, hub::Source::kHuggingFace);
  EXPECT_FALSE(hub::parse_model_spec("ftp:Qwen/X").ok());
  EXPECT_FALSE(hub::parse_model_spec("Qwen").ok());
  EXPECT_FALSE(hub::parse_model_spec("../../etc/passwd").ok());
  EXPECT_FALSE(hub::parse_model_spec("Qwen/a/b").ok());
}

TEST(HubHf, PullsIntoTheHubCacheLayout) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  hub::PullOptions o = options(fake, cache);
  hub::Progress last;
  int calls = 0;
  o.on_progress = [&](const hub::Progress& p) { last = p, ++calls; };
  auto dir = hub::pull(o);
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  const std::string root = hf_root(cache);
  EXPECT_EQ(*dir, root + "/snapshots/" + kCommit);
  expect_same_files(*dir);
  EXPECT_EQ(*read_file_text(root + "/refs/main"), kCommit);
  // snapshots/<commit>/<file> -> ../../blobs/<etag>: the sha256 for LFS files, git's blob sha1 for small ones.
  const std::string weights_sha = file_sha256(tiny_model() + "/model.safetensors");
  EXPECT_EQ(fs::read_symlink(*dir + "/model.safetensors").string(), "../../blobs/" + weights_sha);
  EXPECT_EQ(file_sha256(root + "/blobs/" + weights_sha), weights_sha);
  auto config_sha1 = git_blob_sha1_file(tiny_model() + "/config.json");
  ASSERT_TRUE(config_sha1.ok());
  EXPECT_EQ(fs::read_symlink(*dir + "/config.json").string(), "../../blobs/" + *config_sha1);
  for (const auto& e : fs::directory_iterator(root + "/blobs")) {
    EXPECT_EQ(e.path().extension(), "") << "left behind: " << e.path();
  }
  EXPECT_TRUE(last.finished);
  EXPECT_GT(calls, 1);
  EXPECT_EQ(last.all_done, last.all_total);
  EXPECT_GT(last.all_total, 40 << 20);
  // The LFS files came through the hub's 302 to the second path.
  int cdn = 0;
  for (const auto& r : fake.file_gets()) cdn += std::string(r["path"]).rfind("/_cdn/", 0) == 0;
  EXPECT_EQ(cdn, 2);  // model.safetensors and tokenizer.json (over 1 MiB: LFS)
  // find_cached agrees without the network.
  auto cached = hub::find_cached(o);
  ASSERT_TRUE(cached.ok()) << cached.status().message();
  EXPECT_EQ(*cached, *dir);
}

// A GGUF repository, laid out as the hub's Qwen3-VL GGUF repositories are (text models at two quantizations,
// mmproj files at two, no tokenizer.json): ORG/NAME:TAG downloads the tagged text model and one mmproj
// (the tagged one, else F16), and qvl answers from the snapshot with the tokenizer it ships.
TEST(HubHf, PullsAGgufRepositoryByItsTag) {
  const std::string repo = fresh_dir("gguf-repo"), tmp = fresh_dir("gguf-tmp");
  {
    auto m = Model::load(tiny_model());
    ASSERT_TRUE(m.ok()) << m.status().message();
    for (WeightType t : {WeightType::kQ8_0, WeightType::kF32}) {
      const std::string out = tmp + "/" + weight_type_name(t);
      ASSERT_TRUE(write_gguf_model(**m, WeightTypes{t, t}, out, "tiny").ok());
      const std::string tag = t == WeightType::kQ8_0 ? "Q8_0" : "F32";
      fs::copy_file(out + "/tiny-" + weight_type_name(t) + ".gguf", repo + "/Tiny-VL-" + tag + ".gguf");
      fs::copy_file(out + "/mmproj-tiny-" + weight_type_name(t) + ".gguf",
                    repo + "/mmproj-Tiny-VL-" + (t == WeightType::kQ8_0 ? "Q8_0" : "F16") + ".gguf");
    }
    std::ofstream(repo + "/README.md") << "GGUF files\n";
  }
  FakeHub fake({}, repo);
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  hub::PullOptions o = options(fake, cache);
  o.gguf_tag = "Q8_0";
  auto dir = hub::pull(o);
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  EXPECT_TRUE(fs::exists(*dir + "/Tiny-VL-Q8_0.gguf"));
  EXPECT_TRUE(fs::exists(*dir + "/mmproj-Tiny-VL-Q8_0.gguf"));
  EXPECT_FALSE(fs::exists(*dir + "/Tiny-VL-F32.gguf"));
  EXPECT_FALSE(fs::exists(*dir + "/mmproj-Tiny-VL-F16.gguf"));
  ASSERT_TRUE(hub::find_cached(o).ok());
  // The F32 tag adds its file and the F16 mmproj (no F32 one) to the same snapshot; each loads its own.
  o.gguf_tag = "f32";
  auto dir2 = hub::pull(o);
  ASSERT_TRUE(dir2.ok()) << dir2.status().message();
  EXPECT_TRUE(fs::exists(*dir2 + "/mmproj-Tiny-VL-F16.gguf"));
  for (const char* file : {"/Tiny-VL-Q8_0.gguf", "/Tiny-VL-F32.gguf"}) {
    auto m = Model::load(*dir2 + file);
    ASSERT_TRUE(m.ok()) << file << ": " << m.status().message();
    ThreadPool pool(1);
    GenerateOptions g;
    g.sampling.temperature = 0;
    g.max_tokens = 2;
    auto r = generate(**m, pool, {user_message(0, "Hi")}, {}, g);
    EXPECT_TRUE(r.ok()) << r.status().message();
  }
  // A tag the repository does not have: the error lists the ones it has.
  o.gguf_tag = "Q5_K_M";
  auto missing = hub::pull(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no GGUF text model carries the tag 'Q5_K_M'; it has Tiny-VL-F32.gguf, "
                                            "Tiny-VL-Q8_0.gguf"), std::string::npos) << missing.status().message();
  // Without a tag, a GGUF repository is refused with the hint.
  o.gguf_tag.clear();
  auto untagged = hub::pull(o);
  ASSERT_FALSE(untagged.ok());
  EXPECT_NE(untagged.status().message().find("ORG/NAME:Q4_K_M"), std::string::npos) << untagged.status().message();
  // The spec form.
  EXPECT_EQ(hub::split_gguf_tag("Qwen/Qwen3-VL-2B-Instruct-GGUF:Q4_K_M"),
            std::make_pair(std::string("Qwen/Qwen3-VL-2B-Instruct-GGUF"), std::string("Q4_K_M")));
  EXPECT_EQ(hub::split_gguf_tag("modelscope:Qwen/X"), std::make_pair(std::string("modelscope:Qwen/X"), std::string()));
  EXPECT_EQ(hub::split_gguf_tag("hf:Qwen/X:Q8_0"), std::make_pair(std::string("hf:Qwen/X"), std::string("Q8_0")));
}

TEST(HubHf, SecondPullDownloadsNothing) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  ASSERT_TRUE(hub::pull(options(fake, cache)).ok());
  const size_t first = fake.file_gets().size();
  EXPECT_GE(first, 7u);
  auto again = hub::pull(options(fake, cache));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(fake.file_gets().size(), first);
}

TEST(HubHf, ResumesAfterTheServerDropsTheConnection) {
  FakeHub fake({"--drop-once", "model.safetensors:5000000"});
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  auto dir = hub::pull(options(fake, cache));
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  expect_same_files(*dir);
  std::vector<std::string> ranges;
  for (const auto& r : fake.file_gets()) {
    if (!std::string(r["range"]).empty()) ranges.push_back(r["range"]);
  }
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], "bytes=5000000-");
}

TEST(HubHf, ResumesAfterTheProcessIsKilled) {
  const std::string cache = fresh_dir("cache");
  const std::string weights_sha = file_sha256(tiny_model() + "/model.safetensors");
  const std::string partial = hf_root(cache) + "/blobs/" + weights_sha + ".incomplete";
  int64_t killed_at = 0;
  {
    FakeHub slow({"--rate", "8000000"});  // 8 MB/s per connection: the 42 MB weights take ~5 s
    ASSERT_TRUE(slow.ok());
    const std::string d = fresh_dir("cli");
    std::vector<std::string> argv = {QVL_BINARY, "pull", kRepo};
    Proc p = spawn(argv, pull_env(slow, cache), d + "/out", d + "/err");
    const auto deadline = test::deadline_in(10);
    std::error_code ec;
    while (Clock::now() < deadline) {
      const auto n = fs::file_size(partial, ec);
      if (!ec && n > (4u << 20)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(p.pid, SIGKILL);
    wait_for(p.pid, 5);
    killed_at = static_cast<int64_t>(fs::file_size(partial, ec));
    ASSERT_FALSE(ec) << "no partial file at " << partial;
    ASSERT_GT(killed_at, 4 << 20);
    ASSERT_LT(killed_at, 42107272);
    EXPECT_FALSE(fs::exists(hf_root(cache) + "/refs/main"));
  }
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  CliResult r = run_qvl({"pull", kRepo}, pull_env(fake, cache));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, hf_root(cache) + "/snapshots/" + kCommit);
  expect_same_files(r.out);
  bool resumed = false;
  for (const auto& g : fake.file_gets()) {
    const std::string range = g["range"];
    if (range.rfind("bytes=", 0) == 0 && std::stoll(range.substr(6)) >= killed_at) resumed = true;
  }
  EXPECT_TRUE(resumed) << "expected a Range request from at least byte " << killed_at;
}

TEST(HubHf, CorruptByteIsDetectedAndTheFileDeleted) {
  FakeHub fake({"--corrupt", "model.safetensors"});
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  auto dir = hub::pull(options(fake, cache));
  ASSERT_FALSE(dir.ok());
  const std::string msg = dir.status().message();
  EXPECT_NE(msg.find("model.safetensors: sha256 mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deleted"), std::string::npos) << msg;
  const std::string weights_sha = file_sha256(tiny_model() + "/model.safetensors");
  EXPECT_FALSE(fs::exists(hf_root(cache) + "/blobs/" + weights_sha));
  EXPECT_FALSE(fs::exists(hf_root(cache) + "/blobs/" + weights_sha + ".incomplete"));
  EXPECT_FALSE(fs::exists(hf_root(cache) + "/refs/main"));
  EXPECT_FALSE(hub::find_cached(options(fake, cache)).ok());
}

TEST(HubHf, UnauthorizedSaysToSetHfToken) {
  FakeHub fake({"--status", "401"});
  ASSERT_TRUE(fake.ok());
  auto dir = hub::pull(options(fake, fresh_dir("cache")));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("401"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("HF_TOKEN"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("gated"), std::string::npos) << dir.status().message();
}

TEST(HubHf, TokenIsSentAsBearer) {
  FakeHub fake({"--require-token", "hf_secret"});
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  auto env = pull_env(fake, cache);
  CliResult denied = run_qvl({"pull", kRepo}, env);
  EXPECT_NE(denied.rc, 0);
  EXPECT_NE(denied.err.find("HF_TOKEN"), std::string::npos) << denied.err;
  env["HF_TOKEN"] = "hf_secret";
  CliResult r = run_qvl({"pull", kRepo}, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  int bearer = 0, cdn_bearer = 0;
  for (const auto& q : fake.requests()) {
    if (q["authorization"] == "Bearer hf_secret") ++bearer;
  }
  for (const auto& g : fake.file_gets()) cdn_bearer += g["authorization"] == "Bearer hf_secret";
  EXPECT_GE(bearer, 15);  // the listing, 7 HEADs, 7 GETs
  EXPECT_EQ(cdn_bearer, 7);
}

TEST(HubHf, NotFoundNamesTheModel) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  hub::PullOptions o = options(fake, fresh_dir("cache"));
  o.repo_id = "nobody/no-such-model";
  auto dir = hub::pull(o);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("404"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("nobody/no-such-model"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("no such model"), std::string::npos) << dir.status().message();
  // A missing file (the listing names it, its resolve answers 404).
  FakeHub gone({"--status", "404", "--status-path", "/resolve/"});
  ASSERT_TRUE(gone.ok());
  auto f = hub::pull(options(gone, fresh_dir("cache")));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("404"), std::string::npos) << f.status().message();
}

TEST(HubHf, RevisionPinsACommitAndUnknownRevisionsAre404) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  hub::PullOptions o = options(fake, cache);
  o.revision = kCommit;
  auto dir = hub::pull(o);
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  EXPECT_EQ(*dir, hf_root(cache) + "/snapshots/" + kCommit);
  EXPECT_FALSE(fs::exists(hf_root(cache) + "/refs/main"));  // a commit needs no ref
  o.revision = "v9";
  auto bad = hub::pull(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no such revision"), std::string::npos) << bad.status().message();
}

TEST(HubHf, ServerErrorIsReportedAfterRetries) {
  FakeHub fake({"--status", "500"});
  ASSERT_TRUE(fake.ok());
  const auto t0 = Clock::now();
  auto dir = hub::pull(options(fake, fresh_dir("cache")));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("500"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("try again later"), std::string::npos) << dir.status().message();
  EXPECT_EQ(fake.requests().size(), 3u);  // one try and two retries
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), test::scaled(5.0));
}

TEST(HubHf, UnreachableHubExplainsOfflineMode) {
  FakeHub fake;  // only for a port that is then closed
  ASSERT_TRUE(fake.ok());
  hub::PullOptions o = options(fake, fresh_dir("cache"));
  o.endpoint = "http://127.0.0.1:1";
  auto dir = hub::pull(o);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("cannot reach"), std::string::npos) << dir.status().message();
  EXPECT_NE(dir.status().message().find("HF_HUB_OFFLINE=1"), std::string::npos) << dir.status().message();
}

TEST(HubHf, OfflineUsesOnlyTheCache) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  auto env = pull_env(fake, cache);
  env["HF_HUB_OFFLINE"] = "1";
  CliResult miss = run_qvl({"pull", kRepo}, env);
  EXPECT_NE(miss.rc, 0);
  EXPECT_NE(miss.err.find("HF_HUB_OFFLINE"), std::string::npos) << miss.err;
  EXPECT_TRUE(fake.requests().empty());
  ASSERT_TRUE(hub::pull(options(fake, cache)).ok());
  const size_t online = fake.requests().size();
  CliResult hit = run_qvl({"pull", kRepo}, env);
  ASSERT_EQ(hit.rc, 0) << hit.err;
  EXPECT_EQ(hit.out, hf_root(cache) + "/snapshots/" + kCommit);
  EXPECT_EQ(fake.requests().size(), online);
}

TEST(HubHf, NotEnoughDiskSpaceIsReportedBeforeDownloading) {
  FakeHub fake({"--fake-size", "model.safetensors:1000000000000000"});
  ASSERT_TRUE(fake.ok());
  auto dir = hub::pull(options(fake, fresh_dir("cache")));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not enough disk space"), std::string::npos) << dir.status().message();
  EXPECT_TRUE(fake.file_gets().empty());
}

TEST(HubModelScope, PullsResumesAndDetectsCorruption) {
  const std::string cache = fresh_dir("ms-cache");
  // '.' in the name becomes "___", as the ModelScope SDK stores it.
  const std::string model_dir = cache + "/models/qvl-test/Tiny-VL-0___1";
  {
    FakeHub fake({"--drop-once", "model.safetensors:3000000"});
    ASSERT_TRUE(fake.ok());
    hub::PullOptions o = options(fake, cache, hub::Source::kModelScope);
    auto dir = hub::pull(o);
    ASSERT_TRUE(dir.ok()) << dir.status().message();
    EXPECT_EQ(*dir, model_dir);
    expect_same_files(*dir);
    bool resumed = false;
    for (const auto& g : fake.file_gets()) {
      resumed |= g["range"] == "bytes=3000000-";
      EXPECT_NE(std::string(g["path"]).find("Revision=master"), std::string::npos) << g.dump();
    }
    EXPECT_TRUE(resumed);
    const size_t gets = fake.file_gets().size();
    ASSERT_TRUE(hub::pull(o).ok());
    EXPECT_EQ(fake.file_gets().size(), gets);  // the second pull downloads nothing
    auto cached = hub::find_cached(o);
    ASSERT_TRUE(cached.ok()) << cached.status().message();
    EXPECT_EQ(*cached, model_dir);
  }
  {
    // A revision other than master is not taken from the cache as it is (its layout records none): pull checks
    // the files against that revision's listing, and an unknown revision is refused.
    FakeHub fake;
    ASSERT_TRUE(fake.ok());
    hub::PullOptions o = options(fake, cache, hub::Source::kModelScope);
    o.revision = kCommit;
    auto cached = hub::find_cached(o);
    ASSERT_FALSE(cached.ok());
    EXPECT_NE(cached.status().message().find("keeps no record of its files' revision"), std::string::npos)
        << cached.status().message();
    auto dir = hub::pull(o);
    ASSERT_TRUE(dir.ok()) << dir.status().message();
    EXPECT_EQ(*dir, model_dir);
    EXPECT_TRUE(fake.file_gets().empty());  // the files are that revision's: nothing downloaded
    o.revision = "v9";
    auto unknown = hub::pull(o);
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.status().message().find("revision"), std::string::npos) << unknown.status().message();
    o.revision = "a b";
    EXPECT_NE(hub::pull(o).status().message().find("is not a branch, tag or commit hash"), std::string::npos);
  }
  {
    FakeHub bad({"--corrupt", "model.safetensors"});
    ASSERT_TRUE(bad.ok());
    const std::string cache2 = fresh_dir("ms-cache");
    auto dir = hub::pull(options(bad, cache2, hub::Source::kModelScope));
    ASSERT_FALSE(dir.ok());
    EXPECT_NE(dir.status().message().find("sha256 mismatch"), std::string::npos) << dir.status().message();
    EXPECT_FALSE(fs::exists(cache2 + "/models/qvl-test/Tiny-VL-0___1/model.safetensors"));
    EXPECT_FALSE(fs::exists(cache2 + "/._____temp/qvl-test/Tiny-VL-0.1/model.safetensors.incomplete"));
  }
  {
    FakeHub denied({"--status", "401"});
    ASSERT_TRUE(denied.ok());
    auto dir = hub::pull(options(denied, fresh_dir("ms-cache"), hub::Source::kModelScope));
    ASSERT_FALSE(dir.ok());
    EXPECT_NE(dir.status().message().find("MODELSCOPE_API_TOKEN"), std::string::npos) << dir.status().message();
  }
}

TEST(HubModelScope, CliPullWithPrefix) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("ms-cache");
  CliResult r = run_qvl({"pull", std::string("modelscope:") + kRepo}, pull_env(fake, cache));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, cache + "/models/qvl-test/Tiny-VL-0___1");
}

TEST(HubHf, RunAnswersFromThePulledSnapshot) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  CliResult pull = run_qvl({"pull", kRepo}, pull_env(fake, cache));
  ASSERT_EQ(pull.rc, 0) << pull.err;
  std::printf("[ timing ] qvl pull of the tiny model (%.1f MiB) through the fake hub: %.2f s\n",
              static_cast<double>(fs::file_size(tiny_model() + "/model.safetensors") +
                                  fs::file_size(tiny_model() + "/tokenizer.json")) / (1 << 20),
              pull.seconds);
  // Not a terminal: plain progress lines.
  EXPECT_NE(pull.err.find("pull: 100%"), std::string::npos) << pull.err;
  CliResult run = run_qvl({"run", "--model", pull.out, "-p", "hi", "-n", "4"}, {}, 60);
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
}


TEST(HubHf, RunDownloadsOnFirstUse) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  CliResult run = run_qvl({"run", "--model", kRepo, "-p", "hi", "-n", "4"}, pull_env(fake, cache), 60);
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  EXPECT_NE(run.err.find("downloading"), std::string::npos) << run.err;
  EXPECT_TRUE(fs::exists(hf_root(cache) + "/refs/main"));
  // The second time the cache serves, without the network: the hub is gone.
  auto env = pull_env(fake, cache);
  env["HF_ENDPOINT"] = "http://127.0.0.1:1";
  CliResult again = run_qvl({"run", "--model", kRepo, "-p", "hi", "-n", "2"}, env, 60);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.err.find("downloading"), std::string::npos) << again.err;
}

// GET http://127.0.0.1:port/path: the status and body ("" and 0 when nothing answers).
// A port on 127.0.0.1 that nothing listens on now (the kernel's pick for a socket bound to port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::pair<int, std::string> http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval tv = test::scaled_timeval(2);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return {0, ""};
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (resp.size() < 12) return {0, ""};
  const size_t body = resp.find("\r\n\r\n");
  return {std::atoi(resp.c_str() + 9), body == std::string::npos ? "" : resp.substr(body + 4)};
}

// --revision reaches every command that takes a hub id: run downloads that commit (no refs/main); tokenize and
// serve then find it in the cache with the hub gone, where the default branch is not there; an unknown
// revision fails naming it; a local path refuses a revision rather than ignore it.
TEST(HubHf, RunTokenizeAndServeTakeARevision) {
  FakeHub fake;
  ASSERT_TRUE(fake.ok());
  const std::string cache = fresh_dir("cache");
  CliResult run = run_qvl({"run", "--model", kRepo, "--revision", kCommit, "-p", "hi", "-n", "2"}, pull_env(fake, cache), 60);
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_TRUE(fs::exists(hf_root(cache) + "/snapshots/" + kCommit));
  EXPECT_FALSE(fs::exists(hf_root(cache) + "/refs/main"));
  CliResult bad = run_qvl({"run", "--model", kRepo, "--revision", "v9", "-p", "hi", "-n", "1"}, pull_env(fake, cache), 60);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("no such revision"), std::string::npos) << bad.err;

  auto offline = pull_env(fake, cache);
  offline["HF_ENDPOINT"] = "http://127.0.0.1:1";
  CliResult tok = run_qvl({"tokenize", "--model", kRepo, "--revision", kCommit, "hi"}, offline);
  EXPECT_EQ(tok.rc, 0) << tok.err;
  CliResult tok_main = run_qvl({"tokenize", "--model", kRepo, "hi"}, offline);
  EXPECT_NE(tok_main.rc, 0);  // the default branch was never downloaded

  const int port = free_port();
  const std::string d = fresh_dir("serve-revision");
  Proc p = spawn({QVL_BINARY, "serve", "--model", kRepo, "--revision", kCommit, "--port", std::to_string(port), "--threads", "1"},
                 offline, d + "/out", d + "/err");
  bool ready = false;
  for (const auto deadline = test::deadline_in(60); !ready && Clock::now() < deadline;) {
    ready = http_get(port, "/health").first == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(p.pid, SIGTERM);
  wait_for(p.pid, 20);
  EXPECT_TRUE(ready) << (read_file_text(d + "/err").ok() ? *read_file_text(d + "/err") : "");

  CliResult local = run_qvl({"run", "--model", tiny_model(), "--revision", "main", "-p", "hi"}, offline);
  EXPECT_NE(local.rc, 0);
  EXPECT_NE(local.err.find("--revision main is for a hub id, but --model"), std::string::npos) << local.err;
}

TEST(HubHf, ServeDownloadsInTheBackgroundAndHealthSaysHowFar) {
  FakeHub slow({"--rate", "8000000"});  // the 42 MB weights take ~5 s
  ASSERT_TRUE(slow.ok());
  const std::string cache = fresh_dir("cache");
  const int port = free_port();
  const std::string d = fresh_dir("serve");
  Proc p = spawn({QVL_BINARY, "serve", "--model", kRepo, "--port", std::to_string(port), "--threads", "1"},
                 pull_env(slow, cache), d + "/out", d + "/err");
  bool saw_downloading = false, ready = false;
  double last_progress = -1;
  const auto deadline = test::deadline_in(60);
  while (Clock::now() < deadline) {
    auto [status, body] = http_get(port, "/health");
    if (status == 503 && body.find("\"downloading\"") != std::string::npos) {
      saw_downloading = true;
      const double progress = nlohmann::json::parse(body).value("progress", -1.0);
      EXPECT_GE(progress, 0);
      EXPECT_LE(progress, 100);
      EXPECT_GE(progress, last_progress);
      last_progress = progress;
    }
    if (status == 200) {
      ready = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(p.pid, SIGTERM);
  wait_for(p.pid, 20);
  const std::string log = read_file_text(d + "/err").ok() ? *read_file_text(d + "/err") : "";
  EXPECT_TRUE(saw_downloading) << log;
  EXPECT_TRUE(ready) << log;
  EXPECT_GT(last_progress, 0) << log;
  // The log shows the download's progress as plain lines.
  EXPECT_NE(log.find("download: 100%"), std::string::npos) << log;
}

}  // namespace
}  // namespace qvl
