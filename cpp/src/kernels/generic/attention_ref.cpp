// Scalar reference of paged attention: for each query token and head, one pass over its keys
// with an online softmax (running max m, running sum l, output rescaled whenever the max
// grows), accumulating in f32.
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

void attend_one_token(const PagedAttentionArgs& a, int j) {
  float* k = a.scratch;
  float* v = k + a.head_dim_k;
  float* m = v + a.head_dim_v;  // running max per query head
  float* l = m + a.n_q;         // running sum of exp(score - m)
  const float* q0 = a.q + j * a.q_token_stride;
  float* out0 = a.out + j * a.out_token_stride;
  const int32_t pos = a.q_pos0 + j;
  const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  for (int h = 0; h < a.n_q; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    std::memset(out0 + h * a.out_head_stride, 0, sizeof(float) * a.head_dim_v);
  }
  for (int32_t p = lo; p <= pos; ++p) {
    const size_t page = static_cast<size_t>(a.pages[p / a.page_size]);
    const size_t slot = static_cast<size_t>(p % a.page_size);
    load_row(a.kv_type, a.k_base + page * a.page_stride + slot * a.k_row_bytes, k, a.head_dim_k);
    load_row(a.kv_type, a.v_base + page * a.page_stride + slot * a.v_row_bytes, v, a.head_dim_v);
    for (int h = 0; h < a.n_q; ++h) {
      const float* q = q0 + h * a.q_head_stride;
      float s = 0.0f;
      for (int i = 0; i < a.head_dim_k; ++i) s += q[i] * k[i];
      float* o = out0 + h * a.out_head_stride;
      if (s > m[h]) {
        const float c = std::exp(m[h] - s);  // 0 on the first key (m = -inf)
        for (int i = 0; i < a.head_dim_v; ++i) o[i] *= c;
        l[h] *= c;
        m[h] = s;
      }
      const float w = std::exp(s - m[h]);
      l[h] += w;
      for (int i = 0; i < a.head_dim_v; ++i) o[i] += w * v[i];
    }
  }
  for (int h = 0; h < a.n_q; ++h) {
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    float* o = out0 + h * a.out_head_stride;
    for (int i = 0; i < a.head_dim_v; ++i) o[i] *= inv;
  }
}

void paged_attention_ref(const PagedAttentionArgs& a) {
  for (int j = 0; j < a.n_tokens; ++j) attend_one_token(a, j);
}

}  // namespace

void fill_generic_attention(KernelTable& t) { t.paged_attention = paged_attention_ref; }

}  // namespace edgellm::kernels
