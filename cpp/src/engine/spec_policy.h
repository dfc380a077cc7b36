// How many tokens to draft (issue 18, item 4): drafting pays only when the tokens it is expected
// to add outweigh what verifying (and drafting) them costs, and both sides are measured here.
//
// Cost: a step's time as a function of the tokens in its batch, learnt from the engine's own
// steps (an average per batch size, recent steps weighted more). On a CPU a decode step streams
// every weight once, so a few more tokens are almost free until the matmuls turn compute-bound;
// how soon that happens depends on the model, the kernels and the machine, hence measured. Sizes
// never measured are interpolated between measured neighbours when those are close (within 4x),
// else estimated optimistically: as cheap as the nearest smaller measured size up to twice that
// size, rising linearly beyond (towards the next measured size, or in the tokens), so the policy
// tries a larger size once and from then on knows what it costs.
//
// Gain: with per-token acceptance alpha (SpecAcceptance) and k drafted tokens, a verify step
// yields 1 + alpha (1 - alpha^k) / (1 - alpha) tokens on average. For a batch of B decoding
// sequences the policy compares tokens per second with and without this sequence's k drafts,
//
//     (B + E_k) / (t(B + k) + d(k))   against   B / t(B),
//
// d(k) being the draft model's time for k tokens (0 for n-gram lookup; plus what it costs the
// draft to read the tokens it has not seen yet), picks the best k, and
// drafts only when it beats not drafting by kMargin (10 %: a decode step of 2 tokens costs ~15 %
// more than one of 1 here, and acceptance estimates are noisy). Many streams make t(B + k) - t(B) large
// (compute-bound), free prose makes alpha small: both drive k to 0.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sampler.h"

namespace edgellm {

class StepCostModel {
 public:
  static constexpr int kMaxTokens = 1 << 16;
  // One step of `tokens` batch tokens took `seconds`.
  void observe(int32_t tokens, double seconds);
  // Estimated seconds of a step of `tokens` tokens; 0 before anything was observed. `optimistic`:
  // sizes beyond the measured ones cost what the nearest smaller measured size costs up to
  // twice that size (to try them); otherwise they are extrapolated in proportion to the tokens.
  double estimate(int32_t tokens, bool optimistic = true) const;
  // The largest size measured at or below `tokens` (0 when none).
  int32_t measured_below(int32_t tokens) const;
  bool empty() const { return n_obs_ == 0; }

 private:
  static int bucket(int32_t tokens);
  static int32_t bucket_tokens(int b);  // a representative size of bucket b
  std::vector<double> mean_;            // per bucket; 0 = never seen
  std::vector<int32_t> count_;
  int64_t n_obs_ = 0;
};

struct SpecChoice {
  int32_t k = 0;
  double gain = 1.0;  // expected throughput ratio against not drafting
  bool explores = false;  // the chosen size relies on an optimistic (unmeasured) cost
};

// Expected tokens a verify step yields with k drafts at per-token acceptance alpha (bonus included).
double expected_tokens(double alpha, int32_t k);

// The k in [0, k_max] that maximises the batch's expected throughput (see above). `batch_tokens`:
// tokens the step has without this sequence's drafts (B); `draft_seconds_per_token`: d(k) / k;
// `draft_fixed_seconds`: paid once before any drafted token (the draft model's catch-up).
// `explore`: whether sizes not measured yet may be assumed cheap (the engine lets one sequence
// per step explore, so a batch of many streams never bets all its sequences on a guess).
SpecChoice choose_draft_length(const StepCostModel& cost, int32_t batch_tokens, double alpha, int32_t k_max,
                               double draft_seconds_per_token, double draft_fixed_seconds = 0.0,
                               bool explore = true);

// The speculative sampling rule for one drafted token d drawn from q: accept it with probability
// min(1, p(d) / q(d)), else draw from the residual max(0, p - q) normalised (from p when the
// residual is empty). p and q are sorted by token id (Sampler::distribution). The token returned
// is distributed as p whatever q is. Draws from `rng`'s generator.
int32_t speculative_pick(const std::vector<TokenProb>& p, int32_t d, const std::vector<TokenProb>& q, Sampler& rng);

}  // namespace edgellm
