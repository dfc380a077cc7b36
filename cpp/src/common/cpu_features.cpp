#include "common/cpu_features.h"

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace edgellm {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// Physical cores from /proc/cpuinfo (unique physical id + core id pairs); falls back to
// the logical count when the file is missing or says nothing useful.
int count_physical_cores(int logical) {
  std::ifstream f("/proc/cpuinfo");
  if (!f) return logical;
  std::set<std::pair<int, int>> cores;
  int phys = 0, core = -1;
  std::string line;
  auto value = [](const std::string& l) { return std::stoi(l.substr(l.find(':') + 1)); };
  while (std::getline(f, line)) {
    if (line.rfind("physical id", 0) == 0) phys = value(line);
    else if (line.rfind("core id", 0) == 0) core = value(line);
    else if (line.empty() && core >= 0) { cores.insert({phys, core}); core = -1; }
  }
  if (core >= 0) cores.insert({phys, core});
  int n = static_cast<int>(cores.size());
  return n > 0 && n <= logical ? n : logical;
}

CpuFeatures probe() {
  CpuFeatures f;
  f.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  if (f.logical_cores <= 0) f.logical_cores = 1;
  f.physical_cores = count_physical_cores(f.logical_cores);
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xE6) == 0xE6;
  if (!ymm_os) { f.fma = f.f16c = false; return f; }
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1;
  if (zmm_os) {
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
  }
  __cpuid_count(7, 1, a, b, c, d);
  f.avx_vnni = (a >> 4) & 1;
#elif defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  f.dotprod = (hw & HWCAP_ASIMDDP) != 0;
#ifdef HWCAP2_I8MM
  f.i8mm = (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#endif
#endif
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

}  // namespace edgellm
