// What a service manager and an orchestrator see of `qvl serve`: /livez answers while the process runs,
// /readyz only while the model is loaded, it is not draining and its queue is below --ready-queue (503 with
// Retry-After otherwise, and at once on shutdown while running streams finish); the probes need no API key;
// /metrics carries the gauges autoscalers use; sd_notify reaches $NOTIFY_SOCKET; the default thread count
// follows the cgroup CPU quota and the affinity mask.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>

#include "test_server_fixture.h"
#include "util/cpu_budget.h"
#include "util/sd_notify.h"

namespace qvl::test {
namespace {

using ServiceProbes = ServerTest;

TEST_F(ServiceProbes, ReadinessFollowsLoadingAndDraining) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const std::string dir = tiny_model_dir();
  start(test_options(), [dir, released]() {
    released.wait();
    return Model::load(dir);
  }, /*wait_ready=*/false);
  EXPECT_EQ(get("/livez").status, 200);
  Reply loading = get("/readyz");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.json_body()["status"], "loading");
  EXPECT_EQ(loading.headers.count("Retry-After"), 1u);
  EXPECT_EQ(metric(get("/metrics").body, "qvl_ready"), 0);
  release.set_value();
  ASSERT_TRUE(wait_for([&] { return get("/readyz").status == 200; }, 60));
  EXPECT_EQ(get("/readyz").json_body()["status"], "ready");
  EXPECT_EQ(metric(get("/metrics").body, "qvl_ready"), 1);

  // A stream runs; shutdown turns readiness off at once, the stream still finishes, liveness stays.
  std::promise<void> first_piece;
  std::atomic<bool> signalled{false};
  auto stream = std::async(std::launch::async, [&] {
    return post_stream("/v1/chat/completions", chat_body("finish me", 40, true), [&](const std::string&) {
      if (!signalled.exchange(true)) first_piece.set_value();
      return true;
    });
  });
  first_piece.get_future().wait();
  EXPECT_EQ(metric(get("/metrics").body, "qvl_requests_running"), 1);
  auto stopping = std::async(std::launch::async, [&] { server_->shutdown(scaled(30)); });
  ASSERT_TRUE(wait_for([&] { return get("/readyz").status == 503; }, 5));
  Reply draining = get("/readyz");
  if (draining.status == 503) {
    EXPECT_EQ(draining.json_body()["status"], "draining");
  }
  Reply live = get("/livez");
  EXPECT_TRUE(live.status == 200 || live.status == -1) << live.status;  // -1: already closed
  Reply r = stream.get();
  stopping.get();
  std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length") << r.body;
}

TEST_F(ServiceProbes, ReadinessTurnsOffAtTheReadyQueue) {
  server::ServerOptions o = test_options();
  o.parallel = 1;
  o.queue = 8;
  o.ready_queue = 1;
  start(o);
  ASSERT_EQ(get("/readyz").status, 200);
  std::atomic<bool> hang_up{false};
  auto long_stream = [&] {
    return post_stream("/v1/chat/completions", chat_body("long", 900, true),
                       [&](const std::string&) { return !hang_up.load(); });
  };
  auto a = std::async(std::launch::async, long_stream);
  ASSERT_TRUE(wait_for([&] { return server_->busy_slots() == 1; }, 10));
  EXPECT_EQ(get("/readyz").status, 200);  // running, none waiting
  auto b = std::async(std::launch::async, long_stream);
  ASSERT_TRUE(wait_for([&] { return server_->queue_depth() == 1; }, 10));
  Reply busy = get("/readyz");
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.json_body()["status"], "busy");
  EXPECT_EQ(busy.json_body()["queue"], 1);
  const std::string page = get("/metrics").body;
  EXPECT_EQ(metric(page, "qvl_requests_waiting"), 1);
  EXPECT_EQ(metric(page, "qvl_requests_running"), 1);
  EXPECT_EQ(metric(page, "qvl_ready"), 0);
  hang_up = true;
  a.get();
  b.get();
  EXPECT_TRUE(wait_for([&] { return get("/readyz").status == 200; }, 10));
}

TEST_F(ServiceProbes, ProbesNeedNoApiKey) {
  server::ServerOptions o = test_options();
  o.api_keys = {"secret"};
  start(o);
  EXPECT_EQ(get("/livez").status, 200);
  EXPECT_EQ(get("/readyz").status, 200);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/metrics").status, 401);
  EXPECT_EQ(get("/v1/models").status, 401);
}

// ---- sd_notify ------------------------------------------------------------------------------------------------

