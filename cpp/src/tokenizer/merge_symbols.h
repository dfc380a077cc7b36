// The doubly linked symbol list both merge tokenizers (BPE by rank, SPM by score) work on: one
// symbol per UTF-8 character of the text to start with, adjacent pairs joined until no known
// pair is left.
#pragma once
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace edgellm {

struct MergeSymbol {
  int32_t prev, next;  // neighbours, -1 at the ends
  size_t start, n;     // bytes of the text; n == 0 once joined into its left neighbour
};

// One symbol per UTF-8 character of `text` (a truncated last sequence is its own symbol).
inline std::vector<MergeSymbol> utf8_symbols(std::string_view text) {
  std::vector<MergeSymbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(unicode::utf8_len(uint8_t(text[off])), text.size() - off);
    const int32_t idx = int32_t(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  return sym;
}

// Joins sym[right] into its left neighbour sym[left]: left grows, right empties, links skip it.
inline void join_symbols(std::vector<MergeSymbol>& sym, int32_t left, int32_t right) {
  MergeSymbol& l = sym[left];
  MergeSymbol& r = sym[right];
  l.n += r.n;
  r.n = 0;
  l.next = r.next;
  if (r.next >= 0) sym[r.next].prev = left;
}

// The merge loop both tokenizers run over `sym`: try_add(l, r) queues the adjacent pair sym[l],
// sym[r] when it may merge (l, r >= 0 here); queue.top() is the pair to join next. A queued pair
// is dropped when either symbol was joined away or has grown since (Pair::current(l, r) false).
// Each join offers the joined symbol's new pairs with its neighbours.
template <class Pair, class TryAdd>
inline void merge_pairs(std::vector<MergeSymbol>& sym, std::priority_queue<Pair>& queue, TryAdd&& try_add) {
  for (int32_t i = 1; i < int32_t(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Pair b = queue.top();
    queue.pop();
    const MergeSymbol& l = sym[b.left];
    const MergeSymbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || !b.current(l, r)) continue;
    join_symbols(sym, b.left, b.right);
    if (l.prev >= 0) try_add(l.prev, b.left);
    if (l.next >= 0) try_add(b.left, l.next);
  }
}

}  // namespace edgellm
