// Paged attention for the avx512 table (bodies in kernels/x86/attention_x86.inc.h, 16-lane tiles
// in kernels/x86/attention512_x86.inc.h; simd_x86.h silences GCC's false -Wmaybe-uninitialized).
#include "kernels/x86/attention512_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_attention(KernelTable& t) { t.paged_attention = paged_attention_x86_512; }
}  // namespace edgellm::kernels
