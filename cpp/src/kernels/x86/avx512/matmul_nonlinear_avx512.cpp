// AVX-512 level: IQ4_NL, IQ4_XS, MXFP4 matmul in the GGUF layout, the 256-bit VL form of the avx2
// kernel bodies (these run only where weights are not packed; the packed VNNI kernels are the
// usual path).
#include "kernels/x86/matmul_nonlinear_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_nonlinear(KernelTable& t) { fill_matmul_nonlinear_x86<4, 4>(t); }
}  // namespace edgellm::kernels
