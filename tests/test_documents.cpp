// Documents: the confined worker (util/sandbox.h), Poppler's pdfinfo and pdftoppm through it (io/pdf.h), page
// plans and the page cache (engine/documents.h), and the reference goldens: PDF pages through qvl's renderer,
// preprocessing and prompt against Qwen3VLProcessor on pages pdftoppm rendered (tests/data/document_golden.json).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "engine/documents.h"
#include "engine/prompt.h"
#include "io/pdf.h"
#include "model/image_processor.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "util/digest.h"
#include "util/file.h"
#include "util/sandbox.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

std::span<const uint8_t> doc_bytes_of(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string doc_text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// The system's programs and libraries: what the sandbox tests let their commands read.
const std::vector<std::string> kSystem = {"/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache"};

std::vector<uint8_t> doc_corpus(const std::string& name) {
  auto bytes = read_file_bytes(test::data_dir() + "/pdf/" + name);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

fs::path doc_temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("qvl-doc-" + tag + "-" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

// --- The confined worker -------------------------------------------------------------------------------------

TEST(Sandbox, InputIsASeekableStdinAndOutputComesBack) {
  auto r = run_sandboxed({"/usr/bin/tail", "-c", "6"}, doc_bytes_of("hello, world"), {}, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(doc_text(r->out), " world");
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to seek with";
  // Seekable (Poppler reads a PDF from its end): lseek on a pipe would fail with ESPIPE.
  auto seek = run_sandboxed({"/usr/bin/python3", "-c", "import os, sys; os.lseek(0, 7, 0); sys.stdout.write(os.read(0, 5).decode())"},
                            doc_bytes_of("hello, world"), {}, kSystem);
  ASSERT_TRUE(seek.ok());
  EXPECT_EQ(doc_text(seek->out), "world") << seek->err;
}

TEST(Sandbox, NoNewProcesses) {
  auto r = run_sandboxed({"/bin/sh", "-c", "/bin/true; echo after"}, {}, {}, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(doc_text(r->out).find("after"), std::string::npos);
  EXPECT_NE(r->err.find("fork"), std::string::npos) << r->err;
}

TEST(Sandbox, KilledAtTheWallClockLimit) {
  SandboxLimits l;
  l.wall_seconds = 0.5;
  auto r = run_sandboxed({"/bin/sleep", "30"}, {}, l, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_LT(r->seconds, 5.0);
  // One that closes its output and lingers is killed at the deadline too.
  auto quiet = run_sandboxed({"/bin/sh", "-c", "exec >&- 2>&-; exec sleep 30"}, {}, l, kSystem);
  ASSERT_TRUE(quiet.ok()) << quiet.status().message();
  EXPECT_TRUE(quiet->timed_out);
  EXPECT_LT(quiet->seconds, 5.0);
}

TEST(Sandbox, StoppedAtItsCpuTimeLimit) {
  SandboxLimits l;
  l.cpu_seconds = 1;
  l.wall_seconds = 30;
  auto r = run_sandboxed({"/bin/sh", "-c", "while :; do :; done"}, {}, l, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->signal == SIGXCPU || r->signal == SIGKILL) << r->signal;
  EXPECT_LT(r->seconds, 15.0);
}

TEST(Sandbox, MemoryIsBounded) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to allocate with";
  SandboxLimits l;
  l.address_space_bytes = uint64_t{256} << 20;
  auto r = run_sandboxed({"/usr/bin/python3", "-c", "b = bytearray(600 << 20); print('allocated')"}, {}, l, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_EQ(doc_text(r->out).find("allocated"), std::string::npos);
  EXPECT_NE(r->err.find("MemoryError"), std::string::npos) << r->err;
}

TEST(Sandbox, OutputOverTheCapStopsIt) {
  SandboxLimits l;
  l.max_stdout_bytes = 1 << 20;
  auto r = run_sandboxed({"/usr/bin/yes"}, {}, l, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->output_too_large);
  EXPECT_LE(r->out.size(), size_t{1} << 20);
}

TEST(Sandbox, NoNetwork) {
  // A listener of the test's own on 127.0.0.1: the child's connection attempt must never reach it.
  const int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(ls, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(ls, 4), 0);
  socklen_t len = sizeof a;
  getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto r = run_sandboxed({"/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected"}, {}, {}, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_EQ(doc_text(r->out).find("connected"), std::string::npos);
  EXPECT_NE(r->err.find("ermission denied"), std::string::npos) << r->err;
  EXPECT_LT(accept(ls, nullptr, nullptr), 0);  // nothing arrived
  close(ls);
}

TEST(Sandbox, NothingOfTheCallerStaysOpen) {
  const int fd = open("/dev/null", O_RDONLY);  // not close-on-exec: a careless fork + exec would pass it on
  ASSERT_GE(fd, 0);
  ASSERT_EQ(dup2(fd, 100), 100);
  std::vector<std::string> readable = kSystem;
  readable.push_back("/proc");
  auto r = run_sandboxed({"/bin/ls", "/proc/self/fd"}, {}, {}, readable);
  close(100);
  close(fd);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  // 0, 1, 2 and ls's own handle on the directory.
  EXPECT_EQ(doc_text(r->out), "0\n1\n2\n3\n");
}

// What seccomp refuses whether or not the kernel has Landlock: new processes (threads stay allowed), signals to
// others, leaving the process group, and any change to a file, even one it may read.
TEST(Sandbox, NoProcessesSignalsOrFileChanges) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to try with";
  const fs::path dir = doc_temp_dir("seccomp");
  { std::ofstream(dir / "kept") << "contents"; }
  const std::string script =
      "import os, threading\n"
      "t = threading.Thread(target=print, args=('thread ran',)); t.start(); t.join()\n"
      "for name, call in [('fork', os.fork), ('kill', lambda: os.kill(os.getppid(), 0)), ('setsid', os.setsid),\n"
      "                   ('write', lambda: open(os.environ.get('D', '') + '" + dir.string() + "/new', 'w')),\n"
      "                   ('append', lambda: open('" + dir.string() + "/kept', 'a')),\n"
      "                   ('truncate', lambda: os.truncate('" + dir.string() + "/kept', 0)),\n"
      "                   ('unlink', lambda: os.unlink('" + dir.string() + "/kept')),\n"
      "                   ('rename', lambda: os.rename('" + dir.string() + "/kept', '" + dir.string() + "/moved'))]:\n"
      "    try:\n"
      "        call(); print(name, 'allowed')\n"
      "    except OSError as e:\n"
      "        print(name, 'refused', e.errno)\n";
  std::vector<std::string> readable = kSystem;
  readable.push_back(dir.string());
  auto r = run_sandboxed({"/usr/bin/python3", "-c", script}, {}, {}, readable);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string out = doc_text(r->out);
  EXPECT_NE(out.find("thread ran"), std::string::npos) << out << r->err;
  for (const char* name : {"fork", "kill", "setsid", "write", "append", "truncate", "unlink", "rename"})
    EXPECT_NE(out.find(std::string(name) + " refused"), std::string::npos) << name << "\n" << out << r->err;
  std::ifstream kept(dir / "kept");
  std::string contents;
  std::getline(kept, contents);
  EXPECT_EQ(contents, "contents");
  EXPECT_FALSE(fs::exists(dir / "new"));
  fs::remove_all(dir);
}

TEST(Sandbox, ReadsOnlyBeneathWhatItIsGivenAndWritesNothing) {
  if (!sandbox_has_landlock()) GTEST_SKIP() << "this kernel has no Landlock: only rlimits and seccomp confine the worker";
  const fs::path dir = doc_temp_dir("landlock");
  { std::ofstream(dir / "secret") << "model weights"; }
  auto r = run_sandboxed({"/bin/cat", (dir / "secret").string()}, {}, {}, kSystem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_TRUE(r->out.empty());
  auto w = run_sandboxed({"/bin/sh", "-c", "echo x > " + (dir / "new").string()}, {}, {}, kSystem);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_NE(w->exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "new"));
  // Given the directory, the same read works: the refusal was the confinement's.
  std::vector<std::string> readable = kSystem;
  readable.push_back(dir.string());
  auto ok = run_sandboxed({"/bin/cat", (dir / "secret").string()}, {}, {}, readable);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(doc_text(ok->out), "model weights");
  fs::remove_all(dir);
}

TEST(Sandbox, AProgramThatCannotStartIsAnError) {
  auto r = run_sandboxed({"/nonexistent/program"}, {}, {}, kSystem);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("could not be started"), std::string::npos) << r.status().message();
  EXPECT_FALSE(run_sandboxed({"relative"}, {}, {}, kSystem).ok());
}

// --- pdfinfo's answer and page selections ---------------------------------------------------------------------

TEST(Pdf, ParsesPdfinfo) {
  const std::string text =
      "Producer:        x\nPages:           3\nEncrypted:       no\n"
      "Page    1 size:  595.276 x 841.89 pts (A4)\nPage    1 rot:   90\n"
      "Page    2 size:  612 x 792 pts (letter)\nPage    2 rot:   0\n"
      "Page    3 size:  10 x 14400 pts\nPage    3 rot:   270\nFile size:       0 bytes\n";
  auto info = parse_pdfinfo(text, 2000);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->pages, 3);
  EXPECT_FALSE(info->encrypted);
  EXPECT_DOUBLE_EQ(info->page[0].width_pt, 595.276);
  EXPECT_DOUBLE_EQ(info->page[0].height_pt, 841.89);
  EXPECT_EQ(info->page[0].rotate, 90);
  EXPECT_DOUBLE_EQ(info->page[0].shown_width(), 841.89);
  EXPECT_EQ(info->page[2].rotate, 270);
  EXPECT_TRUE(parse_pdfinfo("Pages: 1\nEncrypted: yes (print:yes)\nPage    1 size: 1 x 1 pts\n", 10)->encrypted);
  // A page without its size, a count over the limit, no count at all: refused.
  EXPECT_FALSE(parse_pdfinfo("Pages: 2\nEncrypted: no\nPage    1 size: 1 x 1 pts\n", 10).ok());
  auto many = parse_pdfinfo("Pages: 11\nEncrypted: no\n", 10);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("11 pages, over the limit of 10"), std::string::npos);
  EXPECT_FALSE(parse_pdfinfo("Encrypted: no\n", 10).ok());
  EXPECT_FALSE(parse_pdfinfo("Pages: -1\nEncrypted: no\n", 10).ok());
  EXPECT_FALSE(parse_pdfinfo("Pages: 1\nEncrypted: no\nPage    1 size: 1e9 x 1 pts\n", 10).ok());
}

TEST(Pdf, PageSelections) {
  using V = std::vector<int>;
  EXPECT_EQ(*parse_page_selection("1-3,7", 8), (V{1, 2, 3, 7}));
  EXPECT_EQ(*parse_page_selection(" 7 , 2-3 ", 8), (V{7, 2, 3}));
  EXPECT_EQ(*parse_page_selection("6-", 8), (V{6, 7, 8}));
  EXPECT_EQ(*parse_page_selection("", 3), (V{1, 2, 3}));
  EXPECT_EQ(*parse_page_selection("all", 2), (V{1, 2}));
  for (const char* bad : {"0", "9", "3-1", "1,1", "1-3,2", "a", "1,,2", ",", "-", "1-2-3", "99999999"}) {
    auto r = parse_page_selection(bad, 8);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_page_selection("9", 8).status().message().find("the document has 8 pages"), std::string::npos);
}

TEST(Pdf, SniffsTheHeader) {
  EXPECT_TRUE(is_pdf(doc_bytes_of("%PDF-1.4\n")));
  EXPECT_TRUE(is_pdf(doc_bytes_of(std::string(1000, ' ') + "%PDF-1.7")));
  EXPECT_FALSE(is_pdf(doc_bytes_of(std::string(1024, ' ') + "%PDF-1.7")));
  EXPECT_FALSE(is_pdf(doc_bytes_of("\x89PNG\r\n")));
}

// The committed corpus is what tests/pdf/pdfgen.py writes (the tests' PDFs are written by the tests).
TEST(Pdf, CorpusIsWhatTheGeneratorWrites) {
  const fs::path dir = doc_temp_dir("corpus");
  const std::string cmd = "python3 '" + test::data_dir() + "/../pdf/pdfgen.py' '" + dir.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    SCOPED_TRACE(e.path().filename().string());
    auto made = read_file_bytes(e.path().string());
    auto kept = read_file_bytes(test::data_dir() + "/pdf/" + e.path().filename().string());
    ASSERT_TRUE(made.ok() && kept.ok());
    EXPECT_TRUE(*made == *kept) << "regenerate: python3 tests/pdf/pdfgen.py tests/data/pdf";
    ++files;
  }
  EXPECT_EQ(files, 7);
  fs::remove_all(dir);
}

// --- Poppler through the worker --------------------------------------------------------------------------------

class PdfRender : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status s = pdf_renderer_available(); !s.ok()) GTEST_FAIL() << s.message();
  }
};

