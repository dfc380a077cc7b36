#include "engine/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "common/errors.h"

namespace edgellm {
using namespace sampling_field;
namespace {

[[noreturn]] void bad(const std::string& what) { throw InvalidRequestError(what); }

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// One field against its declared range (EDGELLM_SAMPLING_FIELDS).
void check(const char* name, double v, bool is_float, double lo, double hi, unsigned flags) {
  if (is_float && !std::isfinite(v)) bad(std::string(name) + " must be finite, got " + num(v));
  if ((flags & kUnsetBelow0) && v < 0) return;
  const bool lo_open = flags & kLoOpen;
  if ((lo_open ? v <= lo : v < lo) || v > hi) {
    std::string range;
    if (hi == kInf) range = (lo_open ? "> " : ">= ") + num(lo);
    else if (lo == -kInf) range = "<= " + num(hi);
    else range = std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
    bad(std::string(name) + " must be " + range + ", got " + num(v));
  }
}
}  // namespace

void SamplingParams::validate(int32_t n_vocab) const {
  // The ranges are the table's (EDGELLM_SAMPLING_FIELDS), which Python applies first.
#define EDGELLM_CHECK_FIELD(type, name, def, lo, hi, flags) \
  check(#name, static_cast<double>(name), std::is_floating_point<type>::value, lo, hi, flags);
  EDGELLM_SAMPLING_FIELDS(EDGELLM_CHECK_FIELD)
#undef EDGELLM_CHECK_FIELD
  if (max_tokens >= 0 && min_tokens > max_tokens)
    bad("min_tokens " + std::to_string(min_tokens) + " exceeds max_tokens " + std::to_string(max_tokens));
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

bool SamplingParams::reads_history() const {
#define EDGELLM_READS_HISTORY(type, name, def, lo, hi, flags) \
  if (((flags) & kReadsHistory) && name != static_cast<type>(def)) return true;
  EDGELLM_SAMPLING_FIELDS(EDGELLM_READS_HISTORY)
#undef EDGELLM_READS_HISTORY
  return false;
}

}  // namespace edgellm
