// PDF documents on the command line: `qvl run --file --pages` and `qvl chat --file` / `/file PATH PAGES`, run
// as the user runs them (the server's entry points: test_server_documents.cpp).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "test_process.h"
#include "test_server_fixture.h"

namespace qvl {
namespace {

// The command line: qvl run --file --pages, and /file in qvl chat.
TEST(CliDocuments, RunAndChatReadPdfPages) {
  const std::string dir = test::tiny_model_dir();
  const std::filesystem::path logs = std::filesystem::temp_directory_path() / ("qvl-cli-doc-" + std::to_string(getpid()));
  std::filesystem::create_directories(logs);
  const std::string pdf = test::data_dir() + "/pdf/three_a4.pdf";
  auto ran = test::run(QVL_BINARY, {"run", "--model", dir, "--file", pdf, "--pages", "1,3", "--max-pixels", "200704",
                                    "-p", "What does the document say?", "-n", "2", "--temp", "0"}, logs);
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_TRUE(test::contains(ran.err, "pages 1, 3 rendered")) << ran.err;
  // Two pages of 176 tokens each (512 x 352 after smart_resize).
  EXPECT_TRUE(test::contains(ran.err, "352 image tokens")) << ran.err;
  auto bad = test::run(QVL_BINARY, {"run", "--model", dir, "--file", pdf, "--pages", "4", "-p", "?"}, logs);
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(test::contains(bad.err, "the document has 3 pages")) << bad.err;
  auto not_pdf = test::run(QVL_BINARY, {"run", "--model", dir, "--file", test::data_dir() + "/images/png_rgb8_1x1.png", "-p", "?"}, logs);
  EXPECT_EQ(not_pdf.code, 2);
  EXPECT_TRUE(test::contains(not_pdf.err, "not a PDF")) << not_pdf.err;
  // qvl chat: --file for the first message, /file PATH PAGES later; a bad one is said and the chat goes on.
  const std::filesystem::path in = logs / "input.txt";
  std::filesystem::create_directories(logs);
  { std::ofstream(in) << "What is it?\n/file " << pdf << " 2\nAnd this one?\n/file " << pdf << " 7\n/file /nonexistent.pdf\nStill there?\n"; }
  const std::string cmd = std::string(QVL_BINARY) + " chat --model '" + dir + "' --file '" + pdf + "' --pages 1 --max-pixels 200704 " +
                          "-n 2 --temp 0 < '" + in.string() + "' > '" + (logs / "chat.out").string() + "' 2> '" +
                          (logs / "chat.err").string() + "'";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;  // piped, with two failed commands: exit 1
  const std::string err = test::slurp(logs / "chat.err");
  EXPECT_TRUE(test::contains(err, "2 turns or commands of the input failed")) << err;
  EXPECT_TRUE(test::contains(err, "(attached " + pdf + ": page 1 at")) << err;
  EXPECT_TRUE(test::contains(err, "(attached " + pdf + ": page 2 at")) << err;
  EXPECT_TRUE(test::contains(err, "the document has 3 pages")) << err;
  EXPECT_TRUE(test::contains(err, "/nonexistent.pdf")) << err;
  std::filesystem::remove_all(logs);
}

}  // namespace
}  // namespace qvl
