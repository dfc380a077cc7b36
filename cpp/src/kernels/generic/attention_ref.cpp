// Scalar reference of paged attention: one pass over the keys with an online softmax per query
// (running max m, running sum l, output rescaled whenever the max grows), accumulating in f32;
// scores soft-capped first when the args ask for it; attention sinks folded into each query's
// denominator at the end (attention_output_scale).
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

// Keys are visited in position order, each read and converted once for the whole block; every
// query (token j, head h) keeps its own online-softmax state, so a token's result never depends
// on the block around it (exact_rows holds as is).
void paged_attention_ref(const PagedAttentionArgs& a) {
  const int nq = a.n_tokens * a.n_q;
  float* k = a.scratch;
  float* v = k + a.head_dim_k;
  float* m = v + a.head_dim_v;  // running max per query
  float* l = m + nq;            // running sum of exp(score - m) per query
  auto out_row = [&](int j, int h) { return a.out + j * a.out_token_stride + h * a.out_head_stride; };
  for (int j = 0; j < a.n_tokens; ++j)
    for (int h = 0; h < a.n_q; ++h) {
      m[j * a.n_q + h] = -INFINITY;
      l[j * a.n_q + h] = 0.0f;
      std::memset(out_row(j, h), 0, sizeof(float) * a.head_dim_v);
    }
  const int32_t last = a.q_pos0 + a.n_tokens - 1;
  const int32_t first = attention_first_key(a.window, a.q_pos0);
  for (int32_t p = first; p <= last; ++p) {
    const size_t page = static_cast<size_t>(a.pages[p / a.page_size]);
    const size_t slot = static_cast<size_t>(p % a.page_size);
    load_row(a.kv_type, a.k_base + page * a.page_stride + slot * a.k_row_bytes, k, a.head_dim_k);
    load_row(a.kv_type, a.v_base + page * a.page_stride + slot * a.v_row_bytes, v, a.head_dim_v);
    for (int j = 0; j < a.n_tokens; ++j) {
      const int32_t pos = a.q_pos0 + j;
      if (p > pos || (a.window > 0 && pos - p >= a.window)) continue;  // causal / outside the window
      for (int h = 0; h < a.n_q; ++h) {
        const float* q = a.q + j * a.q_token_stride + h * a.q_head_stride;
        float s = 0.0f;
        for (int i = 0; i < a.head_dim_k; ++i) s += q[i] * k[i];
        if (a.softcap > 0.0f) s = a.softcap * std::tanh(s / a.softcap);
        float* o = out_row(j, h);
        float& mq = m[j * a.n_q + h];
        float& lq = l[j * a.n_q + h];
        if (s > mq) {
          const float c = std::exp(mq - s);  // 0 on the first key (m = -inf)
          for (int i = 0; i < a.head_dim_v; ++i) o[i] *= c;
          lq *= c;
          mq = s;
        }
        const float w = std::exp(s - mq);
        lq += w;
        for (int i = 0; i < a.head_dim_v; ++i) o[i] += w * v[i];
      }
    }
  }
  for (int j = 0; j < a.n_tokens; ++j)
    for (int h = 0; h < a.n_q; ++h) {
      const float inv = attention_output_scale(m[j * a.n_q + h], l[j * a.n_q + h], a.sinks, h);
      float* o = out_row(j, h);
      for (int i = 0; i < a.head_dim_v; ++i) o[i] *= inv;
    }
}

}  // namespace

void fill_generic_attention(KernelTable& t) { t.paged_attention = paged_attention_ref; }

}  // namespace edgellm::kernels
