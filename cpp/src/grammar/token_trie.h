// The vocabulary as a byte trie, laid out in preorder so a token mask is one linear pass:
// each node stores its depth and where its subtree ends, and a node the grammar rejects skips
// its whole subtree. Built once per vocabulary and shared by every constrained request;
// immutable after construction, so walks may run concurrently.
//
// Special tokens (control / unknown types and the end-of-generation ids) never match grammar
// text: they are left out of the trie whatever their bytes, and their texts (e.g. "<|im_end|>")
// may not be spelled out by ordinary tokens either. The second rule is a small Aho-Corasick
// automaton over those texts (the "guard"); a constraint's parse state is the pair (grammar
// state, guard state), and a walk rejects every path on which a special text is completed.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::grammar {

class TokenTrie {
 public:
  // pieces[i]: the bytes token i adds to the output. Tokens with an empty piece, the EOG tokens
  // (`eog`) and the special tokens (`special`: id and text) are left out of the trie: EOG is
  // allowed only when the grammar is complete, an empty piece could be chosen forever without
  // advancing the grammar, and a special token is markup, never text. The texts of `special`
  // (two bytes or longer) form the guard.
  TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog,
            const std::vector<std::pair<int32_t, std::string>>& special = {});

  int32_t n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& piece(int32_t token) const { return pieces_[token]; }
  bool is_eog(int32_t token) const { return token >= 0 && token < n_vocab_ && is_eog_[token]; }
  // True for tokens that can never be text inside a grammar (special, EOG, empty piece).
  bool excluded(int32_t token) const { return token < 0 || token >= n_vocab_ || excluded_[token]; }
  size_t n_nodes() const { return nodes_.size(); }

  // Guard automaton over the special texts: state 0 is the start; guard_next returns -1 when
  // the byte completes a special text.
  static constexpr int32_t kGuardStart = 0;
  int32_t guard_next(int32_t g, uint8_t byte) const {
    return guard_.empty() ? 0 : guard_[static_cast<size_t>(g) * n_classes_ + byte_class_[byte]];
  }
  int32_t guard_next(int32_t g, const std::string& bytes) const {
    for (char c : bytes) {
      if (g < 0) return g;
      g = guard_next(g, static_cast<uint8_t>(c));
    }
    return g;
  }
  size_t n_guard_patterns() const { return n_guard_patterns_; }

  // Calls emit(token, state_after_token) for every token whose bytes the automaton accepts from
  // `state` and whose bytes complete no special text from guard state `guard`.
  // next(state, byte) returns the following state or a negative value for "rejected".
  template <class Next, class Emit>
  void walk(int32_t state, int32_t guard, Next&& next, Emit&& emit) const {
    std::vector<int32_t> at(max_depth_ + 1);  // state after each depth of the current path
    std::vector<int32_t> gat(max_depth_ + 1);  // guard state likewise
    at[0] = state;
    gat[0] = guard;
    const size_t n = nodes_.size() - 1;  // the last node is a sentinel
    for (size_t i = 1; i < n;) {
      const Node& nd = nodes_[i];
      const int32_t g = guard_next(gat[nd.depth - 1], nd.byte);
      if (g < 0) {
        i = nd.skip;
        continue;
      }
      const int32_t s = next(at[nd.depth - 1], nd.byte);
      if (s < 0) {
        i = nd.skip;
        continue;
      }
      at[nd.depth] = s;
      gat[nd.depth] = g;
      for (int32_t k = nd.tok_begin; k < nodes_[i + 1].tok_begin; ++k) emit(tokens_[k], s);
      ++i;
    }
  }
  // Sets in `mask` (n_vocab bits) every token walk() would emit.
  template <class Next>
  void walk(int32_t state, int32_t guard, Next&& next, uint64_t* mask) const {
    walk(state, guard, next, [mask](int32_t t, int32_t) { mask[t >> 6] |= uint64_t{1} << (t & 63); });
  }

 private:
  struct Node {
    int32_t skip;       // index of the first node after this subtree
    int32_t tok_begin;  // tokens ending here: tokens_[tok_begin, next node's tok_begin)
    uint16_t depth;
    uint8_t byte;
  };
  void build_guard(const std::vector<std::pair<int32_t, std::string>>& special);

  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_, excluded_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  size_t max_depth_ = 0;
  // Guard: dense transitions over byte classes (bytes that occur in no special text share one).
  std::vector<int32_t> guard_;
  uint16_t byte_class_[256] = {};
  size_t n_classes_ = 1;
  size_t n_guard_patterns_ = 0;
};

}  // namespace edgellm::grammar
