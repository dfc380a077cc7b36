// Per-sequence token sampler. The chain runs in a fixed order (llama.cpp's; docs/ENGINE.md):
//
//   logit_bias → masks (EOG before min_tokens / with ignore_eos, stop tokens before min_tokens)
//   → penalties (repetition, frequency, presence over the last repeat_last_n tokens, prompt included)
//   → [log-probs are read here] → the candidate steps (sampler.cpp's `truncated` and what follows
//   it, in llama.cpp's order: top_k, typical_p, top_p, min_p, ...) → temperature → draw
//
// temperature <= 0 takes the argmax right after the penalties unless a candidate step needs the
// candidates. The candidate steps see untempered logits.
// The draw uses a std::mt19937 owned by the sequence, so a seeded request produces the same tokens
// whatever else shares its batch. Log-probs describe the model's distribution after bias and
// penalties, before truncation and temperature (llama.cpp's n_probs, OpenAI's logprobs).
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace edgellm {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

// A token with its logit; the working set of the truncation steps.
struct Candidate {
  int32_t id;
  float logit;
};

// A token with its probability under the distribution a draw uses.
struct TokenProb {
  int32_t id;
  float p;
};

class Sampler {
 public:
  // `eog` lists the model's end-of-generation tokens (masked under min_tokens / ignore_eos).
  Sampler(const SamplingParams& params, std::vector<int32_t> eog, uint64_t seed);

  // Chooses the next token from one row of logits (modified in place: bias, masks, penalties).
  // `history` is prompt + generated tokens so far, `n_generated` how many of them were generated.
  // When `lp` is given and params.logprobs >= 0 it receives the chosen token's log-prob and the top.
  // Throws InvalidRequestError when every token is masked.
  int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated,
                 TokenLogprob* lp = nullptr);

  // Speculative decoding: the distribution sample() would draw from for this row (the same chain:
  // bias, masks, penalties, truncation, temperature), as (token, probability) pairs sorted by
  // token id; temperature <= 0 gives the argmax with probability 1. Modifies `logits` like
  // sample() and draws nothing. Throws InvalidRequestError when every token is masked.
  void distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated,
                    std::vector<TokenProb>& out) const;
  // One draw from `p` (weights need not sum to 1) and one uniform in [0, 1), from this
  // sequence's generator: the speculative sampling rule's accept test and residual draw.
  int32_t draw_from(const std::vector<TokenProb>& p);
  double uniform();

  const SamplingParams& params() const { return params_; }

  // ---- the chain's steps, public for tests ----
  static void apply_penalties(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t last_n,
                              float repeat, float frequency, float presence);
  static void top_k(std::vector<Candidate>& c, int32_t k);
  static void typical(std::vector<Candidate>& c, float p);
  static void top_p(std::vector<Candidate>& c, float p);
  static void min_p(std::vector<Candidate>& c, float p);
  static int32_t argmax(const float* logits, int32_t n_vocab);
  // log-softmax of a full row: the token's log-prob and the top n.
  static TokenLogprob logprobs_of(const float* logits, int32_t n_vocab, int32_t token, int32_t n_top);

 private:
  int32_t draw(std::vector<Candidate>& c);
  // logit_bias, the EOG / stop-token masks and the penalties, in place.
  void prepare(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated) const;
  // The candidates after the candidate steps (untempered logits; temperature > 0 or a step that
  // needs the candidates).
  void truncated(const float* logits, int32_t n_vocab, std::vector<Candidate>& c) const;
  SamplingParams params_;
  std::vector<int32_t> eog_;
  std::mt19937 rng_;
};

}  // namespace edgellm
