// `qvl chat` driven through pipes as a user would drive it (turns, /image, /clear, Ctrl-C in the middle of an
// answer, which must stop that answer and keep the program), and `qvl tokenize` on standard input and on a
// conversation file.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/video.h"
#include <nlohmann/json.hpp>

#include "test_server_fixture.h"

namespace qvl {
namespace {

// A child process with its stdin, stdout and stderr on pipes.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string stdout_text, stderr_text;

  explicit Child(const std::vector<std::string>& args) {
    int pin[2], pout[2], perr[2];
    EXPECT_EQ(pipe(pin), 0);
    EXPECT_EQ(pipe(pout), 0);
    EXPECT_EQ(pipe(perr), 0);
    pid = fork();
    if (pid == 0) {
      dup2(pin[0], 0);
      dup2(pout[1], 1);
      dup2(perr[1], 2);
      for (int fd : {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1]}) close(fd);
      std::vector<char*> argv;
      std::vector<std::string> a = args;
      a.insert(a.begin(), QVL_BINARY);
      for (std::string& s : a) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    in = pin[1];
    out = pout[0];
    err = perr[0];
    fcntl(out, F_SETFL, O_NONBLOCK);
    fcntl(err, F_SETFL, O_NONBLOCK);
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (int fd : {in, out, err})
      if (fd >= 0) close(fd);
  }
  void write_line(const std::string& s) {
    const std::string l = s + "\n";
    ASSERT_EQ(::write(in, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  void drain() {
    char buf[4096];
    for (int fd : {out, err}) {
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) (fd == out ? stdout_text : stderr_text).append(buf, static_cast<size_t>(n));
    }
  }
  // Reads until `pred` holds or `seconds` (at Release speed: scaled here) pass.
  bool wait_for(const std::function<bool()>& pred, double seconds) {
    const auto end = test::deadline_in(seconds);
    while (std::chrono::steady_clock::now() < end) {
      drain();
      if (pred()) return true;
      pollfd p[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
      poll(p, 2, 20);
    }
    drain();
    return pred();
  }
  // Closes stdin and waits `seconds` (scaled) for the exit status (-1: still running).
  int finish(double seconds) {
    close(in);
    in = -1;
    int status = 0;
    const auto end = test::deadline_in(seconds);
    while (std::chrono::steady_clock::now() < end) {
      drain();
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        drain();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(10000);
    }
    return -1;
  }
};

TEST(CliChat, TurnsImagesClearAndCtrlCStopsOnlyTheAnswer) {
  const std::string dir = test::tiny_model_dir();
  // Answers long enough to interrupt: the random-weight model rarely ends by itself.
  Child c({"chat", "--model", dir, "-n", "100000", "--ctx", "8192", "--temp", "0", "--threads", "1"});
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("/help") != std::string::npos; }, 60)) << c.stderr_text;
  c.write_line("/image " + test::data_dir() + "/images/png_rgba8_33x17.png");
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("attached") != std::string::npos; }, 10)) << c.stderr_text;
  c.write_line("Tell me a very long story about this picture.");
  ASSERT_TRUE(c.wait_for([&] { return c.stdout_text.size() > 40; }, 30)) << c.stderr_text;
  kill(c.pid, SIGINT);
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("(stopped)") != std::string::npos; }, 20)) << c.stderr_text;
  const size_t after_stop = c.stdout_text.size();
  // Still running: a follow-up turn about the same picture is answered (and interrupted again).
  c.write_line("And the colours?");
  ASSERT_TRUE(c.wait_for([&] { return c.stdout_text.size() > after_stop + 40; }, 30)) << c.stderr_text;
  kill(c.pid, SIGINT);
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("(stopped)", c.stderr_text.find("(stopped)") + 1) != std::string::npos; }, 20));
  c.write_line("/image /nonexistent.png");
  c.write_line("/clear");
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("(conversation cleared)") != std::string::npos; }, 10)) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("/nonexistent.png"), std::string::npos) << c.stderr_text;
  c.write_line("/images");  // not /image with a path "s"
  c.write_line("/bye");
  // From a pipe, a chat in which something failed exits 1 and says how much (a script sees it).
  EXPECT_EQ(c.finish(20), 1) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("unknown command /images"), std::string::npos) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("2 turns or commands of the input failed"), std::string::npos) << c.stderr_text;
}

