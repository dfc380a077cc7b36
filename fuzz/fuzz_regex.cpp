// Regex compiler. The input is a pattern. A pattern that parses must print as GBNF (the JSON
// schema converter embeds `pattern` this way) that parses and compiles like the regex itself:
// both automata must agree on every prefix of a few probe strings.
#include "fuzz_util.h"
#include "grammar/grammar.h"

using namespace edgellm;
using namespace edgellm::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  // Bytes after the first NUL are a probe string (a pattern with a NUL byte is still fuzzed:
  // everything up to it).
  const std::string_view pattern = in.until(0);
  const std::string_view probe = in.rest();
  GrammarNode node;
  try {
    node = parse_regex(pattern);
  } catch (const InvalidRequestError&) {
    return 0;
  }
  const std::string gbnf = "root ::= " + to_gbnf(node) + "\n";
  GrammarRules rules;
  try {
    rules = parse_gbnf(gbnf);
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "regex printed as GBNF does not parse: %s\n%s", e.what(), gbnf.c_str());
    std::abort();
  }
  std::shared_ptr<const CompiledGrammar> g1, g2;
  try {
    g1 = CompiledGrammar::from_text(GrammarKind::Regex, pattern);
  } catch (const InvalidRequestError&) {
    return 0;  // too large etc.
  }
  try {
    g2 = CompiledGrammar::compile(rules);
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "regex printed as GBNF does not compile: %s\n%s", e.what(), gbnf.c_str());
    std::abort();
  }
  try {
    GrammarAutomaton a(g1), b(g2);
    int32_t sa = a.initial_state(), sb = b.initial_state();
    FUZZ_CHECK(a.is_accepting(sa) == b.is_accepting(sb));
    for (unsigned char c : probe) {
      sa = a.next(sa, c);
      sb = b.next(sb, c);
      FUZZ_CHECK((sa == GrammarAutomaton::kDead) == (sb == GrammarAutomaton::kDead));
      if (sa == GrammarAutomaton::kDead) break;
      FUZZ_CHECK(a.is_accepting(sa) == b.is_accepting(sb));
    }
  } catch (const InvalidRequestError&) {
  }
  return 0;
}
