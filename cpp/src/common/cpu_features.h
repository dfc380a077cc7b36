// What the CPU we run on can do, probed once (cpuid / xgetbv on x86, HWCAP on aarch64).
#pragma once

namespace edgellm {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
  bool avx_vnni = false;
  bool neon = false, dotprod = false, i8mm = false;
  int physical_cores = 1;
  int logical_cores = 1;
};

const CpuFeatures& cpu_features();

}  // namespace edgellm