TEST_F(PdfRender, ReadsTheCorpusPageLists) {
  PdfLimits l;
  auto text = pdf_inspect(doc_corpus("text.pdf"), l);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->pages, 1);
  EXPECT_DOUBLE_EQ(text->page[0].width_pt, 595);
  EXPECT_DOUBLE_EQ(text->page[0].height_pt, 842);
  auto rotated = pdf_inspect(doc_corpus("rotated.pdf"), l);
  ASSERT_TRUE(rotated.ok()) << rotated.status().message();
  ASSERT_EQ(rotated->pages, 3);
  EXPECT_EQ(rotated->page[0].rotate, 90);
  EXPECT_EQ(rotated->page[1].rotate, 0);
  EXPECT_EQ(rotated->page[2].rotate, 270);
  auto mixed = pdf_inspect(doc_corpus("mixed.pdf"), l);
  ASSERT_TRUE(mixed.ok());
  ASSERT_EQ(mixed->pages, 5);
  EXPECT_DOUBLE_EQ(mixed->page[3].width_pt, 360);
  EXPECT_DOUBLE_EQ(mixed->page[3].height_pt, 216);
  auto hundred = pdf_inspect(doc_corpus("pages100.pdf"), l);
  ASSERT_TRUE(hundred.ok());
  EXPECT_EQ(hundred->pages, 100);
  l.max_pages = 50;
  auto over = pdf_inspect(doc_corpus("pages100.pdf"), l);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("100 pages, over the limit of 50"), std::string::npos) << over.status().message();
}

