#include "model/noncausal_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace edgellm {
namespace {
// Queries whose scores a task holds at once (a block's scores: kQueryBlock × the span).
constexpr int64_t kQueryBlock = 128;
}  // namespace

int64_t attention_scratch_floats(const NoncausalAttention& a, int64_t n) {
  return (a.head_dim_k + a.head_dim_v + kQueryBlock) * n;
}

void AttentionScratch::reserve(int threads, int64_t floats) {
  if (floats <= per_thread_ && buf_.size() >= static_cast<size_t>(threads) * per_thread_) return;
  per_thread_ = std::max(per_thread_, floats);
  buf_.resize(static_cast<size_t>(threads) * per_thread_);
}

void noncausal_attention(ThreadPool& pool, const NoncausalAttention& a, const std::vector<AttentionSpan>& spans,
                         AttentionScratch& scratch) {
  int64_t longest = 0;
  for (const AttentionSpan& s : spans) longest = std::max(longest, s.n);
  if (longest == 0) return;
  scratch.reserve(pool.size(), attention_scratch_floats(a, longest));
  const int group = a.n_head / a.n_head_kv, hdk = a.head_dim_k, hdv = a.head_dim_v;
  const kernels::KernelTable& kt = kernels::active();
  const int f32 = static_cast<int>(DType::F32);
  const kernels::MatmulFn mm = kt.matmul_wide[f32] ? kt.matmul_wide[f32] : kt.matmul[f32];
  const int64_t n_tasks = static_cast<int64_t>(spans.size()) * a.n_head;
  pool.run(n_tasks, [&](int64_t task, int thread) {
    const AttentionSpan& s = spans[static_cast<size_t>(task / a.n_head)];
    if (s.n == 0) return;
    const int h = static_cast<int>(task % a.n_head), hk = h / group;
    float* kc = scratch.thread_buffer(thread);  // [s.n][hdk]
    float* vt = kc + static_cast<size_t>(hdk) * s.n;                              // [hdv][s.n]
    float* sc = vt + static_cast<size_t>(hdv) * s.n;                              // [block][s.n]
    for (int64_t j = 0; j < s.n; ++j) {
      const float* kj = a.k + (s.begin + j) * a.ldk + hk * hdk;
      std::copy(kj, kj + hdk, kc + j * hdk);
      const float* vj = a.v + (s.begin + j) * a.ldv + hk * hdv;
      for (int e = 0; e < hdv; ++e) vt[e * s.n + j] = vj[e];
    }
    for (int64_t i0 = 0; i0 < s.n; i0 += kQueryBlock) {
      const int64_t nb = std::min(kQueryBlock, s.n - i0);
      kernels::MatmulArgs qk{kc, hdk, 0, s.n, a.q + (s.begin + i0) * a.ldq + h * hdk,
                             static_cast<size_t>(a.ldq) * sizeof(float), nb, sc, s.n};
      mm(qk);
      for (int64_t i = 0; i < nb; ++i) {
        float* row = sc + i * s.n;
        for (int64_t j = 0; j < s.n; ++j) row[j] *= a.scale;
        if (a.group) {
          const int32_t gq = a.group[s.begin + i0 + i];
          for (int64_t j = 0; j < s.n; ++j)
            if (a.group[s.begin + j] != gq) row[j] = -INFINITY;
        }
        kt.softmax(row, s.n);
      }
      kernels::MatmulArgs pv{vt, s.n, 0, hdv, sc, static_cast<size_t>(s.n) * sizeof(float), nb,
                             a.out + (s.begin + i0) * a.ldo + h * hdv, a.ldo};
      mm(pv);
    }
  });
}

}  // namespace edgellm
