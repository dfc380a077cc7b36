// AVX2 + FMA + F16C (maddubs/madd int8 dots): activation quantizers.
#include "kernels/x86/quantize_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_quantize(KernelTable& t) { fill_quantizers_x86(t); }
}  // namespace edgellm::kernels
