// Grammar automaton and token constraint. Input: byte 0 picks the language (GBNF, regex,
// JSON schema) and the mode; the grammar text runs to the first NUL; the rest drives decoding
// over a small synthetic vocabulary (every single byte, common multi-byte pieces, partial
// UTF-8, an empty piece and an end-of-generation token), as the engine would:
//   each step the allowed-token mask (trie walk + mask cache) must equal a brute-force check of
//   every token against the automaton; EOG is allowed iff the state is accepting; a byte of the
//   input either picks an allowed token (steering deep into the grammar) or tries an arbitrary
//   one, which accept() must refuse with InvalidRequestError exactly when the mask says so.
// Mode bit 0x10 wraps the grammar in a LazyGrammarConstraint with a trigger taken from the
// grammar's first literal-looking bytes, fed the same tokens.
#include <algorithm>

#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/grammar_constraint.h"
#include "grammar/token_trie.h"

using namespace edgellm;
using namespace edgellm::grammar;

namespace {

struct TestVocab {
  std::vector<std::string> pieces;
  std::vector<int32_t> eog;
  std::shared_ptr<const TokenTrie> trie;
};

const TestVocab& vocab() {
  static const TestVocab v = [] {
    TestVocab v;
    for (int b = 0; b < 256; ++b) v.pieces.push_back(std::string(1, char(b)));
    for (const char* p : {"{", "}", "{\"", "\":", "\": ", "\", \"", "\"", "[", "]", ", ", ",", " ", "  ", "\n", "\n  ",
                          "true", "false", "null", "0", "1", "12", "-1", "3.14", "1e5", "\\n", "\\\"", "\\u00e9", "abc",
                          "name", " the", "hello", "Hello", "yes", "no", "\xc3\xa9", "\xc3", "\xa9", "\xe4\xb8\xad",
                          "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80", "aaaa", "a b", "ab", "ba", "<tool_call>", "<",
                          ">", "xyz", "2024-01-01", "T12:00:00Z", "@", ".", "com", "http://", "://", "ftp"})
      v.pieces.push_back(p);
    v.pieces.push_back("");  // an empty piece: never allowed
    v.eog.push_back(int32_t(v.pieces.size()));
    v.pieces.push_back("</s>");  // end of generation
    v.trie = std::make_shared<const TokenTrie>(v.pieces, v.eog);
    return v;
  }();
  return v;
}

bool bit(const std::vector<uint64_t>& m, int32_t t) { return (m[t >> 6] >> (t & 63)) & 1; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const TestVocab& V = vocab();
  const int32_t n = int32_t(V.pieces.size());
  const int32_t eog = V.eog[0];
  fuzz::Reader in(data, size);
  const uint8_t mode = in.byte();
  const std::string_view text = in.until(0);
  const GrammarKind kind = (mode & 3) == 1 ? GrammarKind::Regex : (mode & 3) == 2 ? GrammarKind::JsonSchema
                                                                                   : GrammarKind::Gbnf;
  std::shared_ptr<GrammarContext> ctx;
  try {
    ctx = std::make_shared<GrammarContext>(CompiledGrammar::from_text(kind, text));
  } catch (const InvalidRequestError&) {
    return 0;
  }
  GrammarAutomaton brute(std::shared_ptr<const CompiledGrammar>(ctx, &ctx->grammar()));

  try {
    if (mode & 0x10) {
      // Lazy: free text until the trigger (the grammar's own first bytes: the first sentence
      // the steering below would produce is unknown, so take 1..4 bytes of the input).
      std::string trig(in.until(0).substr(0, 4));
      if (trig.empty()) trig = "{";
      LazyGrammarConstraint lazy(ctx, V.trie, {trig});
      while (in.remaining()) {
        const int32_t t = in.byte() % n;
        try {
          lazy.accept(t);
        } catch (const InvalidRequestError&) {
          break;
        }
        std::vector<float> logits(n, 0.0f);
        lazy.apply(logits.data(), n);
      }
      return 0;
    }

    GrammarConstraint c(ctx, V.trie);
    int32_t state = brute.initial_state();
    for (int step = 0; step < 64 && in.remaining(); ++step) {
      // The mask, through the engine's entry point, against the brute force.
      std::vector<float> logits(n, 0.0f);
      c.apply(logits.data(), n);
      std::vector<uint64_t> mask((n + 63) / 64, 0);
      for (int32_t t = 0; t < n; ++t)
        if (logits[t] == 0.0f) mask[t >> 6] |= uint64_t{1} << (t & 63);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < n; ++t) {
        bool ok;
        if (t == eog) ok = brute.is_accepting(state);
        else if (V.pieces[t].empty()) ok = false;
        else ok = brute.next(state, V.pieces[t]) != GrammarAutomaton::kDead;
        if (ok != bit(mask, t)) {
          std::fprintf(stderr, "mask disagrees with the automaton for token %d at step %d (mask %d)\n", t, step,
                       int(bit(mask, t)));
          std::abort();
        }
        if (ok) allowed.push_back(t);
      }
      FUZZ_CHECK(c.is_complete() == brute.is_accepting(state));
      FUZZ_CHECK(c.can_continue() == brute.can_continue(state));
      if (allowed.empty()) break;

      const uint8_t b = in.byte();
      int32_t t;
      if (b < 0xC0) {
        t = allowed[b % allowed.size()];
      } else {
        t = int32_t((uint32_t(b - 0xC0) << 8 | in.byte()) % uint32_t(n));
      }
      const bool ok = bit(mask, t);
      bool threw = false;
      try {
        c.accept(t);
      } catch (const InvalidRequestError&) {
        threw = true;
      }
      FUZZ_CHECK(threw == !ok);
      if (t == eog && ok) break;  // generation ends
      if (ok) state = brute.next(state, V.pieces[t]);
      FUZZ_CHECK(state != GrammarAutomaton::kDead || !ok);
    }
  } catch (const InvalidRequestError&) {
    // the automaton's state / nesting limits
  }
  return 0;
}