class SdNotify : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "qvl-notify-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/notify";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{2, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    if (fd_ >= 0) close(fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string receive() {
    char buf[512];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n < 0 ? std::string("<nothing>") : std::string(buf, static_cast<size_t>(n));
  }
  std::string dir_, path_;
  int fd_ = -1;
};

TEST_F(SdNotify, SendsTheStateToTheSocket) {
  setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  ASSERT_TRUE(sd_notify("READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(receive(), "READY=1\nSTATUS=serving");
}

TEST_F(SdNotify, NothingWithoutTheVariableAndAnErrorForABadOne) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(sd_notify("READY=1").ok());
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  Status st = sd_notify("READY=1");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("relative/path"), std::string::npos) << st.message();
  setenv("NOTIFY_SOCKET", (dir_ + "/absent").c_str(), 1);
  st = sd_notify("READY=1");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("absent"), std::string::npos) << st.message();
}

// ---- The default thread count ---------------------------------------------------------------------------------

class CpuBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "qvl-cgroup-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    files_.root = tmpl;
    files_.self_cgroup = files_.root + "/self_cgroup";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(files_.root, ec);
  }
  void write(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = files_.root + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  CgroupFiles files_;
};

TEST_F(CpuBudgetTest, CgroupV2TakesTheSmallestQuotaUpTheTree) {
  write("self_cgroup", "0::/system.slice/qvl.service\n");
  write("cpu.max", "max 100000\n");
  write("system.slice/cpu.max", "300000 100000\n");
  write("system.slice/qvl.service/cpu.max", "150000 100000\n");
  std::string source;
  auto q = cgroup_cpu_quota(files_, &source);
  ASSERT_TRUE(q.has_value());
  EXPECT_DOUBLE_EQ(*q, 1.5);
  EXPECT_EQ(source, files_.root + "/system.slice/qvl.service/cpu.max");
  write("system.slice/cpu.max", "50000 100000\n");  // the parent's is smaller
  q = cgroup_cpu_quota(files_, &source);
  ASSERT_TRUE(q.has_value());
  EXPECT_DOUBLE_EQ(*q, 0.5);
  EXPECT_EQ(source, files_.root + "/system.slice/cpu.max");
}

TEST_F(CpuBudgetTest, NoQuotaWhenMaxOrAbsent) {
  write("self_cgroup", "0::/\n");
  EXPECT_FALSE(cgroup_cpu_quota(files_).has_value());  // no cpu.max at all
  write("cpu.max", "max 100000\n");
  EXPECT_FALSE(cgroup_cpu_quota(files_).has_value());
  write("cpu.max", "garbage\n");
  EXPECT_FALSE(cgroup_cpu_quota(files_).has_value());
  files_.self_cgroup = files_.root + "/missing";
  EXPECT_FALSE(cgroup_cpu_quota(files_).has_value());
}

TEST_F(CpuBudgetTest, CgroupV1CpuController) {
  write("self_cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  auto q = cgroup_cpu_quota(files_);
  ASSERT_TRUE(q.has_value());
  EXPECT_DOUBLE_EQ(*q, 2.5);
}

TEST(CpuBudget, ThreadsAreTheCoresWithinTheQuotaFloor) {
  EXPECT_EQ(cpu_budget_from(8, 16, std::nullopt, "").threads, 8);
  EXPECT_EQ(cpu_budget_from(8, 16, 2.5, "f").threads, 2);
  EXPECT_EQ(cpu_budget_from(8, 16, 0.5, "f").threads, 1);  // never 0
  EXPECT_EQ(cpu_budget_from(2, 4, 16.0, "f").threads, 2);  // the quota never adds cores
  EXPECT_EQ(cpu_budget_from(4, 4, 3.0, "f").threads, 3);
  const std::string d = cpu_budget_from(8, 16, 2.5, "/sys/fs/cgroup/cpu.max").describe();
  EXPECT_NE(d.find("2 threads"), std::string::npos) << d;
  EXPECT_NE(d.find("8 physical cores"), std::string::npos) << d;
  EXPECT_NE(d.find("16 CPUs"), std::string::npos) << d;
  EXPECT_NE(d.find("2.5"), std::string::npos) << d;
}

TEST(CpuBudget, AffinityMaskLimitsTheCores) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int cpus = 0;
  const std::vector<int> all = allowed_core_cpus(&cpus);
  ASSERT_FALSE(all.empty());
  EXPECT_LE(static_cast<int>(all.size()), cpus);
  // This thread alone on one CPU: one core.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(all[0], &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const std::vector<int> pinned = allowed_core_cpus(&cpus);
  sched_setaffinity(0, sizeof(saved), &saved);
  EXPECT_EQ(pinned, std::vector<int>{all[0]});
  EXPECT_EQ(cpus, 1);
}

}  // namespace
}  // namespace qvl::test
