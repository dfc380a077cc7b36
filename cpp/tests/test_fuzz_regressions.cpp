// Findings of the fuzz harnesses (fuzz/), one check each, so they stay fixed in the ordinary
// ctest run (the harnesses also replay fuzz/regressions/<target>/ under scripts/fuzz.sh).
#include <string>

#include "common/errors.h"
#include "grammar/grammar.h"
#include "grammar/json_value.h"
#include "test_util.h"

using namespace edgellm;
using namespace edgellm::grammar;

namespace {

template <class F>
bool throws_invalid(F f) {
  try {
    f();
  } catch (const InvalidRequestError&) {
    return true;
  }
  return false;
}

// fuzz_json_schema: a schema whose strings hold invalid UTF-8 was accepted by the converter and
// produced GBNF the grammar parser then refused ("invalid UTF-8 in grammar text"). JSON text is
// UTF-8 (RFC 8259 section 8.1): the JSON reader refuses it, naming the offset.
void test_json_invalid_utf8() {
  CHECK(throws_invalid([] { parse_json("\"\xff\"", "t"); }));
  CHECK(throws_invalid([] { parse_json("\"a\xc3\"", "t"); }));          // cut short
  CHECK(throws_invalid([] { parse_json("\"\xc0\xaf\"", "t"); }));       // overlong
  CHECK(throws_invalid([] { parse_json("\"\xed\xa0\x80\"", "t"); }));   // surrogate
  CHECK(throws_invalid([] { json_schema_to_gbnf("{\"const\": \"\xff\"}"); }));
  CHECK(parse_json("\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"", "t").text == "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
  // Valid UTF-8 in names and constants still converts and compiles.
  CHECK(CompiledGrammar::from_text(GrammarKind::JsonSchema, "{\"const\": \"\xc3\xa9\"}") != nullptr);
}

// fuzz_gbnf timeout: nested repetitions of an item that may be empty (`sp+++...`, or
// `((( sp )+)+)+...` with `sp ::= | " "`) double the parser stacks per level, so a 60-byte
// grammar took over a minute and 1.5 GB. One step's expansion is now bounded
// (GrammarAutomaton::kMaxNewNodesPerStep) and such a grammar is refused quickly.
void test_exponential_closure_refused() {
  auto gbnf = [](int k, bool groups) {
    std::string g = "root ::= \"{\" ";
    if (groups) g += std::string(k, '(') + " sp ";
    else g += "sp";
    for (int i = 0; i < k; ++i) g += groups ? ")+" : "+";
    return g + " \"}\"\nsp ::= | \" \"\n";
  };
  for (bool groups : {false, true}) {
    CHECK(throws_invalid([&] {
      GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf(24, groups)));
      a.next(a.initial_state(), std::string_view("{ "));
    }));
    // A few levels are fine and still match.
    GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf(3, groups)));
    const int32_t s = a.next(a.initial_state(), std::string_view("{  }"));
    CHECK(s != GrammarAutomaton::kDead && a.is_accepting(s));
  }
  const std::string re = std::string(24, '(') + " ?" + [] { std::string t; for (int i = 0; i < 24; ++i) t += ")+"; return t; }();
  CHECK(throws_invalid([&] { GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Regex, re)); }));
}

}  // namespace

int main() {
  test_json_invalid_utf8();
  test_exponential_closure_refused();
  return test_util::report();
}
