// Token masks for constrained decoding: the TokenConstraint the engine calls per sequence.
//
// Cost per generated token: the constraint's parse state is one automaton state id (plus the
// vocabulary guard's state, which keeps special-token texts out: token_trie.h). Its mask
// (allowed tokens, one bit each) is looked up in a per-(grammar, vocabulary) cache; on a miss
// one preorder pass over the vocabulary trie computes it, pruning every subtree whose prefix
// the grammar rejects, with byte transitions memoised in the automaton. Contexts are cached by
// grammar text, so a schema used again by a later request starts with warm masks.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/constraint.h"
#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace edgellm::grammar {

struct GrammarContextStats {
  int64_t mask_hits = 0, mask_misses = 0;
  int64_t n_states = 0, n_masks = 0;
  int64_t mask_bytes = 0;
};

// One compiled grammar, its automaton and its token masks per vocabulary. Thread-safe.
class GrammarContext {
 public:
  explicit GrammarContext(std::shared_ptr<const CompiledGrammar> grammar);

  const CompiledGrammar& grammar() const { return *grammar_; }
  int32_t initial_state() const { return initial_; }
  // The state after `bytes`, or GrammarAutomaton::kDead.
  int32_t advance(int32_t state, std::string_view bytes);
  bool is_accepting(int32_t state);
  bool can_continue(int32_t state);
  // Bytes from `state` to the nearest complete sentence (GrammarAutomaton::distance).
  int32_t distance(int32_t state);
  // Calls f(mask, max_dist) with the allowed-token bits of (`state`, `guard`) (EOG bits set iff
  // accepting) while the cache entry is pinned; max_dist is the largest distance() of the
  // states the allowed non-EOG tokens lead to.
  void with_mask(const std::shared_ptr<const TokenTrie>& trie, int32_t state, int32_t guard,
                 const std::function<void(const std::vector<uint64_t>&, int32_t)>& f);
  // Budget masks (not cached): `within` gets the allowed non-EOG tokens whose next state is at
  // most `limit` bytes from complete, `closer` those that bring it nearest (if nearer than
  // `state` at all). Returns the two counts.
  std::pair<int64_t, int64_t> budget_masks(const TokenTrie& trie, int32_t state, int32_t guard, int32_t limit,
                                           std::vector<uint64_t>& within, std::vector<uint64_t>& closer);
  GrammarContextStats stats();
  // Automaton states so far; the context cache retires contexts that grew too large.
  size_t n_states();

 private:
  struct Mask {
    std::vector<uint64_t> bits;
    int32_t max_dist = 0;
  };
  struct Masks {
    std::shared_ptr<const TokenTrie> trie;
    std::unordered_map<uint64_t, Mask> by_state;  // key: state << 32 | guard
    int64_t bytes = 0;
  };
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::mutex mu_;
  GrammarAutomaton automaton_;
  int32_t initial_;
  std::vector<Masks> masks_;  // one entry per vocabulary seen (usually one)
  int64_t hits_ = 0, misses_ = 0;
};

// The shared context for a grammar text (compiled on first use; a small LRU keeps recent
// ones). Throws InvalidRequestError for a grammar that does not parse or compile.
std::shared_ptr<GrammarContext> grammar_context(GrammarKind kind, std::string_view text);

// The trie of a vocabulary, built once and kept while `owner` (the vocabulary object) lives.
// piece(t) gives token t's output bytes (an exception counts as an empty piece); `special` the
// control/EOG tokens and their texts (EngineVocab::special_tokens).
std::shared_ptr<const TokenTrie> token_trie_for(const std::shared_ptr<const void>& owner, int32_t n_vocab,
                                                const std::function<std::string(int32_t)>& piece,
                                                const std::vector<int32_t>& eog,
                                                const std::vector<std::pair<int32_t, std::string>>& special = {});

// Budget-aware closing (ConstraintSpec::budget_close): with R tokens left to generate, a token is
// allowed only if the state it leads to is at most R - 2 bytes from a complete document (one
// token is kept for end-of-generation); when no token is (the budget was too small from the
// start), only the tokens that bring the document nearest to complete. Bytes stand in for tokens: every byte has
// a token in byte-level BPE and byte-fallback SPM vocabularies, so the bound is always reachable.
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<GrammarContext> ctx, std::shared_ptr<const TokenTrie> trie,
                    bool budget_close = false);

  void apply(float* logits, int n_vocab) override;
  // Throws InvalidRequestError for a token the grammar does not allow here.
  void accept(int32_t token) override;
  bool is_complete() const override;
  void set_remaining(int32_t tokens) override { remaining_ = tokens; }

  // Test surface.
  std::vector<int32_t> allowed_tokens();
  bool can_continue() const;
  // Advances by raw bytes; false (state unchanged) when the grammar rejects them.
  bool accept_bytes(std::string_view bytes);
  GrammarContext& context() { return *ctx_; }

 private:
  void mask_logits(const std::vector<uint64_t>& mask, float* logits, int n_vocab) const;

  std::shared_ptr<GrammarContext> ctx_;
  std::shared_ptr<const TokenTrie> trie_;
  int32_t state_;
  int32_t guard_ = TokenTrie::kGuardStart;
  bool budget_close_ = false;
  int32_t remaining_ = -1;  // tokens the sequence may still generate; -1: no limit known
  std::vector<uint64_t> within_, closer_;  // budget masks (scratch)
};

// A grammar that switches on when a trigger string appears in the output (ConstraintSpec::
// triggers). Until then nothing is masked and end-of-generation is allowed; the generated text is
// scanned for the triggers (only a trigger's length of it is kept). On a match the grammar starts
// at the trigger's first byte and is fed the rest of the text generated so far, then constrains
// every later token exactly like a GrammarConstraint. A trigger written "^text" fires only at the
// start of the output (nothing but whitespace before it).
class LazyGrammarConstraint : public TokenConstraint {
 public:
  LazyGrammarConstraint(std::shared_ptr<GrammarContext> ctx, std::shared_ptr<const TokenTrie> trie,
                        std::vector<std::string> triggers, bool budget_close = false);

  void apply(float* logits, int n_vocab) override;
  // Throws InvalidRequestError when the text from the trigger on does not fit the grammar.
  void accept(int32_t token) override;
  bool is_complete() const override;
  void set_remaining(int32_t tokens) override {
    remaining_ = tokens;
    if (inner_) inner_->set_remaining(tokens);
  }

  // Test surface.
  bool active() const { return inner_ != nullptr; }
  // Advances by raw output bytes, as accept() does with a token's piece.
  void accept_text(std::string_view bytes);

 private:
  std::shared_ptr<GrammarContext> ctx_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::string> triggers_;
  bool budget_close_ = false;
  int32_t remaining_ = -1;
  size_t max_trigger_ = 0;
  std::string tail_;  // the last bytes of free text (up to the longest trigger's length - 1)
  size_t tail_start_ = 0;                 // output offset of tail_[0]
  size_t first_text_ = std::string::npos;  // output offset of the first non-space byte
  std::unique_ptr<GrammarConstraint> inner_;
};

// The constraint for `spec` (json_schema, grammar or regex; the first one set) over `trie`.
// With spec.triggers set, a LazyGrammarConstraint.
std::unique_ptr<TokenConstraint> make_grammar_constraint(const ConstraintSpec& spec,
                                                         std::shared_ptr<const TokenTrie> trie);

// Installs the engine's constraint factory (engine/constraint.h). Idempotent.
void register_grammar_constraints();

}  // namespace edgellm::grammar
