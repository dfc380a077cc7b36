// The parsed form shared by the three constraint languages. GBNF text, a regular expression and
// a JSON schema (via GBNF text) all become these nodes before one compiler turns them into the
// byte-level pushdown automaton of grammar.h, so every language gets the same token masks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::grammar {

// Unicode scalar value ranges, inclusive.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

struct GrammarNode {
  enum class Kind {
    Sequence,     // children matched one after another (empty = matches "")
    Alternation,  // any one child
    Literal,      // `text` as raw UTF-8 bytes
    CharClass,    // one character in `ranges` (or, when negated, any character not in them)
    RuleRef,      // the rule named `text`
    Repeat,       // children[0] between min and max times (max < 0: unbounded)
  };
  Kind kind = Kind::Sequence;
  std::vector<GrammarNode> children;
  std::string text;
  CodepointRanges ranges;
  bool negated = false;
  int32_t min = 0, max = -1;
  int32_t line = 0, column = 0;  // where it appeared in the source (RuleRef errors name it)

  static GrammarNode sequence(std::vector<GrammarNode> items = {});
  static GrammarNode alternation(std::vector<GrammarNode> items);
  static GrammarNode literal(std::string bytes);
  static GrammarNode char_class(CodepointRanges ranges, bool negated);
  static GrammarNode rule_ref(std::string name);
  static GrammarNode repeat(GrammarNode item, int32_t min, int32_t max);
  // `item` repeated min..max times, where a quantifier on an item that is itself a repeat
  // x{a,b} is folded into one repeat x{m*a, n*b} when the counts the stack produces are
  // contiguous, i.e. the language is the same: (x?){m,n} = x{0,n}, (x*){m,n} = x*,
  // (x+){m,n} = x{m,}, (x{0,3}){0,311} = x{0,933}, (x{2,3}){1,2} = x{2,6}. Other stacks
  // ((x{2}){2,}: 4, 6, 8, ...) stay nested. The GBNF and regex
  // parsers build every postfix operator with it, so `x+++...` / `(x?)*??...` is one repeat
  // instead of a nest whose automaton blows up (fuzz_gbnf, fuzz_regex, fuzz_json_schema).
  static GrammarNode stacked_repeat(GrammarNode item, int32_t min, int32_t max);
};

struct GrammarRule {
  std::string name;
  GrammarNode body;
  int32_t line = 0, column = 0;
};

// Rules in definition order; the start rule is "root".
struct GrammarRules {
  std::vector<GrammarRule> rules;
};

// Largest repetition count accepted in {m,n} (grammar and regex), as in llama.cpp.
constexpr int32_t kMaxRepetition = 10000;

// GBNF (llama.cpp grammar syntax). Throws InvalidRequestError naming line and column.
GrammarRules parse_gbnf(std::string_view text);

// A regular expression (subset: literals, escapes, classes, `.`, groups, `|`, `* + ? {m,n}`,
// optional ^/$ at the ends). The whole output must match. Throws InvalidRequestError.
GrammarNode parse_regex(std::string_view pattern);

// JSON schema text -> GBNF text whose root matches exactly the JSON texts the converter allows.
// Throws InvalidRequestError naming the schema path at fault.
std::string json_schema_to_gbnf(std::string_view schema_json);

// Prints a node in GBNF syntax (used to embed regex patterns in converted schemas).
std::string to_gbnf(const GrammarNode& node);

// Appends the UTF-8 encoding of `cp`.
void append_utf8(std::string& out, uint32_t cp);

// Decodes one UTF-8 character at s[i] (advancing i); false on invalid input.
bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp);

}  // namespace edgellm::grammar
