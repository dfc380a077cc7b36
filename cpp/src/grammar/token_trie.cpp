#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace edgellm::grammar {
namespace {
// Longer pieces are not real tokens (and would not fit the depth field).
constexpr size_t kMaxPieceBytes = 4096;
// The guard's dense table is bounded (16 MiB); texts past it are left out, EOG ones first kept.
constexpr size_t kMaxGuardEntries = size_t{1} << 22;
}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog,
                     const std::vector<std::pair<int32_t, std::string>>& special)
    : n_vocab_(static_cast<int32_t>(pieces.size())), pieces_(pieces), eog_(std::move(eog)) {
  is_eog_.assign(pieces.size(), 0);
  for (int32_t t : eog_)
    if (t >= 0 && t < n_vocab_) is_eog_[t] = 1;
  excluded_ = is_eog_;
  for (const auto& [t, text] : special)
    if (t >= 0 && t < n_vocab_) excluded_[t] = 1;
  for (int32_t t = 0; t < n_vocab_; ++t)
    if (pieces[t].empty() || pieces[t].size() > kMaxPieceBytes) excluded_[t] = 1;

  std::vector<int32_t> order;
  for (int32_t t = 0; t < n_vocab_; ++t)
    if (!excluded_[t]) order.push_back(t);
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
  build_guard(special);
}

void TokenTrie::build_guard(const std::vector<std::pair<int32_t, std::string>>& special) {
  // Patterns: special texts of two bytes or more, EOG ones first (kept if the table overflows).
  std::vector<std::pair<bool, const std::string*>> tagged;  // (is EOG, text)
  for (const auto& [t, text] : special)
    if (text.size() >= 2 && text.size() <= kMaxPieceBytes)
      tagged.emplace_back(t >= 0 && t < n_vocab_ && is_eog_[t], &text);
  std::stable_sort(tagged.begin(), tagged.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const std::string*> pats;
  for (const auto& x : tagged) pats.push_back(x.second);
  if (pats.empty()) return;
  // Byte classes: 0 for bytes in no pattern, 1.. for the others.
  bool used[256] = {};
  for (const std::string* p : pats)
    for (char c : *p) used[static_cast<uint8_t>(c)] = true;
  n_classes_ = 1;
  for (int b = 0; b < 256; ++b) byte_class_[b] = used[b] ? static_cast<uint16_t>(n_classes_++) : 0;
  const size_t C = n_classes_;
  constexpr int32_t kUnset = -2;
  std::vector<int32_t> table(C, kUnset);
  std::vector<uint8_t> out{0};
  for (const std::string* p : pats) {
    if ((out.size() + p->size()) * C > kMaxGuardEntries) continue;
    int32_t u = 0;
    for (char c : *p) {
      int32_t& v = table[static_cast<size_t>(u) * C + byte_class_[static_cast<uint8_t>(c)]];
      if (v == kUnset) {
        v = static_cast<int32_t>(out.size());
        out.push_back(0);
        table.resize(table.size() + C, kUnset);
      }
      u = table[static_cast<size_t>(u) * C + byte_class_[static_cast<uint8_t>(c)]];
    }
    out[u] = 1;
    ++n_guard_patterns_;
  }
  // Failure links, breadth first; missing transitions become the failure state's.
  const size_t n = out.size();
  std::vector<int32_t> fail(n, 0), queue;
  queue.reserve(n);
  for (size_t c = 0; c < C; ++c) {
    int32_t& v = table[c];
    if (v == kUnset) v = 0;
    else queue.push_back(v);
  }
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const int32_t u = queue[qi];
    for (size_t c = 0; c < C; ++c) {
      int32_t& v = table[static_cast<size_t>(u) * C + c];
      const int32_t via_fail = table[static_cast<size_t>(fail[u]) * C + c];
      if (v == kUnset) {
        v = via_fail;
      } else {
        fail[v] = via_fail;
        out[v] |= out[via_fail];
        queue.push_back(v);
      }
    }
  }
  for (int32_t& v : table)
    if (out[v]) v = -1;  // completing a special text is rejected
  guard_ = std::move(table);
}

}  // namespace edgellm::grammar
