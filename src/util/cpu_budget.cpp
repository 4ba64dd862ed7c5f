// The default thread count from the affinity mask and the cgroup CPU quota.
#include "util/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace qvl {

namespace {

bool core_of(int cpu, std::pair<std::string, std::string>& out) {
  const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
  return static_cast<bool>(pkg >> out.first) && static_cast<bool>(core >> out.second);
}

// A quota file's value in CPUs: v2 "QUOTA PERIOD" or "max PERIOD" (one file), v1 the two numbers apart.
std::optional<double> read_v2(const std::string& path) {
  std::ifstream in(path);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || !(period > 0)) return std::nullopt;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  if (end == quota.c_str() || *end != '\0' || !(q > 0)) return std::nullopt;
  return q / period;
}

std::optional<double> read_v1(const std::string& dir) {
  std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (!(q >> quota) || !(p >> period) || !(quota > 0) || !(period > 0)) return std::nullopt;
  return quota / period;
}

// The folders from `path` (inside the hierarchy) up to the hierarchy's root, deepest first. Inside a
// container's cgroup namespace the path is "/" and the root is the container's own cgroup.
std::vector<std::string> up_from(const std::string& hierarchy, std::string path) {
  std::vector<std::string> dirs;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    dirs.push_back(hierarchy + path);
    if (path.empty()) break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  return dirs;
}

}  // namespace

std::optional<double> cgroup_cpu_quota(const CgroupFiles& files, std::string* source) {
  std::ifstream self(files.self_cgroup);
  std::string line;
  std::optional<double> best;
  auto consider = [&](std::optional<double> q, const std::string& from) {
    if (q && (!best || *q < *best)) {
      best = q;
      if (source) *source = from;
    }
  };
  while (std::getline(self, line)) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {  // v2: one unified hierarchy
      for (const std::string& dir : up_from(files.root, path)) consider(read_v2(dir + "/cpu.max"), dir + "/cpu.max");
      continue;
    }
    std::stringstream names(controllers);
    std::string name;
    bool cpu = false;
    while (std::getline(names, name, ',')) cpu = cpu || name == "cpu";
    if (!cpu) continue;
    // v1: the cpu controller is mounted as cpu, cpu,cpuacct or cpuacct,cpu under the root.
    for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
      for (const std::string& dir : up_from(files.root + mount, path))
        consider(read_v1(dir), dir + "/cpu.cfs_quota_us");
    }
  }
  return best;
}

std::vector<int> allowed_core_cpus(int* allowed_cpus) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    if (allowed_cpus) *allowed_cpus = 0;
    return cpus;
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    std::pair<std::string, std::string> core;
    if (!core_of(cpu, core)) core = {"?", std::to_string(cpu)};  // no topology: every CPU a core
    if (seen.insert(core).second) cpus.push_back(cpu);
  }
  if (allowed_cpus) *allowed_cpus = CPU_COUNT(&allowed);
  return cpus;
}

CpuBudget cpu_budget_from(int cores, int cpus, std::optional<double> quota, std::string quota_source) {
  CpuBudget b;
  b.cores = std::max(1, cores);
  b.cpus = std::max(b.cores, cpus);
  b.quota = quota;
  b.quota_source = std::move(quota_source);
  b.threads = b.cores;
  // The floor: a thread more than the quota pays for would be throttled each period, and the pool's
  // barriers would wait for it.
  if (quota) b.threads = std::clamp(static_cast<int>(std::floor(*quota + 1e-9)), 1, b.threads);
  return b;
}

CpuBudget cpu_budget(const CgroupFiles& files) {
  int cpus = 0;
  const std::vector<int> cores = allowed_core_cpus(&cpus);
  std::string source;
  const std::optional<double> quota = cgroup_cpu_quota(files, &source);
  return cpu_budget_from(static_cast<int>(cores.size()), cpus, quota, source);
}

std::string CpuBudget::describe() const {
  std::ostringstream s;
  s << threads << (threads == 1 ? " thread" : " threads") << ": " << cores << " physical core"
    << (cores == 1 ? "" : "s") << " among the " << cpus << " CPU" << (cpus == 1 ? "" : "s") << " this process may use";
  if (quota) s << "; cgroup CPU quota " << *quota << " (" << quota_source << ")";
  return s.str();
}

int default_threads() {
  static const int n = cpu_budget().threads;
  return n;
}

}  // namespace qvl
