// Constrained decoding hook. The grammar engineer's code (JSON schema, GBNF, regex) plugs in by
// registering a factory at start-up; the engine itself knows only this interface. Per sequence
// the engine calls apply() on the raw logits before the sampler chain, and accept() with every
// token it chose, so the constraint tracks the text generated so far.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace edgellm {

class EngineVocab;

// What a request asked for; at most one field is normally set (empty = absent).
struct ConstraintSpec {
  std::string json_schema;  // JSON schema text ("{}" or any-object for json_object mode)
  std::string grammar;      // GBNF-like grammar text
  std::string regex;        // regular expression the whole output must match
  // Lazy constraint: non-empty = the output is free text until one of these strings appears in
  // it; from the first byte of that string on, the output must follow the grammar (which must
  // start by matching the trigger itself). E.g. "<tool_call>" for Hermes-style tool calls;
  // "^{\"name\"" fires only at the start of the output (after whitespace at most).
  std::vector<std::string> triggers;
  // Budget-aware closing: when the tokens left (max_tokens, or the context) would not otherwise
  // suffice, steer to the nearest complete document so the output still parses.
  bool budget_close = false;
  // Filled in by the engine before make_constraint: the vocabulary whose tokens the constraint
  // masks (token bytes, EOG ids) and the logits row length.
  std::shared_ptr<const EngineVocab> vocab;
  int32_t n_vocab = 0;
  bool empty() const { return json_schema.empty() && grammar.empty() && regex.empty(); }
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint();
  // Sets the logits of tokens that cannot continue a valid output to -inf.
  virtual void apply(float* logits, int n_vocab) = 0;
  // Advances the constraint by the token the sampler chose.
  virtual void accept(int32_t token) = 0;
  // True when the output so far is complete, i.e. end-of-generation is allowed.
  virtual bool is_complete() const = 0;
  // Called before apply(): how many more tokens the sequence may generate (this one included;
  // -1: no limit). Constraints that close within a budget use it; others ignore it.
  virtual void set_remaining(int32_t /*tokens*/) {}
};

using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>(const ConstraintSpec&)>;

// Installs the process-wide factory (replacing any earlier one); an empty function removes it.
void register_constraint_factory(ConstraintFactory factory);
bool has_constraint_factory();
// Builds the constraint for `spec`; throws InvalidRequestError when no factory is registered.
std::unique_ptr<TokenConstraint> make_constraint(const ConstraintSpec& spec);

}  // namespace edgellm
