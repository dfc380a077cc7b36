// Findings of the fuzz harnesses (fuzz/), one check each, so they stay fixed in the ordinary
// ctest run (the harnesses also replay fuzz/regressions/<target>/ under scripts/fuzz.sh).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unistd.h>
#include <string>
#include <vector>

#include "common/errors.h"
#include "gguf/gguf_file.h"
#include "tokenizer/vocab.h"
#include "grammar/grammar.h"
#include "grammar/json_value.h"
#include "test_util.h"

using namespace edgellm;
using namespace edgellm::grammar;

namespace {

using test_util::throws_invalid;


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
  // `+` stacks fold into one repeat (GrammarNode::stacked_repeat); so do `{1,2}` stacks now
  // when the folded count stays within kMaxRepetition (their counts are contiguous); deeper ones
  // stay nested and are refused by the per-step bound.
  auto gbnf = [](int k, bool groups, const char* op = "{1,2}") {
    std::string g = "root ::= \"{\" ";
    if (groups) g += std::string(k, '(') + " sp ";
    else g += "sp";
    for (int i = 0; i < k; ++i) g += groups ? std::string(")") + op : std::string(op);
    return g + " \"}\"\nsp ::= | \" \"\n";
  };
  for (bool groups : {false, true}) {
    CHECK(throws_invalid([&] {
      GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf(24, groups)));
      a.next(a.initial_state(), std::string_view("{ "));
    }));
    // Folded: 24 stacked `+` are one repeat, compile and match at once.
    GrammarAutomaton folded(CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf(24, groups, "+")));
    const int32_t f = folded.next(folded.initial_state(), std::string_view("{   }"));
    CHECK(f != GrammarAutomaton::kDead && folded.is_accepting(f));
    // A few levels are fine and still match.
    GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Gbnf, gbnf(3, groups)));
    const int32_t s = a.next(a.initial_state(), std::string_view("{  }"));
    CHECK(s != GrammarAutomaton::kDead && a.is_accepting(s));
  }
  const std::string re = std::string(24, '(') + " ?" + [] { std::string t; for (int i = 0; i < 24; ++i) t += ")+"; return t; }();
  // The regex parser folds stacked quantifiers on x?, x*, x+ (test_stacked_quantifiers_fold), so
  // the regex forms of these blow-ups are now ordinary: ((( ?)+)+...)+ is " *".
  {
    GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Regex, re));
    const int32_t s = a.next(a.initial_state(), std::string_view("    "));
    CHECK(s != GrammarAutomaton::kDead && a.is_accepting(s));
  }
  // fuzz_grammar_automaton timeout: `\w+@\w+++...` stayed under the per-step bound but rebuilt
  // 2^depth stacks on every byte (stacks waiting on one element are now bounded per state, and
  // the regex folds to \w+@\w+).
  {
    GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Regex, "\\w+@\\w" + std::string(30, '+')));
    const int32_t s = a.next(a.initial_state(), std::string_view("abc@defghijklmnop"));
    CHECK(s != GrammarAutomaton::kDead && a.is_accepting(s));
  }
  GrammarAutomaton few(CompiledGrammar::from_text(GrammarKind::Regex, "\\w+@\\w+++"));
  const int32_t st = few.next(few.initial_state(), std::string_view("abc@defghijklmnop"));
  CHECK(st != GrammarAutomaton::kDead && few.is_accepting(st));
}

// A GGUF file of metadata only, written byte by byte (little-endian).
struct GgufWriter {
  std::string out = std::string("GGUF", 4);
  int n_kv = 0;
  template <class T>
  void put(T v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) { put<uint64_t>(s.size()); out += s; }
  void kv_string(const std::string& k, const std::string& v) { str(k); put<uint32_t>(8); str(v); ++n_kv; }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    str(k); put<uint32_t>(9); put<uint32_t>(8); put<uint64_t>(v.size());
    for (const auto& s : v) str(s);
    ++n_kv;
  }
  void kv_floats(const std::string& k, const std::vector<float>& v) {
    str(k); put<uint32_t>(9); put<uint32_t>(6); put<uint64_t>(v.size());
    for (float x : v) put(x);
    ++n_kv;
  }
  std::string file() const {
    std::string h = std::string("GGUF", 4);
    auto add = [&](auto v) { h.append(reinterpret_cast<const char*>(&v), sizeof v); };
    add(uint32_t{3});
    add(uint64_t{0});
    add(uint64_t(n_kv));
    return h + out.substr(4);
  }
};

