// AVX-512 F/BW/VL/DQ + VNNI: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul in the 512-bit block-pair form
// (measured faster than the 256-bit VL form on Zen 4 by bench/kernels_bench.cpp).
#include "kernels/x86/matmul_legacy512_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_legacy(KernelTable& t) { fill_matmul_legacy_avx512_pairs<4, 4>(t); }
}  // namespace edgellm::kernels
