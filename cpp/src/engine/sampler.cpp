#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "common/errors.h"

namespace edgellm {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool by_logit_desc(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Softmax probabilities of the candidates (f32 exponentials, double sum).
std::vector<float> softmax(const std::vector<Candidate>& c) {
  float mx = kNegInf;
  for (const auto& x : c) mx = std::max(mx, x.logit);
  std::vector<float> p(c.size());
  double sum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    p[i] = c[i].logit == kNegInf ? 0.0f : std::exp(c[i].logit - mx);
    sum += p[i];
  }
  for (auto& v : p) v = static_cast<float>(v / sum);
  return p;
}

// The temperature step: logits divided by t (> 0).
void temper(std::vector<Candidate>& c, float t) {
  const float inv_t = 1.0f / t;
  for (auto& x : c) x.logit *= inv_t;
}

// XTC, "exclude top choices" (llama.cpp's xtc sampler, after min_p and before temperature): of
// the candidates whose probability -- the softmax over the candidates the truncation steps left,
// untempered -- is at least `threshold`, all but the least likely are removed, when at least two
// qualify. Sorts `c` most likely first and returns how many leading candidates go (0: none).
size_t xtc_cut(std::vector<Candidate>& c, float threshold) {
  std::sort(c.begin(), c.end(), by_logit_desc);
  const std::vector<float> prob = softmax(c);
  size_t last = 0;  // the least likely candidate at or above the threshold
  for (size_t i = 0; i < c.size() && prob[i] >= threshold; ++i) last = i;
  return last;
}

// XTC can act: a chance above 0 and a threshold two tokens can reach (llama.cpp: > 0.5 is off).
bool xtc_on(const SamplingParams& p) { return p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f; }

// The most likely candidate (the lower id among equals), as argmax picks it.
int32_t best(const std::vector<Candidate>& c) {
  return c.empty() ? -1 : std::min_element(c.begin(), c.end(), by_logit_desc)->id;
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, std::vector<int32_t> eog, uint64_t seed)
    : params_(params), eog_(std::move(eog)), rng_(static_cast<std::mt19937::result_type>(seed)) {}

void Sampler::apply_penalties(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t last_n,
                              float repeat, float frequency, float presence) {
  if (last_n == 0) return;
  if (repeat == 1.0f && frequency == 0.0f && presence == 0.0f) return;
  const size_t n = last_n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(last_n));
  std::unordered_map<int32_t, int32_t> count;
  for (size_t i = history.size() - n; i < history.size(); ++i) ++count[history[i]];
  for (const auto& kv : count) {
    const int32_t t = kv.first;
    if (t < 0 || t >= n_vocab) continue;
    float& l = logits[t];
    if (l == kNegInf) continue;
    // Sign-aware, as llama.cpp: dividing a negative logit would raise its probability.
    if (l > 0.0f) l /= repeat;
    else l *= repeat;
    l -= static_cast<float>(kv.second) * frequency + (kv.second > 0 ? presence : 0.0f);
  }
}

void Sampler::top_k(std::vector<Candidate>& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) return;
  std::partial_sort(c.begin(), c.begin() + k, c.end(), by_logit_desc);
  c.resize(k);
}

void Sampler::typical(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.size() <= 1) return;
  const std::vector<float> prob = softmax(c);
  double entropy = 0.0;
  for (float q : prob)
    if (q > 0.0f) entropy -= q * std::log(q);
  std::vector<size_t> order(c.size());
  std::vector<double> shifted(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    order[i] = i;
    shifted[i] = prob[i] > 0.0f ? std::fabs(-std::log(prob[i]) - entropy) : std::numeric_limits<double>::infinity();
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shifted[a] < shifted[b]; });
  double cum = 0.0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    cum += prob[order[i]];
    if (cum > p) {  // keep the smallest set of most "typical" tokens whose mass exceeds p
      keep = i + 1;
      break;
    }
  }
  std::vector<Candidate> out;
  out.reserve(keep);
  for (size_t i = 0; i < keep; ++i) out.push_back(c[order[i]]);
  c.swap(out);
}

void Sampler::top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.size() <= 1) return;
  // Probabilities need the whole set's normalizer, but the kept prefix is usually short: sort
  // only a head of the candidates and widen it when its mass falls short of p.
  float mx = -std::numeric_limits<float>::infinity();
  for (const auto& x : c) mx = std::max(mx, x.logit);
  double total = 0.0;
  for (const auto& x : c) total += std::exp(static_cast<double>(x.logit) - mx);
  size_t head = std::min<size_t>(c.size(), 256);
  while (true) {
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(head), c.end(), by_logit_desc);
    double cum = 0.0;
    for (size_t i = 0; i < head; ++i) {
      cum += std::exp(static_cast<double>(c[i].logit) - mx) / total;
      if (cum >= p) {  // the smallest prefix whose mass reaches p
        c.resize(i + 1);
        return;
      }
    }
    if (head == c.size()) return;  // rounding: p not reached, keep everything
    head = std::min(c.size(), head * 4);
  }
}

