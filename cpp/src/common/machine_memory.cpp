#include "common/machine_memory.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/errors.h"

namespace edgellm {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::string(e) : std::string(fallback);
}

// A file holding one non-negative integer ("max", v2's no limit, and anything else: -1).
int64_t read_int(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s.size() > 19) return -1;
  for (char ch : s)
    if (!std::isdigit(static_cast<unsigned char>(ch))) return -1;
  return std::strtoll(s.c_str(), nullptr, 10);
}

// The folders, deepest first, whose memory limits bind this process: its own cgroup (from
// /proc/self/cgroup: the v2 line "0::/path", or a v1 line naming the memory controller) and
// each of its ancestors, under the cgroup root and under root/memory (v1's mount); the roots last.
std::vector<std::string> cgroup_dirs(const std::string& root, const std::string& self_cgroup) {
  std::vector<std::string> dirs;
  auto add = [&](const std::string& d) {
    for (const std::string& x : dirs)
      if (x == d) return;
    dirs.push_back(d);
  };
  std::ifstream f(self_cgroup);
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    bool memory = controllers.empty();
    std::stringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) memory = memory || c == "memory";
    if (!memory || path.empty() || path[0] != '/') continue;
    while (path.size() > 1) {  // the cgroup, then each parent up to (not including) "/"
      if (path.back() == '/') {
        path.pop_back();
        continue;
      }
      add(root + path);
      add(root + "/memory" + path);
      path.resize(path.rfind('/'));
      if (path.empty()) break;
    }
  }
  add(root);
  add(root + "/memory");
  return dirs;
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what) {
  auto bad = [&]() -> InvalidRequestError {
    return InvalidRequestError(what + " must be bytes or a number with K/M/G/T, got '" + text + "'");
  };
  size_t i = 0;
  const size_t n = text.size();
  auto space = [&] {
    while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  space();
  const size_t num0 = i;
  bool digits = false, dot = false;
  while (i < n && (std::isdigit(static_cast<unsigned char>(text[i])) || (text[i] == '.' && !dot))) {
    if (text[i] == '.') dot = true;
    else digits = true;
    ++i;
  }
  if (!digits || text[i - 1] == '.') throw bad();
  const double v = std::strtod(text.substr(num0, i - num0).c_str(), nullptr);
  space();
  double mul = 1;
  if (i < n) {
    switch (std::tolower(static_cast<unsigned char>(text[i]))) {
      case 'k': mul = 1024.0; ++i; break;
      case 'm': mul = 1024.0 * 1024; ++i; break;
      case 'g': mul = 1024.0 * 1024 * 1024; ++i; break;
      case 't': mul = 1024.0 * 1024 * 1024 * 1024; ++i; break;
      default: break;
    }
  }
  if (i < n && text[i] == 'i') {
    ++i;
    if (i >= n || std::tolower(static_cast<unsigned char>(text[i])) != 'b') throw bad();
  }
  if (i < n && std::tolower(static_cast<unsigned char>(text[i])) == 'b') ++i;
  space();
  if (i != n) throw bad();
  const double bytes = std::floor(v * mul);
  if (!(bytes < 9.2e18)) throw InvalidRequestError(what + " is too large: '" + text + "'");
  return static_cast<int64_t>(bytes);
}

MachineMemory machine_memory() {
  MachineMemory m;
  {
    std::ifstream f("/proc/meminfo");
    std::string line;
    while (std::getline(f, line)) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::stringstream rest(line.substr(colon + 1));
      int64_t value = 0;
      std::string unit;
      if (!(rest >> value)) continue;
      if (rest >> unit) value *= 1024;  // "kB"
      const std::string key = line.substr(0, colon);
      if (key == "MemAvailable") m.mem_available = value;
      else if (key == "MemTotal") m.mem_total = value;
      else if (key == "SwapTotal") m.swap_total = value;
      else if (key == "SwapFree") m.swap_free = value;
    }
  }
  if (m.mem_available >= 0) {
    m.available = m.mem_available;
    m.source = "MemAvailable";
  }
#ifdef _SC_AVPHYS_PAGES
  if (m.available < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
      m.available = static_cast<int64_t>(pages) * page;
      m.source = "sysconf";
    }
  }
#endif
  // The tightest cgroup on the way from the process's own to the root.
  const std::string root = env_or("EDGELLM_CGROUP_ROOT", "/sys/fs/cgroup");
  int64_t best_room = -1;
  for (const std::string& d : cgroup_dirs(root, env_or("EDGELLM_PROC_SELF_CGROUP", "/proc/self/cgroup"))) {
    static const char* const kFiles[2][2] = {{"/memory.max", "/memory.current"},
                                             {"/memory.limit_in_bytes", "/memory.usage_in_bytes"}};
    for (const auto& names : kFiles) {
      const int64_t limit = read_int(d + names[0]), usage = read_int(d + names[1]);
      // v1 writes "no limit" as a huge number (page-rounded LONG_MAX)
      if (limit < 0 || usage < 0 || limit >= (int64_t{1} << 60)) continue;
      const int64_t room = limit > usage ? limit - usage : 0;
      if (best_room < 0 || room < best_room) {
        best_room = room;
        m.cgroup_limit = limit;
        m.cgroup_usage = usage;
        m.cgroup_path = d + names[0];
      }
      break;
    }
  }
  if (best_room >= 0 && (m.available < 0 || best_room < m.available)) {
    m.available = best_room;
    m.source = "cgroup";
  }
  if (const char* e = std::getenv("EDGELLM_MEMORY_LIMIT"); e && *e) {
    m.override_bytes = parse_bytes(e);
    m.available = m.override_bytes;
    m.source = "EDGELLM_MEMORY_LIMIT";
  }
  return m;
}

}  // namespace edgellm
