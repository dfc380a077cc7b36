// AVX2 + FMA + F16C (maddubs/madd int8 dots): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul.
#include "kernels/x86/matmul_legacy_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_matmul_legacy(KernelTable& t) { fill_matmul_legacy_x86<4, 2>(t); }
}  // namespace edgellm::kernels
