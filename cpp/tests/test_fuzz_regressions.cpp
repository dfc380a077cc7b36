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

}  // namespace

int main() {
  test_json_invalid_utf8();
  return test_util::report();
}
