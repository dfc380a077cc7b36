// Paged attention for the avx512 table (bodies in kernels/x86/attention_x86.inc.h, 16-lane tiles
// in kernels/x86/attention512_x86.inc.h).
//
// GCC 12 reports -Wmaybe-uninitialized inside its own avx512fintrin.h (the _mm512_undefined_ps()
// pass-through operand of the unmasked intrinsics) wherever they are inlined into loops; it is a
// false positive, silenced for this unit only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/x86/attention512_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_attention(KernelTable& t) { t.paged_attention = paged_attention_x86_512; }
}  // namespace edgellm::kernels
