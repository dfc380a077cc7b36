#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace edgellm::grammar {
namespace {
// Longer pieces are not real tokens (and would not fit the depth field).
constexpr size_t kMaxPieceBytes = 4096;
}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog)
    : n_vocab_(static_cast<int32_t>(pieces.size())), pieces_(pieces), eog_(std::move(eog)) {
  is_eog_.assign(pieces.size(), 0);
  for (int32_t t : eog_)
    if (t >= 0 && t < n_vocab_) is_eog_[t] = 1;

  std::vector<int32_t> order;
  for (int32_t t = 0; t < n_vocab_; ++t)
    if (!is_eog_[t] && !pieces[t].empty() && pieces[t].size() <= kMaxPieceBytes) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });

  // Sorted pieces give the preorder directly: a piece shares its path with the previous one up
  // to their common prefix; the rest are new nodes. A node's subtree ends when it is popped.
  nodes_.push_back({0, 0, 0, 0});  // root
  std::vector<int32_t> path{0};
  const std::string* prev = nullptr;
  size_t max_depth = 0;
  for (int32_t t : order) {
    const std::string& p = pieces[t];
    size_t common = 0;
    if (prev) {
      const size_t lim = std::min(prev->size(), p.size());
      while (common < lim && (*prev)[common] == p[common]) ++common;
    }
    while (path.size() > common + 1) {
      nodes_[path.back()].skip = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back({0, static_cast<int32_t>(tokens_.size()), static_cast<uint16_t>(d + 1), static_cast<uint8_t>(p[d])});
    }
    tokens_.push_back(t);  // the deepest node on the path is this piece's node
    max_depth = std::max(max_depth, p.size());
    prev = &p;
  }
  while (!path.empty()) {
    nodes_[path.back()].skip = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
  // Sentinel: the subtrees popped last skip to its index; its tok_begin closes the last range.
  nodes_.push_back({0, static_cast<int32_t>(tokens_.size()), 0, 0});
  max_depth_ = max_depth;
}

}  // namespace edgellm::grammar
