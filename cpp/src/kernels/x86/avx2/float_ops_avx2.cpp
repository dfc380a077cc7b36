// AVX2 + FMA + F16C (maddubs/madd int8 dots): f32 vector ops.
#include "kernels/x86/float_ops_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_float_ops(KernelTable& t) { fill_float_ops_x86(t); }
}  // namespace edgellm::kernels