// Piped input that all works exits 0; input that ends inside a """ block says its text was not sent, and exits 1.
TEST(CliChat, PipedInputSaysWhatWasNotSent) {
  const std::string dir = test::tiny_model_dir();
  {
    Child c({"chat", "--model", dir, "-n", "2", "--temp", "0", "--threads", "1"});
    c.write_line("Hi");
    c.write_line("\"\"\"Two");
    c.write_line("lines\"\"\"");
    EXPECT_EQ(c.finish(60), 0) << c.stderr_text;
    EXPECT_EQ(std::count(c.stdout_text.begin(), c.stdout_text.end(), '\n'), 2) << c.stdout_text;  // two answers
  }
  {
    // --logit-bias reaches chat's sampler: +100 on token 9707 ("Hello") is each answer's every token.
    Child c({"chat", "--model", dir, "-n", "2", "--temp", "0", "--threads", "1", "--logit-bias", "9707=100"});
    c.write_line("Hi");
    c.write_line("Again");
    EXPECT_EQ(c.finish(60), 0) << c.stderr_text;
    EXPECT_EQ(c.stdout_text, "HelloHello\nHelloHello\n");
  }
  Child c({"chat", "--model", dir, "-n", "2", "--temp", "0", "--threads", "1"});
  c.write_line("Hi");
  c.write_line("\"\"\"never");
  c.write_line("closed");
  EXPECT_EQ(c.finish(60), 1) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("ended inside a \"\"\" block"), std::string::npos) << c.stderr_text;
}

// /video attaches a clip (its frames sampled and sized as the model's video processor does) to the next turn;
// a file that is not a video is refused and the conversation goes on.
TEST(CliChat, VideoAttachesAClip) {
  if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
  const std::string dir = test::tiny_model_dir();
  Child c({"chat", "--model", dir, "-n", "4", "--temp", "0", "--threads", "1"});
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("/help") != std::string::npos; }, 60)) << c.stderr_text;
  c.write_line("/video " + test::data_dir() + "/videos/h264_30fps_64x48.mp4");
  ASSERT_TRUE(c.wait_for([&] { return c.stderr_text.find("4 frames, 2 groups of 4 tokens") != std::string::npos; }, 10))
      << c.stderr_text;
  c.write_line("What happens in this clip?");
  // The answer ends with a newline on stdout.
  ASSERT_TRUE(c.wait_for([&] { return c.stdout_text.find('\n') != std::string::npos; }, 30)) << c.stderr_text;
  c.write_line("/video " + test::data_dir() + "/images/png_rgba8_33x17.png");
  c.write_line("/bye");
  EXPECT_EQ(c.finish(20), 1) << c.stderr_text;  // the refused clip: a piped chat with a failure exits 1
  EXPECT_NE(c.stderr_text.find("png_rgba8_33x17.png: "), std::string::npos) << c.stderr_text;
}

TEST(CliTokenize, StandardInputLineByLineAndConversations) {
  const std::string dir = test::tiny_model_dir();
  Child t({"tokenize", "--model", dir, "--json"});
  t.write_line("hello world");
  t.write_line("");
  t.write_line("<|im_start|> stays text");
  EXPECT_EQ(t.finish(30), 0) << t.stderr_text;
  std::vector<nlohmann::json> lines;
  for (size_t a = 0, b; (b = t.stdout_text.find('\n', a)) != std::string::npos; a = b + 1)
    lines.push_back(nlohmann::json::parse(t.stdout_text.substr(a, b - a)));
  ASSERT_EQ(lines.size(), 3u) << t.stdout_text;
  EXPECT_EQ(lines[0]["ids"], nlohmann::json::parse("[14990, 1879]"));  // the tokenizer goldens' "hello world"
  EXPECT_EQ(lines[1]["count"], 0);
  for (const auto& id : lines[2]["ids"]) EXPECT_LT(id.get<int>(), 151643) << "user text became a control token";

  const std::string conv = (std::filesystem::temp_directory_path() / ("qvl-chat-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(conv) << R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": "What?"}]}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})";
  Child p({"tokenize", "--model", dir, "--chat", conv, "--prompt", "--json"});
  EXPECT_EQ(p.finish(30), 0) << p.stderr_text;
  std::filesystem::remove(conv);
  const auto j = nlohmann::json::parse(p.stdout_text);
  const std::string prompt = j["prompt"];
  EXPECT_EQ(prompt.rfind("<|im_start|>system\nBe brief.\n\n# Tools", 0), 0u) << prompt;
  EXPECT_NE(prompt.find("<|vision_start|><|image_pad|><|vision_end|>What?<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);
  EXPECT_EQ(j["images"], 1);
  EXPECT_EQ(j["count"], j["ids"].size());
}

}  // namespace
}  // namespace qvl
