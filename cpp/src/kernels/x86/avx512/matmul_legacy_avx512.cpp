// AVX-512 F/BW/VL/DQ + VNNI: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul.
// The table takes the 512-bit block-pair form; the 256-bit VL form stays available to the
// micro-benchmark (bench/kernels_bench.cpp), which measured the pair form faster on Zen 4.
#include "kernels/x86/matmul_legacy512_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_legacy(KernelTable& t) { fill_matmul_legacy_avx512_pairs<4, 4>(t); }
void fill_avx512_matmul_legacy_vl256(KernelTable& t) { fill_matmul_legacy_x86<4, 4>(t); }
}  // namespace edgellm::kernels
