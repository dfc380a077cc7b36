// What the machine can give this process: the one probe of memory (issue 38). The engine's KV
// check, the memory plan (python/edgellm/memory_plan.py, through _core.machine_memory) and the
// many-models server's budget all take its result.
//
//   available = MemAvailable (/proc/meminfo; sysconf's available pages where there is none),
//               capped by the process's cgroup room (limit - usage): cgroup v2 memory.max -
//               memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes, read first in
//               the process's own cgroup (/proc/self/cgroup) under the cgroup root, then at the
//               root itself (where a container's namespace puts its own cgroup);
//   EDGELLM_MEMORY_LIMIT (bytes, or a number with K/M/G/T, powers of 1024: "512M", "1.5 GiB")
//               replaces it: a small machine simulated, or a cap you choose.
//
// Swap is reported, never counted. For tests only: EDGELLM_CGROUP_ROOT reads the cgroup files
// under another folder (default /sys/fs/cgroup), EDGELLM_PROC_SELF_CGROUP another file in place
// of /proc/self/cgroup.
#pragma once
#include <cstdint>
#include <string>

namespace edgellm {

struct MachineMemory {
  int64_t available = -1;  // bytes this process can still use; -1 when nothing could be read
  std::string source = "unknown";  // "MemAvailable", "sysconf", "cgroup", "EDGELLM_MEMORY_LIMIT"
  // What was read (-1: not read): /proc/meminfo's fields, the cgroup's limit and usage (and the
  // limit file they came from), the override.
  int64_t mem_available = -1, mem_total = -1, swap_total = -1, swap_free = -1;
  int64_t cgroup_limit = -1, cgroup_usage = -1;
  std::string cgroup_path;
  int64_t override_bytes = -1;
};

// Reads the machine now. Throws InvalidRequestError when EDGELLM_MEMORY_LIMIT is set and is
// not a size.
MachineMemory machine_memory();

// "123", "512M", "1.5 GiB", "2g" -> bytes (K/M/G/T are powers of 1024; a trailing B / iB is
// optional). Throws InvalidRequestError naming `what` for anything else.
int64_t parse_bytes(const std::string& text, const std::string& what = "EDGELLM_MEMORY_LIMIT");

}  // namespace edgellm
