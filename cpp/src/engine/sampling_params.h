// Per-request sampling parameters. Defaults follow llama.cpp's common_params_sampling, so a
// user moving from llama.cpp gets the same behaviour.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/constraint.h"

namespace edgellm {

struct SamplingParams {
  int32_t max_tokens = 128;          // < 0: until end-of-generation or the context is full
  int32_t min_tokens = 0;            // EOG and stop tokens are masked until this many were generated
  float temperature = 0.8f;          // <= 0: greedy (argmax after bias and penalties)
  int32_t top_k = 40;                // <= 0: off
  float top_p = 0.95f;               // >= 1: off
  float min_p = 0.05f;               // <= 0: off
  float typical_p = 1.0f;            // >= 1: off
  float repetition_penalty = 1.0f;   // 1: off
  int32_t repeat_last_n = 64;        // penalty window over prompt + generated tokens; -1: all, 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool has_seed = false;             // false: a random seed is drawn
  uint64_t seed = 0;
  std::vector<std::string> stop;     // stop strings, matched on the detokenized text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;           // EOG tokens are masked
  int32_t logprobs = -1;             // >= 0: per generated token, its log-prob and the top-n
  int32_t prompt_logprobs = -1;      // >= 0: the same for every prompt token after the first
  int32_t n = 1;                     // completions of one prompt (sharing the prompt's KV pages)
  bool return_progress = false;      // streaming only: prompt-progress events while the prompt is prefilled
  // Context shift (EngineConfig::context_shift): tokens kept at the start when the context is
  // full, counted after a BOS the model adds (llama-server's n_keep); -1: the whole prompt.
  int32_t n_keep = 0;
  int32_t n_discard = 0;             // tokens dropped per shift (after the kept ones); 0: half of them
  ConstraintSpec constraint;

  // Throws InvalidRequestError naming the parameter at fault.
  void validate(int32_t n_vocab) const;
};

}  // namespace edgellm
