// A grammar compiled to a byte-level pushdown automaton, and the automaton's lazily built,
// interned state space.
//
// Compiled form (llama.cpp's layout, over bytes): every rule is a list of alternatives; an
// alternative is a run of elements in one flat array ended by End. An element matches one byte
// from a 256-bit set, or calls a rule. Unicode character classes are expanded into UTF-8 byte
// sequences at compile time, so a token that ends in the middle of a character simply leaves
// the automaton between two bytes of it: partial UTF-8 needs no special tracking.
//
// Run-time state: a set of stacks. A stack's top frame points at the next byte element to
// match, the frames below it at return positions. Stacks are interned as linked nodes and
// state sets are interned too, so a whole parse state is one int and byte transitions are
// memoised in a dense table. Calls in tail position push no return frame, which keeps
// repetitions (x*, {m,n}) from growing the stack.
#pragma once
#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_ast.h"

namespace edgellm::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
  }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

struct GrammarElement {
  enum Kind : uint8_t { kBytes, kRef, kEnd };
  Kind kind;
  int32_t value;  // kBytes: byte-set index; kRef: rule id
};

enum class GrammarKind { Gbnf, Regex, JsonSchema };

class CompiledGrammar {
 public:
  // Throws InvalidRequestError (undefined rule, left recursion, size limits).
  static std::shared_ptr<const CompiledGrammar> compile(const GrammarRules& rules);
  // Parses and compiles `text` of the given kind.
  static std::shared_ptr<const CompiledGrammar> from_text(GrammarKind kind, std::string_view text);

  const std::vector<GrammarElement>& elements() const { return elements_; }
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rule_alts_[rule]; }
  const ByteSet& byte_set(int32_t i) const { return byte_sets_[i]; }
  int32_t root() const { return root_; }
  int32_t n_rules() const { return static_cast<int32_t>(rule_alts_.size()); }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  // The GBNF text the grammar came from (for a JSON schema: the converted grammar).
  const std::string& gbnf() const { return gbnf_; }

 private:
  friend class GrammarCompiler;
  std::vector<GrammarElement> elements_;
  std::vector<std::vector<int32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  std::vector<ByteSet> byte_sets_;
  int32_t root_ = -1;
  std::string gbnf_;
};

// Not thread-safe: the owner serialises calls (GrammarContext holds a mutex).
class GrammarAutomaton {
 public:
  static constexpr int32_t kDead = -1;
  // Beyond this many states a grammar is refused (the owner starts a fresh automaton earlier).
  static constexpr size_t kMaxStates = 200000;
  static constexpr int32_t kMaxStackDepth = 2048;
  // Stack frames one step (one byte, or the initial closure) may create. Nested repetitions of
  // a nullable item -- ((x?)+)+..., or x+++... -- double the frames per level (fuzz_gbnf);
  // ordinary grammars create a few hundred per step.
  static constexpr size_t kMaxNewNodesPerStep = size_t{1} << 16;
  // Parse stacks of one state that wait on the same byte element: an unambiguous grammar has
  // one, an enum or optional members a few; nested repetitions (`\w+++...`) have 2^depth, and
  // every byte would rebuild them (fuzz_grammar_automaton timeout). Beyond this: refused.
  static constexpr uint32_t kMaxStacksPerElement = 1024;

  explicit GrammarAutomaton(std::shared_ptr<const CompiledGrammar> grammar);

  int32_t initial_state() const { return initial_; }
  // The state after one more byte, or kDead.
  int32_t next(int32_t state, uint8_t byte) {
    const int32_t t = transitions_[static_cast<size_t>(state) * 256 + byte];
    return t != kUnknown ? t : compute_next(state, byte);
  }
  // The state after `bytes`, or kDead.
  int32_t next(int32_t state, std::string_view bytes);
  // True when the input so far is a complete sentence of the grammar.
  bool is_accepting(int32_t state) const { return states_[state].accepting; }
  // True when some byte can still follow.
  bool can_continue(int32_t state) const { return !states_[state].stacks.empty(); }
  // The fewest bytes that take `state` to a complete sentence (0 when accepting; kUnreachable
  // when none can). Computed per element from each rule's shortest expansion, so it is exact for
  // the grammar (a token may cover several of those bytes).
  static constexpr int32_t kUnreachable = INT32_MAX / 4;
  int32_t distance(int32_t state) const { return states_[state].dist; }

  size_t n_states() const { return states_.size(); }
  size_t n_stack_nodes() const { return nodes_.size(); }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kEmptyStack = -1;
  struct StackNode {
    int32_t pos;     // element index: the next element to match in this frame
    int32_t parent;  // the frame below, or kEmptyStack
    int32_t depth;
  };
  struct State {
    std::vector<int32_t> stacks;  // sorted ids of stack nodes whose element is a byte set
    bool accepting = false;
    int32_t dist = kUnreachable;  // distance(): bytes to the nearest complete sentence
  };
  void compute_rest();

  void begin_closure();
  int32_t intern_node(int32_t pos, int32_t parent);
  // Expands `stack` until every resulting stack's top is a byte element, collecting them.
  void close(int32_t stack);
  int32_t intern_state();
  int32_t compute_next(int32_t state, uint8_t byte);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<StackNode> nodes_;
  std::vector<int32_t> node_dist_;  // per stack node: bytes to empty the stack from it
  std::vector<int32_t> rest_;       // per element: bytes to finish its alternative from it
  std::unordered_map<uint64_t, int32_t> node_index_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_index_;
  std::vector<int32_t> transitions_;  // state * 256 + byte -> state, kDead or kUnknown
  int32_t initial_ = kDead;

  // Scratch of close(): the stacks found, whether an empty stack was reached, visit stamps.
  std::vector<int32_t> found_, work_;
  bool found_accepting_ = false;
  std::vector<uint32_t> visited_;
  uint32_t stamp_ = 0;
  size_t step_nodes_base_ = 0;  // nodes_.size() when the current step began
  std::vector<uint32_t> pos_stamp_, pos_count_;  // per element: stacks found in this closure
};

}  // namespace edgellm::grammar