void Sampler::min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.0f || c.size() <= 1) return;
  float mx = kNegInf;
  for (const auto& x : c) mx = std::max(mx, x.logit);
  const float threshold = mx + std::log(p);  // p_i >= p * p_max  <=>  l_i >= l_max + ln p
  std::vector<Candidate> out;
  for (const auto& x : c)
    if (x.logit >= threshold) out.push_back(x);
  if (!out.empty()) c.swap(out);
}

int32_t Sampler::argmax(const float* logits, int32_t n_vocab) {
  // The first index of the largest value (NaN never wins; all -inf or NaN: -1), as the plain
  // scan gives it, in two steps: the maximum of each block of kBlock values through kLanes
  // independent running maxima (`x > m ? x : m` is exactly maxps, so the compiler vectorizes
  // it: a greedy step over a 262k vocabulary is ~10x faster than the dependent scan), keeping
  // the first block whose maximum beats every earlier one; then the first index in that block
  // holding the maximum.
  constexpr int32_t kLanes = 16, kBlock = 256;
  float best = kNegInf;
  int32_t block = -1, i = 0;
  for (; i + kBlock <= n_vocab; i += kBlock) {
    float m[kLanes];
    for (int j = 0; j < kLanes; ++j) m[j] = kNegInf;
    for (int32_t k = 0; k < kBlock; k += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const float x = logits[i + k + j];
        m[j] = x > m[j] ? x : m[j];
      }
    float bm = m[0];
    for (int j = 1; j < kLanes; ++j) bm = m[j] > bm ? m[j] : bm;
    if (bm > best) {
      best = bm;
      block = i;
    }
  }
  int32_t at = -1;
  if (block >= 0)
    for (int32_t k = block; k < block + kBlock; ++k)
      if (logits[k] == best) {
        at = k;
        break;
      }
  for (; i < n_vocab; ++i)
    if (logits[i] > best) {
      best = logits[i];
      at = i;
    }
  return at;
}

TokenLogprob Sampler::logprobs_of(const float* logits, int32_t n_vocab, int32_t token, int32_t n_top) {
  float mx = kNegInf;
  for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i)
    if (logits[i] != kNegInf) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = token;
  out.logprob = token >= 0 ? logits[token] - log_z : 0.0f;
  if (n_top > 0) {
    std::vector<Candidate> c;
    c.reserve(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) c.push_back({i, logits[i]});
    const int32_t k = std::min(n_top, n_vocab);
    std::partial_sort(c.begin(), c.begin() + k, c.end(), by_logit_desc);
    for (int32_t i = 0; i < k; ++i) out.top.emplace_back(c[i].id, c[i].logit - log_z);
  }
  return out;
}

int32_t Sampler::draw(std::vector<Candidate>& c) {
  const std::vector<float> prob = softmax(c);
  double total = 0.0;
  for (float q : prob) total += q;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double u = uniform(rng_) * total;
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += prob[i];
    if (cum > u && prob[i] > 0.0f) return c[i].id;
  }
  // Rounding left u past the last sum: the last token with mass.
  for (size_t i = c.size(); i-- > 0;)
    if (prob[i] > 0.0f) return c[i].id;
  return c.front().id;
}

void Sampler::prepare(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated) const {
  for (const auto& b : params_.logit_bias) logits[b.first] += b.second;
  if (params_.ignore_eos || n_generated < params_.min_tokens)
    for (int32_t t : eog_)
      if (t >= 0 && t < n_vocab) logits[t] = kNegInf;
  if (n_generated < params_.min_tokens)
    for (int32_t t : params_.stop_token_ids) logits[t] = kNegInf;
  apply_penalties(logits, n_vocab, history, params_.repeat_last_n, params_.repetition_penalty,
                  params_.frequency_penalty, params_.presence_penalty);
}

