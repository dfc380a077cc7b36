// JSON schema -> GBNF converter. The input is schema text. A schema the converter accepts
// must give GBNF that parses and compiles (a converted grammar that fails is the converter's
// bug, not the user's), and whose automaton can be built.
#include "fuzz_util.h"
#include "grammar/grammar.h"

using namespace edgellm;
using namespace edgellm::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string gbnf;
  try {
    gbnf = json_schema_to_gbnf(text);
  } catch (const InvalidRequestError&) {
    return 0;
  }
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf);
  } catch (const InvalidRequestError& e) {
    const std::string msg = e.what();
    // Size limits are a legitimate refusal of a huge schema; anything else is a converter bug.
    if (msg.find("too large") == std::string::npos && msg.find("exceeds") == std::string::npos) {
      std::fprintf(stderr, "converted schema does not compile: %s\n---\n%s---\n", e.what(), gbnf.c_str());
      std::abort();
    }
    return 0;
  }
  try {
    GrammarAutomaton a(g);
    int32_t st = a.initial_state();
    for (unsigned char c : std::string_view("{\"a\": [1, \"x\", null, true]}")) {
      st = a.next(st, c);
      if (st == GrammarAutomaton::kDead) break;
    }
  } catch (const InvalidRequestError&) {
  }
  return 0;
}
