// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): activation quantizers.
#include "kernels/x86/quantize_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_quantize(KernelTable& t) { fill_quantizers_x86(t); }
}  // namespace edgellm::kernels
