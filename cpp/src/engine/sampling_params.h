// Per-request sampling parameters. Defaults follow llama.cpp's common_params_sampling, so a
// user moving from llama.cpp gets the same behaviour.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/constraint.h"

namespace edgellm {

// The numeric sampling fields, one line each -- the one declaration of each field's type, default
// and range, from which the struct's members, validate(), reads_history(), the Python binding
// (_core.SamplingParams' attributes and _core.sampling_fields()) and, through the latter,
// edgellm.sampling_fields (the library's rules, every API's wire names, the REPL, the docs) come.
//   X(type, name, default, lo, hi, flags)
// lo / hi bound the value (floats must also be finite); flags:
//   kLoOpen        lo itself is excluded
//   kUnsetBelow0   a negative value means "not set" (Python's None) and skips the range
//   kReadsHistory  the field reads the token history (prompt + generated) when not at its default
#define EDGELLM_SAMPLING_FIELDS(X)                                                                   \
  X(int32_t, max_tokens, 128, 1, kMaxI32, kUnsetBelow0)  /* unset: until EOG or a full context */  \
  X(int32_t, min_tokens, 0, 0, kMaxI32, 0)       /* EOG / stop tokens masked until this many */    \
  X(float, temperature, 0.8f, 0, kInf, 0)        /* 0: greedy (argmax after bias, penalties) */     \
  X(int32_t, top_k, 40, kMinI32, kMaxI32, 0)     /* <= 0: off */                                    \
  X(float, top_p, 0.95f, 0, 1, 0)                /* 1: off */                                       \
  X(float, min_p, 0.05f, 0, 1, 0)                /* 0: off */                                       \
  X(float, typical_p, 1.0f, 0, 1, kLoOpen)       /* 1: off */                                       \
  X(float, repetition_penalty, 1.0f, 0, kInf, kLoOpen | kReadsHistory) /* 1: off */                 \
  X(int32_t, repeat_last_n, 64, -1, kMaxI32, 0)  /* penalty window; -1: all, 0: off */             \
  X(float, presence_penalty, 0.0f, -kInf, kInf, kReadsHistory)                                      \
  X(float, frequency_penalty, 0.0f, -kInf, kInf, kReadsHistory)                                     \
  X(bool, ignore_eos, false, 0, 1, 0)            /* EOG tokens are masked */                        \
  X(int32_t, logprobs, -1, 0, 20, kUnsetBelow0)  /* per generated token: its log-prob, the top n */ \
  X(int32_t, prompt_logprobs, -1, 0, 20, kUnsetBelow0) /* the same for prompt tokens after the first */ \
  X(int32_t, n, 1, 1, 64, 0)                     /* completions of one prompt (shared prompt KV) */ \
  X(bool, return_progress, false, 0, 1, 0)       /* streams: prompt-progress events */              \
  X(int32_t, n_keep, 0, -1, kMaxI32, 0)          /* context shift: tokens kept; -1: the prompt */   \
  X(int32_t, n_discard, 0, 0, kMaxI32, 0)        /* context shift: tokens dropped; 0: half */     \
  X(float, xtc_probability, 0.0f, 0, 1, 0)       /* XTC's chance per token; 0: off */              \
  X(float, xtc_threshold, 0.1f, 0, 1, 0)         /* XTC: probability to be a top choice; > 0.5 off */

namespace sampling_field {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxI32 = 2147483647.0;
constexpr double kMinI32 = -2147483648.0;
enum Flags : unsigned { kLoOpen = 1, kUnsetBelow0 = 2, kReadsHistory = 4 };
}  // namespace sampling_field

struct SamplingParams {
#define EDGELLM_DECLARE_FIELD(type, name, def, lo, hi, flags) type name = def;
  EDGELLM_SAMPLING_FIELDS(EDGELLM_DECLARE_FIELD)
#undef EDGELLM_DECLARE_FIELD
  // Context shift (EngineConfig::context_shift): n_keep counts tokens after a BOS the model adds
  // (llama-server's n_keep).
  std::vector<std::pair<int32_t, float>> logit_bias;  // finite, or -inf to ban the token
  bool has_seed = false;             // false: a random seed is drawn
  uint64_t seed = 0;
  std::vector<std::string> stop;     // stop strings, matched on the detokenized text
  std::vector<int32_t> stop_token_ids;
  ConstraintSpec constraint;

  // Throws InvalidRequestError naming the parameter at fault.
  void validate(int32_t n_vocab) const;
  // Whether sampling reads the token history (a kReadsHistory field off its default).
  bool reads_history() const;
};

}  // namespace edgellm