// pdftoppm run directly on the file (not through the worker): the pixels qvl's confined render must equal.
std::vector<uint8_t> doc_direct_pdftoppm(const std::string& file, int page, int sx, int sy) {
  const std::string cmd = "pdftoppm -f " + std::to_string(page) + " -l " + std::to_string(page) + " -cropbox -scale-to-x " +
                          std::to_string(sx) + " -scale-to-y " + std::to_string(sy) + " '" + file + "'";
  std::vector<uint8_t> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.insert(out.end(), buf, buf + n);
  pclose(p);
  // Past the "P6\nW H\n255\n" header.
  size_t at = 0;
  for (int lines = 0; at < out.size() && lines < 3; ++at)
    if (out[at] == '\n') ++lines;
  out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(at));
  return out;
}

TEST_F(PdfRender, PixelsAreThoseOfPdftoppmRunIndependently) {
  struct Case {
    const char* file;
    int page, width, height;  // the shown page's size asked for
  };
  for (const Case& c : {Case{"text.pdf", 1, 300, 424}, Case{"rotated.pdf", 1, 424, 300}, Case{"rotated.pdf", 3, 400, 309},
                        Case{"shapes.pdf", 1, 595, 842}, Case{"jpeg.pdf", 1, 612, 792}, Case{"mixed.pdf", 4, 360, 216}}) {
    SCOPED_TRACE(std::string(c.file) + " page " + std::to_string(c.page));
    const std::vector<uint8_t> bytes = doc_corpus(c.file);
    auto info = pdf_inspect(bytes, {});
    ASSERT_TRUE(info.ok()) << info.status().message();
    const PdfPage& page = info->page[static_cast<size_t>(c.page) - 1];
    auto img = pdf_render_page(bytes, page, c.page, c.width, c.height, {});
    ASSERT_TRUE(img.ok()) << img.status().message();
    EXPECT_EQ(img->width, c.width);
    EXPECT_EQ(img->height, c.height);
    const bool turned = page.rotate % 180 != 0;
    const std::vector<uint8_t> direct = doc_direct_pdftoppm(test::data_dir() + "/pdf/" + c.file, c.page,
                                                            turned ? c.height : c.width, turned ? c.width : c.height);
    ASSERT_EQ(direct.size(), img->pixels.size());
    EXPECT_TRUE(direct == img->pixels);
    // Not a blank page: the renderer drew something.
    EXPECT_NE(std::count(img->pixels.begin(), img->pixels.end(), 255), static_cast<std::ptrdiff_t>(img->pixels.size()));
  }
}

