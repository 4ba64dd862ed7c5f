// How many threads this process should run by default: the physical cores among the CPUs it may run on (its
// affinity mask: taskset, a container's cpuset, systemd's AllowedCPUs/CPUAffinity, Kubernetes' static CPU
// manager), capped by its cgroup's CPU quota (docker --cpus, Kubernetes limits.cpu, systemd CPUQuota), and
// why — not the host's core count, which a container or a service unit may not be allowed to use.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace qvl {

// Where the cgroup facts are read (tests point these at a folder of their own).
struct CgroupFiles {
  std::string self_cgroup = "/proc/self/cgroup";  // "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1) lines
  std::string root = "/sys/fs/cgroup";            // the cgroup filesystem's mount point
};

// The CPU quota of this process's cgroup and of its ancestors, the smallest, in CPUs (cgroup v2 cpu.max
// "QUOTA PERIOD", v1 cpu.cfs_quota_us / cpu.cfs_period_us); nullopt when none is set ("max", -1, absent).
// `source`, when given, receives the file the quota came from.
std::optional<double> cgroup_cpu_quota(const CgroupFiles& files = {}, std::string* source = nullptr);

// One logical CPU per physical core (package, core) among the CPUs this process may run on, the lowest
// numbered of each core, in CPU order; every allowed CPU when the topology is unknown. `allowed_cpus`, when
// given, receives the count of logical CPUs in the affinity mask.
std::vector<int> allowed_core_cpus(int* allowed_cpus = nullptr);

struct CpuBudget {
  int threads = 1;              // the default thread count: min(cores, floor(quota)), at least 1
  int cores = 0;                // physical cores among the allowed CPUs
  int cpus = 0;                 // logical CPUs allowed
  std::optional<double> quota;  // CPUs the cgroup quota allows
  std::string quota_source;     // the file it came from
  // "2 threads: 2 physical cores among the 4 CPUs this process may use; cgroup quota 3.5 CPUs (FILE)".
  std::string describe() const;
};

// The budget from the affinity mask and the cgroup quota; `quota` overrides the cgroup reading (tests).
CpuBudget cpu_budget(const CgroupFiles& files = {});
CpuBudget cpu_budget_from(int cores, int cpus, std::optional<double> quota, std::string quota_source);

// cpu_budget().threads: the thread count every command starts from when --threads is not given.
int default_threads();

}  // namespace qvl
