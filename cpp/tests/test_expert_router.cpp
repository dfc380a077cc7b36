// route_tokens: top-k by probability with ties to the lower expert id, softmax, sigmoid and
// gpt-oss's top-k softmax gating, renormalisation and scaling of the gate weights, and the grouping by expert (every
// (token, slot) pair in exactly one row of its expert's group, tokens in order there).
#include <cmath>
#include <vector>

#include "common/thread_pool.h"
#include "model/expert_router.h"
#include "test_util.h"

using namespace edgellm;

namespace {

ModelConfig moe_config(int n_expert, int k, bool norm, ExpertGating g = ExpertGating::Softmax, float scale = 0) {
  ModelConfig c;
  c.n_expert = n_expert;
  c.n_expert_used = k;
  c.expert_weights_norm = norm;
  c.expert_gating = g;
  c.expert_weights_scale = scale;
  return c;
}

void top_k_and_weights(ThreadPool& pool) {
  // token 0: experts 2 > 0 > 3 > 1; token 1: a tie between 1 and 3 (the lower id first)
  std::vector<float> logits = {1.0f, -2.0f, 3.0f, 0.5f, 0.0f, 2.0f, 0.0f, 2.0f};
  const ModelConfig c = moe_config(4, 2, false);
  ExpertRouting r;
  r.reserve(2, 4, 2);
  std::vector<float> copy = logits;
  route_tokens(c, copy.data(), 2, pool, r);
  CHECK(r.expert[0] == 2 && r.expert[1] == 0);
  CHECK(r.expert[2] == 1 && r.expert[3] == 3);
  double z = std::exp(1.0) + std::exp(-2.0) + std::exp(3.0) + std::exp(0.5);
  CHECK_NEAR(r.weight[0], std::exp(3.0) / z, 1e-6);
  CHECK_NEAR(r.weight[1], std::exp(1.0) / z, 1e-6);
  // renormalised: a softmax over the two selected logits
  copy = logits;
  route_tokens(moe_config(4, 2, true), copy.data(), 2, pool, r);
  CHECK_NEAR(r.weight[0], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  CHECK_NEAR(r.weight[2] + r.weight[3], 1.0, 1e-6);
  // sigmoid gating, scaled
  copy = logits;
  route_tokens(moe_config(4, 2, false, ExpertGating::Sigmoid, 2.5f), copy.data(), 2, pool, r);
  CHECK(r.expert[0] == 2 && r.expert[1] == 0);
  CHECK_NEAR(r.weight[0], 2.5 / (1.0 + std::exp(-3.0)), 1e-6);
  // gpt-oss (SoftmaxWeight): the top-k of the raw logits, then a softmax over those k; negative
  // logits rank as they are
  std::vector<float> raw = {-1.0f, -4.0f, -0.5f, -3.0f, 0.25f, 0.25f, -9.0f, 1.0f};
  route_tokens(moe_config(4, 3, false, ExpertGating::SoftmaxWeight), raw.data(), 2, pool, r);
  CHECK(r.expert[0] == 2 && r.expert[1] == 0 && r.expert[2] == 3);
  CHECK(r.expert[3] == 3 && r.expert[4] == 0 && r.expert[5] == 1);  // tie 0 / 1: the lower id first
  const double z0 = std::exp(-0.5) + std::exp(-1.0) + std::exp(-3.0);
  CHECK_NEAR(r.weight[0], std::exp(-0.5) / z0, 1e-6);
  CHECK_NEAR(r.weight[2], std::exp(-3.0) / z0, 1e-6);
  const double z1 = std::exp(1.0) + 2 * std::exp(0.25);
  CHECK_NEAR(r.weight[3], std::exp(1.0) / z1, 1e-6);
  CHECK_NEAR(r.weight[4], std::exp(0.25) / z1, 1e-6);
  CHECK_NEAR(r.weight[4], r.weight[5], 1e-7);
  // scaled after the softmax
  raw = {-1.0f, -4.0f, -0.5f, -3.0f, 0.25f, 0.25f, -9.0f, 1.0f};
  route_tokens(moe_config(4, 3, false, ExpertGating::SoftmaxWeight, 2.0f), raw.data(), 2, pool, r);
  CHECK_NEAR(r.weight[0], 2.0 * std::exp(-0.5) / z0, 1e-6);
}

void grouping(ThreadPool& pool) {
  const int T = 37, E = 16, k = 3;
  std::vector<float> logits(T * E);
  for (int i = 0; i < T * E; ++i) logits[i] = std::sin(0.37f * i) * 3.0f;
  ExpertRouting r;
  r.reserve(T, E, k);
  route_tokens(moe_config(E, k, true), logits.data(), T, pool, r);
  CHECK(r.offset.front() == 0 && r.offset.back() == T * k);
  std::vector<int> seen(T * k, 0);
  bool ok = true;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = r.expert[t * k + j], row = r.row[t * k + j];
      ok &= row >= r.offset[e] && row < r.offset[e + 1] && r.token_of[row] == t;
      ++seen[row];
      for (int i = 0; i < j; ++i) ok &= r.expert[t * k + i] != e;          // distinct experts
      if (j > 0) ok &= r.weight[t * k + j] <= r.weight[t * k + j - 1];     // rank order
    }
  CHECK(ok);
  bool once = true;
  for (int v : seen) once &= v == 1;
  CHECK(once);
  bool ordered = true;
  for (int e = 0; e < E; ++e)
    for (int row = r.offset[e] + 1; row < r.offset[e + 1]; ++row) ordered &= r.token_of[row] > r.token_of[row - 1];
  CHECK(ordered);
  int active = 0;
  for (int e = 0; e < E; ++e) active += r.offset[e + 1] > r.offset[e];
  CHECK(static_cast<int>(r.active.size()) == active && active >= 8);
}

}  // namespace

int main() {
  ThreadPool pool(3);
  top_k_and_weights(pool);
  grouping(pool);
  return test_util::report();
}