TEST_F(PdfRender, ThumbnailsOfTheFirstPages) {
  auto thumbs = pdf_render_thumbnails(doc_corpus("mixed.pdf"), 1, 5, 100, {});
  ASSERT_TRUE(thumbs.ok()) << thumbs.status().message();
  ASSERT_EQ(thumbs->size(), 5u);
  EXPECT_EQ((*thumbs)[0].height, 100);  // A4 portrait: the height is the longer side
  EXPECT_EQ((*thumbs)[2].width, 100);   // A4 landscape
  EXPECT_EQ((*thumbs)[3].width, 100);
  EXPECT_EQ((*thumbs)[3].height, 60);
}

// The attack suite's files (tests/pdf/pdfgen.py --hostile): each a clear error, none a crash, each within the
// limits' time.
TEST_F(PdfRender, HostileFilesAreRefusedWithinTheLimits) {
  const fs::path dir = doc_temp_dir("hostile");
  const std::string cmd = "python3 '" + test::data_dir() + "/../pdf/pdfgen.py' --hostile '" + dir.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto bytes = [&](const char* name) {
    auto b = read_file_bytes((dir / name).string());
    EXPECT_TRUE(b.ok()) << name;
    return b.ok() ? *b : std::vector<uint8_t>{};
  };
  PdfLimits l;
  l.render_timeout_s = 3;
  l.worker_memory_bytes = uint64_t{512} << 20;
  for (const char* name : {"encrypted_empty_password.pdf", "encrypted_password.pdf"}) {
    auto info = pdf_inspect(bytes(name), l);
    ASSERT_FALSE(info.ok()) << name;
    EXPECT_NE(info.status().message().find("encrypted"), std::string::npos) << info.status().message();
  }
  for (const char* name : {"damaged.pdf", "truncated.pdf", "garbage.pdf"}) {
    const auto b = bytes(name);
    auto info = pdf_inspect(b, l);
    if (info.ok()) {  // Poppler may rebuild a damaged file's page list: then the page fails or renders
      auto img = pdf_render_page(b, info->page[0], 1, 100, 100, l);
      if (!img.ok()) {
        EXPECT_FALSE(img.status().message().empty());
      }
    } else {
      EXPECT_FALSE(info.status().message().empty()) << name;
    }
  }
  // The recursive page tree reads, but its broken pages have no size: planning refuses them.
  auto rec = pdf_inspect(bytes("recursive.pdf"), l);
  if (rec.ok()) {
    ImageProcessorConfig pc;
    for (int n = 1; n <= rec->pages; ++n) {
      auto p = plan_page(*rec, n, pc, {}, {});
      if (!p.ok()) {
        EXPECT_NE(p.status().message().find("no usable size"), std::string::npos) << p.status().message();
      }
    }
  }
  // Bombs (2^40 rectangles through nested forms; 4 GiB of operators through two Flate filters): stopped by the
  // time limit.
  for (const char* name : {"form_bomb.pdf", "decompression_bomb.pdf"}) {
    const auto b = bytes(name);
    auto info = pdf_inspect(b, l);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status().message();
    const auto t0 = std::chrono::steady_clock::now();
    auto img = pdf_render_page(b, info->page[0], 1, 400, 560, l);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, l.render_timeout_s + 5) << name;
    ASSERT_FALSE(img.ok()) << name;
    EXPECT_NE(img.status().message().find("page 1"), std::string::npos) << img.status().message();
  }
  // A 200 x 200 inch page is scaled to the budget before it is rendered; a 1,440:1 strip is refused.
  auto huge = pdf_inspect(bytes("huge_page.pdf"), l);
  ASSERT_TRUE(huge.ok());
  ImageProcessorConfig pc;
  PreprocessOptions o;
  o.max_pixels = 1'000'000;
  o.min_pixels = pc.min_pixels;
  auto plan = plan_page(*huge, 1, pc, o, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_LE(int64_t{plan->width} * plan->height, 1'000'000);
  EXPECT_LT(plan->dpi, 6);
  auto strip = plan_page(*pdf_inspect(bytes("thin_page.pdf"), l), 1, pc, o, {});
  EXPECT_FALSE(strip.ok());
  fs::remove_all(dir);
}

