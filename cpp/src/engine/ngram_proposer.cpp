#include "engine/ngram_proposer.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace edgellm {

size_t NgramProposer::KeyHash::operator()(int32_t end) const {
  const int32_t* t = h->data() + (end - n);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    x ^= static_cast<uint32_t>(t[i]);
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
  }
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<size_t>(x);
}

bool NgramProposer::KeyEq::operator()(int32_t a, int32_t b) const {
  if (a == b) return true;
  const int32_t* d = h->data();
  for (int i = 1; i <= n; ++i)
    if (d[a - i] != d[b - i]) return false;
  return true;
}

NgramProposer::NgramProposer(int max_n, int min_n)
    : max_n_(max_n), min_n_(min_n), history_(std::make_unique<std::vector<int32_t>>()) {
  if (min_n < 1 || max_n < min_n || max_n > kMaxNgram)
    throw std::invalid_argument("NgramProposer: need 1 <= min_n <= max_n <= " +
                                std::to_string(kMaxNgram) + ", got min_n=" +
                                std::to_string(min_n) + " max_n=" + std::to_string(max_n));
  index_.reserve(width());
  for (int n = min_n_; n <= max_n_; ++n)
    index_.emplace_back(16, KeyHash{history_.get(), n}, KeyEq{history_.get(), n});
}

void NgramProposer::push(int32_t token) {
  std::vector<int32_t>& h = *history_;
  if (h.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("NgramProposer: history longer than 2^31 - 1 tokens");
  const size_t i = h.size();  // the new token's position
  h.push_back(token);
  prev_.resize((i + 1) * width(), -1);
  // The n-gram history[i - n, i) now has a continuation (the new token): index it at end i.
  for (int n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= i; ++n) {
    const int32_t e = static_cast<int32_t>(i);
    auto [it, inserted] = index_[n - min_n_].try_emplace(e, e);
    if (!inserted) {
      prev(i, n) = it->second;
      it->second = e;
    }
  }
}

void NgramProposer::push(const int32_t* tokens, size_t count) {
  // Reserve for a long prompt at once, but keep geometric growth for short appends (an exact
  // reserve per call would copy the whole history on every decode step).
  const size_t total = history_->size() + count;
  if (total > history_->capacity()) {
    const size_t cap = std::max(total, 2 * history_->capacity());
    history_->reserve(cap);
    prev_.reserve(cap * width());
  }
  if (count >= 1024)  // a prompt: size the indexes once instead of rehashing as they grow
    for (Index& idx : index_) idx.reserve(total);
  for (size_t j = 0; j < count; ++j) push(tokens[j]);
}

void NgramProposer::truncate(size_t new_size) {
  std::vector<int32_t>& h = *history_;
  while (h.size() > new_size) {
    const size_t i = h.size() - 1;
    const int32_t e = static_cast<int32_t>(i);
    // Undo push(i): positions are removed newest first, so i is the head of its n-gram.
    for (int n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= i; ++n) {
      Index& idx = index_[n - min_n_];
      auto it = idx.find(e);
      const int32_t p = prev(i, n);
      if (p < 0)
        idx.erase(it);
      else
        it->second = p;
    }
    h.pop_back();
    prev_.resize(i * width());
  }
}

NgramProposer::Match NgramProposer::find_match() const {
  const size_t s = history_->size();
  for (int n = max_n_; n >= min_n_; --n) {
    // An earlier occurrence ends at some e with n <= e < s, so s must exceed n.
    if (s <= static_cast<size_t>(n)) continue;
    const Index& idx = index_[n - min_n_];
    // Key s stands for the current suffix history[s - n, s); it is never itself indexed
    // (indexed ends are < s), so the head found is the most recent earlier occurrence.
    auto it = idx.find(static_cast<int32_t>(s));
    if (it != idx.end()) return Match{n, static_cast<size_t>(it->second)};
  }
  return Match{};
}

NgramProposer::Match NgramProposer::propose(int k, std::vector<int32_t>* out) const {
  out->clear();
  if (k <= 0) return Match{};
  const Match m = find_match();
  if (m.n == 0) return m;
  const std::vector<int32_t>& h = *history_;
  const size_t s = h.size();
  out->reserve(static_cast<size_t>(k));
  for (size_t j = 0; j < static_cast<size_t>(k); ++j) {
    const size_t src = m.end + j;  // position in history ++ proposal
    const int32_t t = src < s ? h[src] : (*out)[src - s];
    out->push_back(t);
  }
  return m;
}

}  // namespace edgellm
