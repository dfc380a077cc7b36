// The vocabulary as a byte trie, laid out in preorder so a token mask is one linear pass:
// each node stores its depth and where its subtree ends, and a node the grammar rejects skips
// its whole subtree. Built once per vocabulary and shared by every constrained request;
// immutable after construction, so walks may run concurrently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edgellm::grammar {

class TokenTrie {
 public:
  // pieces[i]: the bytes token i adds to the output. Tokens with an empty piece and the EOG
  // tokens (`eog`) are left out of the trie: EOG is allowed only when the grammar is complete,
  // and an empty piece could be chosen forever without advancing the grammar.
  TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog);

  int32_t n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& piece(int32_t token) const { return pieces_[token]; }
  bool is_eog(int32_t token) const { return token >= 0 && token < n_vocab_ && is_eog_[token]; }
  size_t n_nodes() const { return nodes_.size(); }

  // Sets in `mask` (n_vocab bits) every token whose bytes the automaton accepts from `state`.
  // next(state, byte) returns the following state or a negative value for "rejected".
  template <class Next>
  void walk(int32_t state, Next&& next, uint64_t* mask) const {
    std::vector<int32_t> at(max_depth_ + 1);  // state after each depth of the current path
    at[0] = state;
    const size_t n = nodes_.size() - 1;  // the last node is a sentinel
    for (size_t i = 1; i < n;) {
      const Node& nd = nodes_[i];
      const int32_t s = next(at[nd.depth - 1], nd.byte);
      if (s < 0) {
        i = nd.skip;
        continue;
      }
      at[nd.depth] = s;
      for (int32_t k = nd.tok_begin; k < nodes_[i + 1].tok_begin; ++k) {
        const int32_t t = tokens_[k];
        mask[t >> 6] |= uint64_t{1} << (t & 63);
      }
      ++i;
    }
  }

 private:
  struct Node {
    int32_t skip;       // index of the first node after this subtree
    int32_t tok_begin;  // tokens ending here: tokens_[tok_begin, next node's tok_begin)
    uint16_t depth;
    uint8_t byte;
  };
  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  size_t max_depth_ = 0;
};

}  // namespace edgellm::grammar