// --- Page plans and the cache ------------------------------------------------------------------------------

PdfInfo doc_a4_pages(int n) {
  PdfInfo info;
  info.pages = n;
  info.page.assign(static_cast<size_t>(n), PdfPage{595, 842, 0});
  return info;
}

TEST(DocumentPlan, TheBudgetSetsTheDpiUpToTheMaximum) {
  ImageProcessorConfig pc;  // Qwen3-VL's: 65,536 to 16,777,216 pixels, factor 32
  const PdfInfo info = doc_a4_pages(1);
  PreprocessOptions o;
  o.min_pixels = pc.min_pixels;
  o.max_pixels = pc.max_pixels;
  auto full = plan_page(info, 1, pc, o, {});
  ASSERT_TRUE(full.ok());
  EXPECT_DOUBLE_EQ(full->dpi, 150);  // a page far under the budget: never finer than the maximum
  EXPECT_EQ(full->width, 1240);
  EXPECT_EQ(full->height, 1754);
  o.max_pixels = 200'704;
  auto small = plan_page(info, 1, pc, o, {});
  ASSERT_TRUE(small.ok());
  EXPECT_LT(small->dpi, 50);
  EXPECT_LE(int64_t{small->width} * small->height, 200'704);
  EXPECT_EQ(small->tokens, 176);  // 376 x 532 rendered; smart_resize makes it 352 x 512: 11 x 16 tokens
  DocumentOptions lower;
  lower.max_dpi = 72;
  auto capped = plan_page(info, 1, pc, PreprocessOptions{pc.min_pixels, pc.max_pixels}, lower);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->width, 595);
  EXPECT_EQ(capped->height, 842);
}

