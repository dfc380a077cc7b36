// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): f32 vector ops.
#include "kernels/x86/float_ops_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_float_ops(KernelTable& t) { fill_float_ops_x86(t); }
}  // namespace edgellm::kernels