// fuzz_gguf: tokenizer.ggml.token_type stored as FLOAT32 with a value beyond int32 (or NaN) was
// converted float -> int32 unchecked (undefined behaviour, UBSan). Now a ModelFormatError.
void test_token_type_out_of_range() {
  for (float bad : {3e9f, -3e9f, std::numeric_limits<float>::quiet_NaN()}) {
    GgufWriter w;
    w.kv_string("tokenizer.ggml.model", "llama");
    w.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
    w.kv_floats("tokenizer.ggml.token_type", {2, 3, 3, bad});
    char path[] = "/tmp/edgellm-fuzz-regression-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    const std::string bytes = w.file();
    CHECK(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    close(fd);
    bool typed = false;
    try {
      auto f = GgufFile::open(path);
      load_vocab(*f);
    } catch (const ModelFormatError& e) {
      typed = std::strstr(e.what(), "token_type") != nullptr;
    }
    std::remove(path);
    CHECK(typed);
  }
}

// A schema with more than 256 optional properties converted to one group nested per optional
// member, which the GBNF parser refused ("groups nested deeper than 256"). The converter now
// starts a rule every 64 levels; the members keep their order and optionality.
void test_many_optional_properties() {
  for (int n : {257, 300, 1000}) {
    std::string schema = "{\"type\": \"object\", \"properties\": {";
    for (int i = 0; i < n; ++i) schema += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": {\"type\": \"integer\"}";
    schema += "}, \"required\": [\"p100\"]}";
    std::shared_ptr<const CompiledGrammar> g;
    try {
      g = CompiledGrammar::from_text(GrammarKind::JsonSchema, schema);
    } catch (const InvalidRequestError& e) {
      std::fprintf(stderr, "%d optional members: %s\n", n, e.what());
    }
    CHECK(g != nullptr);
    if (!g) continue;
    GrammarAutomaton a(g);
    auto accepts = [&](const std::string& doc) {
      const int32_t st = a.next(a.initial_state(), std::string_view(doc));
      return st != GrammarAutomaton::kDead && a.is_accepting(st);
    };
    const std::string last = "\"p" + std::to_string(n - 1) + "\": 3";
    CHECK(accepts("{\"p0\": 1, \"p63\": 1, \"p64\": 1, \"p100\": 2, " + last + "}"));
    CHECK(accepts("{\"p100\": 2}"));
    CHECK(!accepts("{}"));                                  // p100 is required
    CHECK(!accepts("{\"p100\": 2, \"p5\": 1}"));          // out of order
    CHECK(!accepts("{\"p5\": 1, \"p5\": 1, \"p100\": 2}"));  // twice
  }
}


// A `pattern` with ~250 stacked quantifiers (\\d+++...*++...) was accepted by the regex parser,
// but printed as GBNF one group per quantifier, nested past the GBNF parser's limit of 256. The
// regex parser folds a quantifier on x?, x* or x+ into one repeat where the language is the
// same; the folded forms still match exactly what the stack does.
void test_stacked_quantifiers_fold() {
  std::string pattern = "^\\\\d{4}\\\\d";
  for (int i = 0; i < 240; ++i) pattern += (i % 37 == 5) ? "*" : "+";
  const std::string schema = "{\"pattern\": \"" + pattern + "E\"}";
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = CompiledGrammar::from_text(GrammarKind::JsonSchema, schema);
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "stacked quantifiers: %s\n", e.what());
  }
  CHECK(g != nullptr);
  auto matches = [](const char* re, const std::string& s) {
    GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Regex, re));
    const int32_t st = a.next(a.initial_state(), std::string_view(s));
    return st != GrammarAutomaton::kDead && a.is_accepting(st);
  };
  // (x?){2,3} = x{0,3}; (x+){2} = x{2,}; (x*)+ = x*; (x{2}){2,} stays 4, 6, 8, ...
  CHECK(matches("(a?){2,3}", "") && matches("(a?){2,3}", "aaa") && !matches("(a?){2,3}", "aaaa"));
  CHECK(!matches("(a+){2}", "a") && matches("(a+){2}", "aa") && matches("(a+){2}", "aaaaa"));
  CHECK(matches("(a*)+", "") && matches("(a*)+", "aaaa"));
  CHECK(matches("(a{2}){2,}", "aaaa") && !matches("(a{2}){2,}", "aaaaa") && matches("(a{2}){2,}", "aaaaaa"));
  CHECK(matches("a+?", "aa") && !matches("a+?", ""));
  // fuzz_regex timeout (fuzz/regressions/regex/timeout-stacked-bounded): `.{0,3}{,311}` nested
  // 311 copies of an optional triple (4 s of CPU for one 1 KB pattern); bounded stacks whose
  // counts are contiguous fold too now. Every (a{p,q}){r,s} small enough to enumerate matches
  // exactly the counts of the union of [j*p, j*q] over j in [r, s], folded or not.
  for (int p = 0; p <= 3; ++p)
    for (int q = p; q <= 4; ++q)
      for (int r = 0; r <= 3; ++r)
        for (int sm = r; sm <= 4; ++sm) {
          if (q == 0 || sm == 0) continue;
          const std::string re = "(a{" + std::to_string(p) + "," + std::to_string(q) + "}){" + std::to_string(r) + "," +
                                 std::to_string(sm) + "}";
          GrammarAutomaton a(CompiledGrammar::from_text(GrammarKind::Regex, re));
          bool all = true;
          for (int n = 0; n <= q * sm + 2; ++n) {
            bool want = false;
            for (int j = r; j <= sm; ++j) want = want || (n >= j * p && n <= j * q);
            const int32_t st = a.next(a.initial_state(), std::string_view(std::string(n, 'a')));
            const bool got = st != GrammarAutomaton::kDead && a.is_accepting(st);
            if (got != want) {
              std::fprintf(stderr, "%s on %d a's: %d, want %d\n", re.c_str(), n, got, want);
              all = false;
            }
          }
          CHECK(all);
        }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(matches(".{0,3}{,311}e", std::string(900, 'x') + "e") && !matches(".{0,3}{,311}e", std::string(934, 'x') + "e"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // A fold past kMaxRepetition (fuzz/regressions/regex/fold-past-repetition-limit) would print
  // as GBNF that does not parse: such stacks stay nested and print back as parseable GBNF.
  const GrammarNode big = parse_regex("a{0,100}{0,200}");
  CHECK(!throws_invalid([&] { parse_gbnf("root ::= " + to_gbnf(big) + "\n"); }));
}

}  // namespace

int main() {
  test_stacked_quantifiers_fold();
  test_many_optional_properties();
  test_token_type_out_of_range();
  test_json_invalid_utf8();
  test_exponential_closure_refused();
  return test_util::report();
}
