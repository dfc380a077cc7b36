// The doubly linked symbol list both merge tokenizers (BPE by rank, SPM by score) work on: one
// symbol per UTF-8 character of the text to start with, adjacent pairs joined until no known
// pair is left.
#pragma once
#include <algorithm>
#include <cstdint>
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

}  // namespace edgellm
