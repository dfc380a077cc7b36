// GBNF parser and compiler. The input is grammar text. A grammar that parses must print back
// (to_gbnf of every rule) into GBNF that parses again and compiles to the same verdicts on the
// probe strings below; a grammar that compiles gets an automaton, whose initial state is built
// and walked over a few bytes.
#include "fuzz_util.h"
#include "grammar/grammar.h"

using namespace edgellm;
using namespace edgellm::grammar;

namespace {

int32_t run(GrammarAutomaton& a, std::string_view s) {
  int32_t st = a.initial_state();
  for (unsigned char c : s) {
    st = a.next(st, c);
    if (st == GrammarAutomaton::kDead) break;
  }
  return st;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  GrammarRules rules;
  try {
    rules = parse_gbnf(text);
  } catch (const InvalidRequestError&) {
    return 0;
  }
  // Printing and parsing again must work for anything the parser accepted.
  std::string printed;
  for (const auto& r : rules.rules) printed += r.name + " ::= " + to_gbnf(r.body) + "\n";
  GrammarRules again;
  try {
    again = parse_gbnf(printed);
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "printed grammar does not parse: %s\n---\n%s---\n", e.what(), printed.c_str());
    std::abort();
  }
  FUZZ_CHECK(again.rules.size() == rules.rules.size());

  std::shared_ptr<const CompiledGrammar> g, g2;
  try {
    g = CompiledGrammar::compile(rules);
  } catch (const InvalidRequestError&) {
    return 0;
  }
  try {
    g2 = CompiledGrammar::compile(again);
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "printed grammar does not compile: %s\n---\n%s---\n", e.what(), printed.c_str());
    std::abort();
  }
  try {
    GrammarAutomaton a(g), b(g2);
    // Probes: prefixes of the input's own literals are the likeliest sentences; plus fixed ones.
    const std::string_view probes[] = {"", "a", "0", "{}", "\"x\"", "ab", " ", "\n", "true", "12", "\xc3\xa9"};
    for (std::string_view p : probes) {
      const int32_t sa = run(a, p), sb = run(b, p);
      FUZZ_CHECK((sa == GrammarAutomaton::kDead) == (sb == GrammarAutomaton::kDead));
      if (sa != GrammarAutomaton::kDead) FUZZ_CHECK(a.is_accepting(sa) == b.is_accepting(sb));
    }
    for (const auto& r : rules.rules) {
      for (const auto* n = &r.body; n; n = n->children.empty() ? nullptr : &n->children[0]) {
        if (n->kind != GrammarNode::Kind::Literal) continue;
        const int32_t sa = run(a, n->text), sb = run(b, n->text);
        FUZZ_CHECK((sa == GrammarAutomaton::kDead) == (sb == GrammarAutomaton::kDead));
        if (sa != GrammarAutomaton::kDead) FUZZ_CHECK(a.is_accepting(sa) == b.is_accepting(sb));
      }
    }
  } catch (const InvalidRequestError&) {
    // state or stack limits
  }
  return 0;
}
