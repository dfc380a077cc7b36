// Draftless speculative proposals by n-gram / prompt lookup (issue 18, item 1). One object per
// sequence sees the sequence's accepted tokens — the prompt first, then each generated token as
// it is accepted — and on request proposes up to k tokens that may come next, taken from an
// earlier place in the same history.
//
// Matching rule: for n = max_n down to min_n (longest first), the last n tokens are looked up
// among all earlier positions of the history; the first n that has an occurrence wins, and of its
// occurrences the most recent one (largest end position) is used. The proposal is the tokens
// that followed that occurrence, up to k. When the continuation reaches the current end of the
// history (the n-gram recurs with a period p < k, e.g. "a a a a" or "x y x y"), the copy goes on
// from the tokens it has just proposed (an overlapping LZ77-style copy), so it continues the
// period instead of stopping short; it never reads past the end of the history.
//
// Most recent, not first: in a code edit or a quote the place being copied is usually the latest
// one (the model rewrites the function it just saw, and once it has diverged — a renamed
// identifier — its own newest output is the better source), and it lets the index keep one head
// per n-gram. vLLM's prompt lookup scans for a match and truncates at the end of the context;
// llama.cpp's lookup decoding drafts from n-gram continuation statistics. This unit keeps the
// simple copy rule; deciding whether to draft at all (acceptance, cost) is the caller's job.
//
// Cost: an index per n (n-gram → most recent end position, with a per-position link to the
// previous occurrence) is updated on every push, so a push is O(max_n - min_n + 1) hash
// operations and a proposal is at most that many lookups plus the k-token copy, independent of
// the history length. Rolling back (truncate) undoes the removed positions' index entries, so the
// proposer always describes exactly the accepted tokens. Token ids may be any int32 value.
//
// Not yet wired into the engine: verification inside Engine::step is a later piece of issue 18.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace edgellm {

class NgramProposer {
 public:
  static constexpr int kMaxNgram = 16;

  // Throws std::invalid_argument unless 1 <= min_n <= max_n <= kMaxNgram.
  explicit NgramProposer(int max_n = 4, int min_n = 1);

  // Movable (a moved-from proposer may only be destroyed or assigned to), not copyable.
  NgramProposer(NgramProposer&&) noexcept = default;
  NgramProposer& operator=(NgramProposer&&) noexcept = default;
  NgramProposer(const NgramProposer&) = delete;
  NgramProposer& operator=(const NgramProposer&) = delete;

  // Appends accepted tokens (the prompt, then each accepted generated token).
  void push(int32_t token);
  void push(const int32_t* tokens, size_t count);
  void push(const std::vector<int32_t>& tokens) { push(tokens.data(), tokens.size()); }

  // Rolls the history back to its first `new_size` tokens (no-op when new_size >= size()).
  void truncate(size_t new_size);
  void clear() { truncate(0); }

  size_t size() const { return history_->size(); }
  const std::vector<int32_t>& history() const { return *history_; }
  int max_n() const { return max_n_; }
  int min_n() const { return min_n_; }

  struct Match {
    int n = 0;       // length of the matched n-gram; 0 = no match
    size_t end = 0;  // the occurrence is history[end - n, end); the continuation starts at end
  };
  // The match the rule above picks for the current history (n == 0 when there is none).
  Match find_match() const;

  // Writes up to k proposed tokens into *out (cleared first; empty when k <= 0 or no match)
  // and returns the match they came from.
  Match propose(int k, std::vector<int32_t>* out) const;
  std::vector<int32_t> propose(int k) const {
    std::vector<int32_t> out;
    propose(k, &out);
    return out;
  }

 private:
  // An index key is an end position e; it stands for the n-gram history[e - n, e). Hash and
  // equality read the history through a pointer to the heap vector, which stays put when the
  // proposer is moved.
  struct KeyHash {
    const std::vector<int32_t>* h;
    int n;
    size_t operator()(int32_t end) const;
  };
  struct KeyEq {
    const std::vector<int32_t>* h;
    int n;
    bool operator()(int32_t a, int32_t b) const;
  };
  // n-gram (represented by its first-indexed end position) → most recent end position.
  using Index = std::unordered_map<int32_t, int32_t, KeyHash, KeyEq>;

  int width() const { return max_n_ - min_n_ + 1; }
  int32_t& prev(size_t end, int n) { return prev_[end * width() + (n - min_n_)]; }

  int max_n_, min_n_;
  std::unique_ptr<std::vector<int32_t>> history_;
  std::vector<Index> index_;   // index_[n - min_n]
  std::vector<int32_t> prev_;  // prev(e, n): previous end of the same n-gram, -1 when none
};

}  // namespace edgellm
