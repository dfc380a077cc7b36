// Paged attention for the avx2 table (bodies in kernels/x86/attention_x86.inc.h, the one-token
// path and the dispatch in kernels/x86/attention_decode_x86.inc.h).
#include "kernels/x86/attention_decode_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_attention(KernelTable& t) { t.paged_attention = paged_attention_x86; }
}  // namespace edgellm::kernels