TEST(DocumentPlan, OverTheContextSaysHowManyPagesFit) {
  ImageProcessorConfig pc;
  const PdfInfo info = doc_a4_pages(100);
  PreprocessOptions o{pc.min_pixels, 200'704};
  std::vector<int> pages;
  for (int k = 1; k <= 20; ++k) pages.push_back(k);
  auto r = plan_pages(info, pages, pc, o, {}, 2048);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("11 pages fit"), std::string::npos) << r.status().message();  // 11 x 176 <= 2048
  EXPECT_TRUE(plan_pages(info, std::vector<int>(pages.begin(), pages.begin() + 11), pc, o, {}, 2048).ok());
  DocumentOptions few;
  few.max_pages_per_request = 5;
  auto many = plan_pages(info, pages, pc, o, few, 1 << 20);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("over the limit of 5 pages"), std::string::npos);
}

TEST(DocumentPlan, LabelsAndParts) {
  std::vector<ContentPart> parts;
  append_page_parts(parts, {PagePlan{3}, PagePlan{7}});
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].text, "Page 3: ");
  EXPECT_EQ(parts[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(parts[2].text, "Page 7: ");
  EXPECT_EQ(describe_pages({PagePlan{1}, PagePlan{2}, PagePlan{3}, PagePlan{7}}), "pages 1-3, 7");
}

TEST_F(PdfRender, RenderedPagesAreKeptByFilePageAndSize) {
  const std::vector<uint8_t> bytes = doc_corpus("three_a4.pdf");
  const DocumentKey key = document_key(bytes);
  PageCache cache(size_t{64} << 20);
  DocumentOptions options;
  auto info = inspect_document(bytes, key, &cache, options);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(cache.find_info(key), *info);  // the page list is kept too
  const PagePlan plan{2, 200, 283, 24, 0};
  bool cached = true;
  auto first = render_document_page(bytes, key, **info, plan, &cache, options, &cached);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(cached);
  auto again = render_document_page(bytes, key, **info, plan, &cache, options, &cached);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(cached);
  EXPECT_EQ(*first, *again);
  PagePlan other = plan;
  other.width = 100;
  other.height = 141;
  EXPECT_EQ(cache.find_page(key, other), nullptr);  // another size is another entry
  // Over the budget, the least recently used go first.
  PageCache small(200 * 283 * 3 + 1000);
  small.put_page(key, plan, *first);
  small.put_page(key, other, std::make_shared<const ImageRGB>(ImageRGB{100, 141, std::vector<uint8_t>(100 * 141 * 3)}));
  EXPECT_EQ(small.find_page(key, plan), nullptr);
  EXPECT_NE(small.find_page(key, other), nullptr);
}

// --- Against the reference -------------------------------------------------------------------------------------

TEST_F(PdfRender, PagesMatchTheReferenceProcessor) {
  std::ifstream f(test::data_dir() + "/document_golden.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json golden = nlohmann::json::parse(f);
  auto pc = ImageProcessorConfig::load(test::model_files_dir());
  ASSERT_TRUE(pc.ok()) << pc.status().message();
  auto tok = Tokenizer::load(test::model_files_dir());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  DocumentOptions options;
  options.max_dpi = golden["max_dpi"].get<int>();
  ASSERT_GE(golden["cases"].size(), 6u);
  for (const auto& c : golden["cases"]) {
    const std::string file = c["file"].get<std::string>();
    SCOPED_TRACE(file);
    std::string pages;
    for (const auto& n : c["pages"]) pages += (pages.empty() ? "" : ",") + std::to_string(n.get<int>());
    auto doc = open_document_file(test::data_dir() + "/pdf/" + file, pages, options);
    ASSERT_TRUE(doc.ok()) << doc.status().message();
    PreprocessOptions o;
    o.min_pixels = pc->min_pixels;
    o.max_pixels = c["max_pixels"].is_null() ? pc->max_pixels : c["max_pixels"].get<int64_t>();
    auto r = render_document_file(*doc, *pc, o, options, 1 << 20, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->plans.size(), c["render_sizes"].size());
    Digest pixel_values;
    std::vector<int> image_tokens;
    for (size_t k = 0; k < r->plans.size(); ++k) {
      EXPECT_EQ(r->plans[k].width, c["render_sizes"][k][0].get<int>()) << "page " << k;
      EXPECT_EQ(r->plans[k].height, c["render_sizes"][k][1].get<int>()) << "page " << k;
      auto pre = preprocess_image(r->images[k], *pc, o);
      ASSERT_TRUE(pre.ok()) << pre.status().message();
      EXPECT_EQ(pre->grid_h, c["image_grid_thw"][k][1].get<int>());
      EXPECT_EQ(pre->grid_w, c["image_grid_thw"][k][2].get<int>());
      EXPECT_EQ(pre->num_tokens(), r->plans[k].tokens) << "the plan's token count is what preprocessing makes";
      pixel_values.update(pre->pixel_values.data(), pre->pixel_values.size() * sizeof(float));
      image_tokens.push_back(pre->num_tokens());
    }
    EXPECT_EQ(to_hex(pixel_values.finish()), c["pixel_values_sha256"].get<std::string>());
    ChatMessage m;
    m.role = "user";
    m.content_is_string = false;
    append_page_parts(m.content_parts, r->plans);
    m.content_parts.push_back({ContentPart::Kind::kText, c["question"].get<std::string>()});
    auto ids = build_prompt_ids(*tok, render_chat_with_spans({m}), image_tokens);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, c["input_ids"].get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace qvl
