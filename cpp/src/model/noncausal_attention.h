// Non-causal (bidirectional) multi-head attention over spans of rows: the one attention of the
// encoders (model/encoder.cpp: each sequence of a batch a span) and of the vision towers
// (model/vision/: the image's patches one span, Qwen2.5-VL's windows a group mask). Every query
// of a span attends to every key of the same span (with `group`, only to those of its own group).
//
// One task per (span, head): K_h is copied to contiguous rows and V_h transposed, then per block of
// kQueryBlock queries two F32 matmuls of the active kernel table (the outer-product GEMM from 24
// columns, kernels/matmul_float.inc.h; the dot-product tile below): scores = K_h · q, the softmax
// per query, out = V_hᵀ · p, written in place into `out`.
#pragma once
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"

namespace edgellm {

struct AttentionSpan {
  int64_t begin, n;  // rows [begin, begin + n)
};

struct NoncausalAttention {
  const float* q;  // row t at q + t · ldq: n_head heads of head_dim_k
  int64_t ldq;
  const float* k;  // n_head_kv heads of head_dim_k (a query head h reads K/V head h / (n_head / n_head_kv))
  int64_t ldk;
  const float* v;  // n_head_kv heads of head_dim_v
  int64_t ldv;
  float* out;  // n_head heads of head_dim_v
  int64_t ldo;
  int n_head, n_head_kv, head_dim_k, head_dim_v;
  float scale;                     // on the scores before the softmax (1 / sqrt(head_dim_k) as a rule)
  const int32_t* group = nullptr;  // optional, by row: a query sees only keys with its group
};

// Per-thread buffers, grown on demand and reused from call to call.
class AttentionScratch {
 public:
  void reserve(int threads, int64_t floats);  // room for `floats` on each of `threads` threads
  float* thread_buffer(int thread) { return buf_.data() + static_cast<size_t>(thread) * per_thread_; }

 private:
  std::vector<float> buf_;
  int64_t per_thread_ = 0;
};

// The floats a thread needs for a span of n rows.
int64_t attention_scratch_floats(const NoncausalAttention& a, int64_t n);

void noncausal_attention(ThreadPool& pool, const NoncausalAttention& a, const std::vector<AttentionSpan>& spans,
                         AttentionScratch& scratch);

}  // namespace edgellm
