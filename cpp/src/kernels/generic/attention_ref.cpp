// Scalar reference of paged attention: one pass over the keys with an online softmax (running
// max m, running sum l, output rescaled whenever the max grows), accumulating in f32.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

namespace edgellm::kernels {
namespace {

void load_row(DType t, const uint8_t* src, float* dst, int n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, sizeof(float) * n); return;
    case DType::F16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    default: quant::dequantize_row(t, src, dst, n); return;
  }
}

void paged_attention_ref(const PagedAttentionArgs& a) {
  float* k = a.scratch;
  float* v = k + a.head_dim_k;
  float* m = v + a.head_dim_v;  // running max per query head
  float* l = m + a.n_q;         // running sum of exp(score - m)
  for (int j = 0; j < a.n_q; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
    std::memset(a.out + j * a.out_stride, 0, sizeof(float) * a.head_dim_v);
  }
  for (int32_t p = a.pos_begin; p < a.pos_end; ++p) {
    const size_t page = static_cast<size_t>(a.pages[p / a.page_size]);
    const size_t slot = static_cast<size_t>(p % a.page_size);
    load_row(a.kv_type, a.k_base + page * a.page_stride + slot * a.k_row_bytes, k, a.head_dim_k);
    load_row(a.kv_type, a.v_base + page * a.page_stride + slot * a.v_row_bytes, v, a.head_dim_v);
    for (int j = 0; j < a.n_q; ++j) {
      const float* q = a.q + j * a.q_stride;
      float s = 0.0f;
      for (int i = 0; i < a.head_dim_k; ++i) s += q[i] * k[i];
      float* o = a.out + j * a.out_stride;
      if (s > m[j]) {
        const float c = std::exp(m[j] - s);  // 0 on the first key (m = -inf)
        for (int i = 0; i < a.head_dim_v; ++i) o[i] *= c;
        l[j] *= c;
        m[j] = s;
      }
      const float w = std::exp(s - m[j]);
      l[j] += w;
      for (int i = 0; i < a.head_dim_v; ++i) o[i] += w * v[i];
    }
  }
  for (int j = 0; j < a.n_q; ++j) {
    const float inv = l[j] > 0.0f ? 1.0f / l[j] : 0.0f;
    float* o = a.out + j * a.out_stride;
    for (int i = 0; i < a.head_dim_v; ++i) o[i] *= inv;
  }
}

}  // namespace

void fill_generic_attention(KernelTable& t) { t.paged_attention = paged_attention_ref; }

}  // namespace edgellm::kernels
