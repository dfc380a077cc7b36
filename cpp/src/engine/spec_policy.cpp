#include "engine/spec_policy.h"

#include <algorithm>
#include <cmath>

namespace edgellm {
namespace {
constexpr double kWeight = 0.1;     // weight of a new observation once a bucket has 10
constexpr double kMargin = 1.10;    // drafting must promise 10 % more throughput than not drafting
constexpr int kExact = 64;          // sizes up to this have a bucket each; above, 8 per doubling
}  // namespace

int StepCostModel::bucket(int32_t tokens) {
  tokens = std::max<int32_t>(1, std::min<int32_t>(tokens, kMaxTokens));
  if (tokens <= kExact) return tokens - 1;
  const double octaves = std::log2(static_cast<double>(tokens) / kExact);
  return kExact + static_cast<int>(octaves * 8.0);
}

int32_t StepCostModel::bucket_tokens(int b) {
  if (b < kExact) return b + 1;
  return static_cast<int32_t>(std::lround(kExact * std::exp2((b - kExact + 0.5) / 8.0)));
}

void StepCostModel::observe(int32_t tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
  const int b = bucket(tokens);
  if (static_cast<int>(mean_.size()) <= b) {
    mean_.resize(b + 1, 0.0);
    count_.resize(b + 1, 0);
  }
  const double w = std::max(kWeight, 1.0 / (count_[b] + 1));
  mean_[b] = count_[b] == 0 ? seconds : mean_[b] + w * (seconds - mean_[b]);
  ++count_[b];
  ++n_obs_;
}

int32_t StepCostModel::measured_below(int32_t tokens) const {
  for (int i = std::min<int>(bucket(tokens), static_cast<int>(count_.size()) - 1); i >= 0; --i)
    if (count_[i] > 0) return bucket_tokens(i);
  return 0;
}

double StepCostModel::estimate(int32_t tokens, bool optimistic) const {
  if (n_obs_ == 0) return 0.0;
  const int b = bucket(tokens);
  if (b < static_cast<int>(count_.size()) && count_[b] > 0) return mean_[b];
  int lo = -1, hi = -1;
  for (int i = std::min<int>(b, static_cast<int>(count_.size()) - 1); i >= 0; --i)
    if (count_[i] > 0) {
      lo = i;
      break;
    }
  for (int i = b + 1; i < static_cast<int>(count_.size()); ++i)
    if (count_[i] > 0) {
      hi = i;
      break;
    }
  if (lo < 0) return mean_[hi];  // below everything seen: a step costs at least nothing less
  // Optimism where nothing was measured: up to twice the nearest smaller measured size a step is
  // assumed to cost what that size costs (so the policy tries it and then knows); beyond, linear
  // towards the next measured size, or in the tokens when there is none.
  const double nl = bucket_tokens(lo), tl = mean_[lo];
  if (hi >= 0 && bucket_tokens(hi) <= 4.0 * nl) {  // measured close on both sides: interpolate
    const double nh = bucket_tokens(hi), th = mean_[hi];
    return tl + std::min(1.0, std::max(0.0, (tokens - nl) / (nh - nl))) * std::max(0.0, th - tl);
  }
  if (!optimistic) {
    if (hi < 0) return tl * tokens / nl;
    const double nh = bucket_tokens(hi), th = mean_[hi];
    return std::min(tl * tokens / nl, tl + (tokens - nl) / (nh - nl) * std::max(0.0, th - tl));
  }
  if (tokens <= 2.0 * nl) return tl;
  if (hi < 0) return tl * tokens / (2.0 * nl);
  const double nh = bucket_tokens(hi), th = mean_[hi];
  const double f = std::min(1.0, std::max(0.0, (tokens - 2.0 * nl) / (nh - 2.0 * nl)));
  return tl + f * std::max(0.0, th - tl);
}

double expected_tokens(double alpha, int32_t k) {
  if (k <= 0) return 1.0;
  alpha = std::min(std::max(alpha, 0.0), 0.999999);
  return 1.0 + alpha * (1.0 - std::pow(alpha, k)) / (1.0 - alpha);
}

SpecChoice choose_draft_length(const StepCostModel& cost, int32_t batch_tokens, double alpha, int32_t k_max,
                               double draft_seconds_per_token, double draft_fixed_seconds, bool explore) {
  SpecChoice best;
  if (k_max <= 0) return best;
  const int32_t b = std::max<int32_t>(1, batch_tokens);
  const double t0 = cost.estimate(b);
  if (!(t0 > 0.0)) {  // nothing measured yet: draft a little to learn
    best.k = std::min<int32_t>(k_max, 2);
    return best;
  }
  const double base = b / t0;  // tokens per second without this sequence's drafts
  // The other B - 1 sequences yield one token each; this one yields E_k.
  const int32_t known = cost.measured_below(b + k_max);
  for (int32_t k = 1; k <= k_max; ++k) {
    const double t = cost.estimate(b + k, explore) + draft_seconds_per_token * k + draft_fixed_seconds;
    const double rate = (b - 1 + expected_tokens(alpha, k)) / std::max(t, 1e-9);
    const double g = rate / base;
    if (g > best.gain) {
      best.gain = g;
      best.k = k;
      best.explores = b + k > known;
    }
  }
  if (best.gain < kMargin) best = SpecChoice{};
  return best;
}

namespace {
float prob_of(const std::vector<TokenProb>& v, int32_t id) {
  auto it = std::lower_bound(v.begin(), v.end(), id, [](const TokenProb& a, int32_t b) { return a.id < b; });
  return it != v.end() && it->id == id ? it->p : 0.0f;
}
}  // namespace

int32_t speculative_pick(const std::vector<TokenProb>& p, int32_t d, const std::vector<TokenProb>& q, Sampler& rng) {
  const double pd = prob_of(p, d), qd = prob_of(q, d);
  const double u = rng.uniform();
  if (qd > 0.0 && u * qd < pd) return d;
  std::vector<TokenProb> residual;
  residual.reserve(p.size());
  double mass = 0.0;
  size_t j = 0;
  for (const TokenProb& x : p) {
    while (j < q.size() && q[j].id < x.id) ++j;
    const float qx = j < q.size() && q[j].id == x.id ? q[j].p : 0.0f;
    const float r = x.p - qx;
    if (r > 0.0f) {
      residual.push_back({x.id, r});
      mass += r;
    }
  }
  if (!(mass > 0.0)) return rng.draw_from(p);
  return rng.draw_from(residual);
}

}  // namespace edgellm
