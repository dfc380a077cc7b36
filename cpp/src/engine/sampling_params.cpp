#include "engine/sampling_params.h"

#include <cmath>
#include <string>

#include "common/errors.h"

namespace edgellm {
namespace {
[[noreturn]] void bad(const std::string& what) { throw InvalidRequestError(what); }
bool finite(float x) { return std::isfinite(x); }
}  // namespace

void SamplingParams::validate(int32_t n_vocab) const {
  // The ranges are edgellm.validation's (README "Parameter rules"), which Python applies first.
  if (!finite(temperature) || temperature < 0.0f) bad("temperature must be >= 0, got " + std::to_string(temperature));
  if (!finite(top_p) || top_p < 0.0f || top_p > 1.0f) bad("top_p must be in [0, 1], got " + std::to_string(top_p));
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f) bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!finite(typical_p) || typical_p <= 0.0f || typical_p > 1.0f)
    bad("typical_p must be in (0, 1], got " + std::to_string(typical_p));
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f)
    bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (repeat_last_n < -1) bad("repeat_last_n must be >= -1, got " + std::to_string(repeat_last_n));
  if (!finite(presence_penalty)) bad("presence_penalty must be finite");
  if (!finite(frequency_penalty)) bad("frequency_penalty must be finite");
  if (min_tokens < 0) bad("min_tokens must be >= 0, got " + std::to_string(min_tokens));
  if (max_tokens == 0) bad("max_tokens must be >= 1 (or None), got 0");
  if (max_tokens >= 0 && min_tokens > max_tokens)
    bad("min_tokens " + std::to_string(min_tokens) + " exceeds max_tokens " + std::to_string(max_tokens));
  if (n_keep < -1) bad("n_keep must be >= -1 (-1: the whole prompt), got " + std::to_string(n_keep));
  if (n_discard < 0) bad("n_discard must be >= 0 (0: half), got " + std::to_string(n_discard));
  if (n < 1 || n > 64) bad("n must be in 1..64, got " + std::to_string(n));
  if (logprobs > 20 || prompt_logprobs > 20) bad("logprobs / prompt_logprobs must be at most 20");
  for (const auto& b : logit_bias) {
    if (b.first < 0 || b.first >= n_vocab)
      bad("logit_bias token id " + std::to_string(b.first) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    if (std::isnan(b.second) || (std::isinf(b.second) && b.second > 0))  // -inf bans the token
      bad("logit_bias value for token " + std::to_string(b.first) + " must be finite or -inf");
  }
  for (int32_t t : stop_token_ids)
    if (t < 0 || t >= n_vocab)
      bad("stop_token_ids entry " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  for (const auto& s : stop)
    if (s.empty()) bad("stop strings must not be empty");
}

}  // namespace edgellm