void Sampler::truncated(const float* logits, int32_t n_vocab, std::vector<Candidate>& c) const {
  c.clear();
  const int32_t k = params_.top_k;
  if (k > 0 && k < n_vocab) {
    // top_k first anyway: keep the k best in a bounded heap instead of listing the vocabulary
    // (Gemma's 262k entries per token per sequence would dominate a small model's step).
    c.reserve(k + 1);
    auto worse_on_top = [](const Candidate& a, const Candidate& b) { return by_logit_desc(a, b); };
    for (int32_t i = 0; i < n_vocab; ++i) {
      const float l = logits[i];
      if (l == kNegInf) continue;
      if (static_cast<int32_t>(c.size()) < k) {
        c.push_back({i, l});
        std::push_heap(c.begin(), c.end(), worse_on_top);
      } else if (l > c.front().logit) {  // equal logits: the lower id, seen first, stays
        std::pop_heap(c.begin(), c.end(), worse_on_top);
        c.back() = {i, l};
        std::push_heap(c.begin(), c.end(), worse_on_top);
      }
    }
  } else {
    c.reserve(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i)
      if (logits[i] != kNegInf) c.push_back({i, logits[i]});
  }
  if (c.empty()) return;
  top_k(c, params_.top_k);
  typical(c, params_.typical_p);
  top_p(c, params_.top_p);
  min_p(c, params_.min_p);
}

int32_t Sampler::sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated,
                        TokenLogprob* lp) {
  prepare(logits, n_vocab, history, n_generated);
  int32_t token;
  const bool xtc = xtc_on(params_);
  if (params_.temperature <= 0.0f && !xtc) {
    token = argmax(logits, n_vocab);
  } else {
    std::vector<Candidate> c;
    truncated(logits, n_vocab, c);
    // XTC acts with probability xtc_probability: one uniform from the sequence's generator,
    // drawn (as llama.cpp draws its own) only where it could act, with two or more candidates.
    if (xtc && c.size() >= 2 && uniform() <= params_.xtc_probability)
      c.erase(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(xtc_cut(c, params_.xtc_threshold)));
    if (params_.temperature <= 0.0f) {
      token = best(c);  // greedy after XTC: the most likely token it left (llama.cpp's chain)
    } else {
      temper(c, params_.temperature);
      token = c.empty() ? -1 : draw(c);
    }
  }
  if (token < 0 || logits[token] == kNegInf)
    throw InvalidRequestError("no token can be sampled: every token is disallowed (logit_bias / constraint / masks)");
  if (lp && params_.logprobs >= 0) *lp = logprobs_of(logits, n_vocab, token, params_.logprobs);
  return token;
}

void Sampler::distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, int32_t n_generated,
                           std::vector<TokenProb>& out) const {
  prepare(logits, n_vocab, history, n_generated);
  out.clear();
  const bool xtc = xtc_on(params_);
  if (params_.temperature <= 0.0f && !xtc) {
    const int32_t t = argmax(logits, n_vocab);
    if (t >= 0 && logits[t] != kNegInf) out.push_back({t, 1.0f});
  } else {
    std::vector<Candidate> c;
    truncated(logits, n_vocab, c);
    // With XTC, the mixture over its coin: (1 - p) * the distribution without it + p * with it.
    const size_t cut = xtc && c.size() >= 2 ? xtc_cut(c, params_.xtc_threshold) : 0;
    const float p_cut = cut > 0 ? params_.xtc_probability : 0.0f;
    auto add = [&](size_t from, float weight) {
      std::vector<Candidate> part(c.begin() + static_cast<std::ptrdiff_t>(from), c.end());
      if (params_.temperature <= 0.0f) {
        if (!part.empty() && weight > 0.0f) out.push_back({best(part), weight});
        return;
      }
      temper(part, params_.temperature);
      const std::vector<float> prob = softmax(part);
      for (size_t i = 0; i < part.size(); ++i)
        if (prob[i] * weight > 0.0f) out.push_back({part[i].id, prob[i] * weight});
    };
    add(0, 1.0f - p_cut);
    if (cut > 0) add(cut, p_cut);
  }
  if (out.empty())
    throw InvalidRequestError("no token can be sampled: every token is disallowed (logit_bias / constraint / masks)");
  std::sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) { return a.id < b.id; });
  size_t n = 0;  // one entry per token (XTC's two parts overlap)
  for (size_t i = 0; i < out.size(); ++i) {
    if (n > 0 && out[n - 1].id == out[i].id) out[n - 1].p += out[i].p;
    else out[n++] = out[i];
  }
  out.resize(n);
}

double Sampler::uniform() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return u(rng_);
}

int32_t Sampler::draw_from(const std::vector<TokenProb>& p) {
  double total = 0.0;
  for (const auto& x : p) total += x.p;
  const double u = uniform() * total;
  double cum = 0.0;
  for (const auto& x : p) {
    cum += x.p;
    if (cum > u && x.p > 0.0f) return x.id;
  }
  for (size_t i = p.size(); i-- > 0;)
    if (p[i].p > 0.0f) return p[i].id;
  return p.empty() ? -1 : p.front().id;
}

}  // namespace edgellm
