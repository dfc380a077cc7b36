// Routing a batch's tokens to the experts of a mixture-of-experts layer (docs/formats.md §4.8):
// each token's router logits become probabilities (softmax, or sigmoid where the file says),
// its top-k experts are chosen (ties to the lower expert id), their probabilities are its gate
// weights (gpt-oss, ExpertGating::SoftmaxWeight: the top-k of the raw logits, their softmax),
// renormalised to sum 1 when the architecture says (expert_weights_norm) and scaled by
// expert_weights_scale when set. The (token, slot) pairs are then grouped by expert, so that a
// forward pass reads each selected expert's weights once for all the tokens routed to it.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace edgellm {

class ThreadPool;

struct ExpertRouting {
  int n_tokens = 0, k = 0, n_expert = 0;
  // Per token t and slot j < k (rank order, best first), at t * k + j:
  std::vector<int32_t> expert;  // the chosen expert
  std::vector<float> weight;    // its gate weight
  std::vector<int32_t> row;     // the pair's row in the grouped order below
  // Grouped by expert: rows [offset[e], offset[e + 1]) are the pairs routed to expert e, in
  // token order; token_of[r] is row r's token.
  std::vector<int32_t> offset;   // n_expert + 1
  std::vector<int32_t> token_of; // n_tokens * k
  std::vector<int32_t> active;   // experts with at least one row, ascending
  std::vector<int32_t> cursor;   // grouping scratch (n_expert)

  // Capacity for max_tokens tokens (a forward pass then allocates nothing).
  void reserve(int max_tokens, int n_expert, int k);
  static size_t reserve_bytes(int max_tokens, int n_expert, int k);
};

// Routes n_tokens tokens from their router logits [n_tokens][c.n_expert] (overwritten with the
// probabilities). Per-token work runs on `pool`; the result depends only on each token's logits.
void route_tokens(const ModelConfig& c, float* logits, int n_tokens, ThreadPool& pool, ExpertRouting& r);

}  // namespace edgellm
