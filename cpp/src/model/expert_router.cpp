#include "model/expert_router.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/thread_pool.h"

namespace edgellm {

void ExpertRouting::reserve(int max_tokens, int n_exp, int top_k) {
  const size_t pairs = static_cast<size_t>(max_tokens) * top_k;
  expert.reserve(pairs);
  weight.reserve(pairs);
  row.reserve(pairs);
  token_of.reserve(pairs);
  offset.reserve(n_exp + 1);
  cursor.reserve(n_exp);
  active.reserve(n_exp);
}

size_t ExpertRouting::reserve_bytes(int max_tokens, int n_exp, int top_k) {
  const size_t pairs = static_cast<size_t>(max_tokens) * top_k;
  return pairs * (3 * sizeof(int32_t) + sizeof(float)) + (3 * static_cast<size_t>(n_exp) + 1) * sizeof(int32_t);
}

namespace {

// x = softmax(x), in place: a token's router logits, or (gpt-oss) its k selected ones.
void softmax(float* x, int n) {
  float mx = x[0];
  for (int e = 1; e < n; ++e) mx = std::max(mx, x[e]);
  double sum = 0;
  for (int e = 0; e < n; ++e) {
    x[e] = std::exp(x[e] - mx);
    sum += x[e];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = 0; e < n; ++e) x[e] *= inv;
}

// p = probabilities of one token's logits, in place.
// SoftmaxWeight leaves the logits as they are (the top-k is taken on them, then softmaxed).
void probabilities(ExpertGating g, float* p, int n) {
  if (g == ExpertGating::SoftmaxWeight) return;
  if (g == ExpertGating::Sigmoid) {
    for (int e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    return;
  }
  softmax(p, n);
}

}  // namespace

void route_tokens(const ModelConfig& c, float* logits, int n_tokens, ThreadPool& pool, ExpertRouting& r) {
  const int E = c.n_expert, k = c.n_expert_used;
  if (E <= 0 || k <= 0 || k > E) throw std::logic_error("route_tokens: not a mixture-of-experts config");
  r.n_tokens = n_tokens;
  r.k = k;
  r.n_expert = E;
  const size_t pairs = static_cast<size_t>(n_tokens) * k;
  r.expert.resize(pairs);
  r.weight.resize(pairs);
  r.row.resize(pairs);
  r.token_of.resize(pairs);
  r.offset.assign(E + 1, 0);
  r.active.clear();

  pool.parallel_for(0, n_tokens, [&](int64_t t, int) {
    float* p = logits + t * E;
    probabilities(c.expert_gating, p, E);
    int32_t* sel = r.expert.data() + t * k;
    float* wt = r.weight.data() + t * k;
    // Top-k by insertion into a sorted run of k (k is small): higher probability first, the
    // lower expert id first among equals.
    int n = 0;
    for (int e = 0; e < E; ++e) {
      const float v = p[e];
      if (n == k && !(v > wt[k - 1])) continue;
      int i = n < k ? n++ : k - 1;
      while (i > 0 && v > wt[i - 1]) {
        wt[i] = wt[i - 1];
        sel[i] = sel[i - 1];
        --i;
      }
      wt[i] = v;
      sel[i] = e;
    }
    if (c.expert_gating == ExpertGating::SoftmaxWeight) softmax(wt, k);
    if (c.expert_weights_norm) {
      float sum = 0;
      for (int j = 0; j < k; ++j) sum += wt[j];
      if (sum > 0)
        for (int j = 0; j < k; ++j) wt[j] /= sum;
    }
    if (c.expert_weights_scale > 0.0f)
      for (int j = 0; j < k; ++j) wt[j] *= c.expert_weights_scale;
  });

  // Group by expert: a counting sort, tokens in order within each expert.
  for (size_t i = 0; i < pairs; ++i) ++r.offset[r.expert[i] + 1];
  for (int e = 0; e < E; ++e) {
    if (r.offset[e + 1] > 0) r.active.push_back(e);
    r.offset[e + 1] += r.offset[e];
  }
  r.cursor.assign(r.offset.begin(), r.offset.end() - 1);
  for (size_t i = 0; i < pairs; ++i) {
    const int32_t rr = r.cursor[r.expert[i]]++;
    r.row[i] = rr;
    r.token_of[rr] = static_cast<int32_t>(i / k);
  }
}

}  // namespace edgellm
