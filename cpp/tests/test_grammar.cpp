// Grammar engine: UTF-8 class expansion against a brute-force decoder, the trie mask walk
// against a token-by-token check, mask caching, tail calls keeping repetition stacks flat,
// and error reporting.
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "grammar/grammar.h"
#include "grammar/grammar_constraint.h"
#include "grammar/token_trie.h"
#include "test_util.h"

using namespace edgellm;
using namespace edgellm::grammar;

namespace {

using test_util::throws_invalid;

bool accepts(GrammarAutomaton& a, const std::string& s) {
  const int32_t st = a.next(a.initial_state(), s);
  return st != GrammarAutomaton::kDead && a.is_accepting(st);
}

bool prefix_ok(GrammarAutomaton& a, const std::string& s) { return a.next(a.initial_state(), s) != GrammarAutomaton::kDead; }


void test_utf8_classes() {
  // A negated class mixing ASCII and multi-byte ranges: every scalar value is tested via its
  // encoding (sampled), plus every boundary of the UTF-8 length classes.
  auto g = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= [^a-z\\u00e9\\u4e00-\\u9fff\\U0001F600]");
  GrammarAutomaton a(g);
  auto in_class = [](uint32_t cp) {
    return !((cp >= 'a' && cp <= 'z') || cp == 0xE9 || (cp >= 0x4E00 && cp <= 0x9FFF) || cp == 0x1F600);
  };
  std::vector<uint32_t> cps = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF, 0xD7FF, 0xE000,
                               0xE8, 0xE9, 0xEA, 0x4DFF, 0x4E00, 0x9FFF, 0xA000, 0x1F5FF, 0x1F600, 0x1F601};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    uint32_t cp = rng() % 0x110000;
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    cps.push_back(cp);
  }
  int wrong = 0;
  for (uint32_t cp : cps) {
    std::string s;
    append_utf8(s, cp);
    if (accepts(a, s) != in_class(cp)) ++wrong;
  }
  CHECK(wrong == 0);
  // Invalid UTF-8 never matches '.', and a lone lead byte is a live prefix only when it can start a character.
  auto dot = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= .");
  GrammarAutomaton d(dot);
  CHECK(!prefix_ok(d, "\x80"));
  CHECK(!prefix_ok(d, "\xC0"));  // overlong lead
  CHECK(!prefix_ok(d, "\xED\xA0"));  // surrogate
  CHECK(prefix_ok(d, "\xE4\xB8"));
  CHECK(!accepts(d, "\xE4\xB8"));
  CHECK(accepts(d, "\xE4\xB8\x80"));
  CHECK(!prefix_ok(d, "\xF4\x90"));  // past U+10FFFF
}

void test_repetition_and_tail_calls() {
  auto g = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= (\"ab\" | \"c\")* \"!\"");
  GrammarAutomaton a(g);
  std::string s;
  for (int i = 0; i < 500; ++i) s += (i % 3 ? "ab" : "c");
  int32_t st = a.next(a.initial_state(), s);
  CHECK(st != GrammarAutomaton::kDead);
  // Repetition without nesting must not create new states per iteration.
  CHECK(a.n_states() < 20);
  CHECK(a.is_accepting(a.next(st, std::string("!"))));

  auto b = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= [0-9]{2,4}");
  GrammarAutomaton ba(b);
  CHECK(!accepts(ba, "1"));
  CHECK(accepts(ba, "12"));
  CHECK(accepts(ba, "1234"));
  CHECK(!accepts(ba, "12345"));

  // Nullable item inside a star: terminates, accepts the empty string.
  auto n = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= (\"a\"?)*");
  GrammarAutomaton na(n);
  CHECK(accepts(na, ""));
  CHECK(accepts(na, "aaaa"));
}

void test_recursion() {
  auto g = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= \"(\" root \")\" | \"x\"");
  GrammarAutomaton a(g);
  CHECK(accepts(a, "x"));
  CHECK(accepts(a, "(((x)))"));
  CHECK(!accepts(a, "((x)"));
  CHECK(!prefix_ok(a, "(x))"));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= a\na ::= b \"x\"\nb ::= a | \"y\""); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= \"a\" undefined-rule"); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= \"a\"{3,2}"); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::Regex, "(a"); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::Regex, "a\\1"); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::JsonSchema, "{\"type\": \"strin\"}"); }));
  CHECK(throws_invalid([] { CompiledGrammar::from_text(GrammarKind::JsonSchema, "{\"type\": "); }));
  try {
    CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= \"a\"\n  | \"b\" )");
    CHECK(false);
  } catch (const InvalidRequestError& e) {
    CHECK(std::string(e.what()).find("line 2") != std::string::npos);
  }
}

// A random vocabulary over a small alphabet (with multi-byte characters and split UTF-8).
std::vector<std::string> random_vocab(std::mt19937& rng, int n) {
  const std::vector<std::string> atoms = {"a", "b", "{", "}", "\"", ":", ",", " ", "1", "0", "-", "\xC3\xA9",
                                          "\xC3", "\xA9", "\xE2\x82\xAC", "\n", "x", "[", "]"};
  std::vector<std::string> v(static_cast<size_t>(n));
  for (auto& p : v) {
    const int len = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < len; ++k) p += atoms[rng() % atoms.size()];
  }
  v[3] = "";       // an empty piece is never allowed
  v[5] = v[6];     // duplicate pieces share a trie node
  return v;
}

void test_trie_masks() {
  std::mt19937 rng(11);
  auto vocab = random_vocab(rng, 3000);
  const std::vector<int32_t> eog = {0};
  auto trie = std::make_shared<const TokenTrie>(vocab, eog);
  const char* schema =
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"type":"array","items":{"type":"integer","minimum":-5,"maximum":12}}},"required":["a"]})";
  auto ctx = grammar_context(GrammarKind::JsonSchema, schema);
  GrammarConstraint c(ctx, trie);
  // Walk a valid document token by token (chosen from allowed tokens), checking each mask
  // against a brute-force test of every token.
  std::string text;
  int mismatches = 0, steps = 0;
  for (; steps < 40; ++steps) {
    const auto allowed = c.allowed_tokens();
    std::vector<char> is_allowed(vocab.size(), 0);
    for (int32_t t : allowed) is_allowed[t] = 1;
    const int32_t state = ctx->advance(ctx->initial_state(), text);
    for (size_t t = 0; t < vocab.size(); ++t) {
      bool expect;
      if (t == 0) expect = ctx->is_accepting(state);
      else expect = !vocab[t].empty() && ctx->advance(state, vocab[t]) != GrammarAutomaton::kDead;
      if (expect != static_cast<bool>(is_allowed[t])) ++mismatches;
    }
    CHECK(!allowed.empty());
    if (allowed.empty()) break;
    if (c.is_complete()) break;
    // Prefer non-EOG tokens that keep the output short: pick deterministically.
    int32_t pick = allowed[rng() % allowed.size()];
    if (pick == 0 && allowed.size() > 1) pick = allowed[1];
    c.accept(pick);
    text += vocab[pick];
  }
  CHECK(mismatches == 0);
  // apply() agrees with allowed_tokens().
  std::vector<float> logits(vocab.size() + 10, 1.0f);
  c.apply(logits.data(), static_cast<int>(logits.size()));
  const auto allowed = c.allowed_tokens();
  size_t finite = 0;
  for (float x : logits) finite += std::isfinite(x) ? 1 : 0;
  CHECK(finite == allowed.size());
  // Masks of a state are cached: asking again is a hit.
  const auto before = ctx->stats();
  c.allowed_tokens();
  const auto after = ctx->stats();
  CHECK(after.mask_hits == before.mask_hits + 1);
  CHECK(after.mask_misses == before.mask_misses);
  // A rejected token leaves the state unchanged and throws.
  CHECK(throws_invalid([&] {
    for (size_t t = 1; t < vocab.size(); ++t)
      if (!vocab[t].empty() && ctx->advance(ctx->initial_state(), text + vocab[t]) == GrammarAutomaton::kDead) {
        c.accept(static_cast<int32_t>(t));
        return;
      }
  }));
}


// Lazy grammar: free text until the trigger; then the grammar from the trigger's first byte,
// also when the trigger is split across tokens or shares a token with text before it.
void test_lazy_trigger() {
  const std::vector<std::string> vocab = {"<eos>", "hi", " <", "tool", ">", "{", "}", "\"a\"", ":", "1", "x", "<tool>"};
  const std::vector<int32_t> eog = {0};
  auto trie = std::make_shared<const TokenTrie>(vocab, eog);
  auto ctx = grammar_context(GrammarKind::Gbnf, "root ::= \"<tool>\" \"{\" \"\\\"a\\\"\" \":\" [0-9]+ \"}\"");
  auto finite = [&](LazyGrammarConstraint& c) {
    std::vector<float> logits(vocab.size(), 0.0f);
    c.apply(logits.data(), static_cast<int>(logits.size()));
    std::vector<int32_t> out;
    for (size_t t = 0; t < logits.size(); ++t)
      if (std::isfinite(logits[t])) out.push_back(static_cast<int32_t>(t));
    return out;
  };
  {  // split trigger: " <" + "tool" + ">"
    LazyGrammarConstraint c(ctx, trie, {"<tool>"});
    c.accept(1);  // "hi": free text, nothing masked, EOG allowed
    CHECK(!c.active() && c.is_complete() && finite(c).size() == vocab.size());
    c.accept(2);
    c.accept(3);
    CHECK(!c.active());
    c.accept(4);  // completes "<tool>"
    CHECK(c.active() && !c.is_complete());
    CHECK(finite(c) == std::vector<int32_t>{5});  // only "{" may follow
    c.accept(5);
    c.accept(7);
    c.accept(8);
    c.accept(9);
    CHECK(!c.is_complete());
    c.accept(6);
    CHECK(c.is_complete());
    CHECK(finite(c) == std::vector<int32_t>{0});  // only end of generation is left
    CHECK(throws_invalid([&] { c.accept(10); }));
  }
  {  // the trigger as one token; text that breaks the grammar afterwards is refused
    LazyGrammarConstraint c(ctx, trie, {"<tool>"});
    c.accept(10);
    c.accept(11);
    CHECK(c.active());
    CHECK(throws_invalid([&] { c.accept(10); }));
  }
  {  // bytes after the trigger in the same piece are fed to the grammar
    LazyGrammarConstraint c(ctx, trie, {"<tool>", "@@"});
    c.accept_text("so <tool>{\"a\":");
    CHECK(c.active() && finite(c) == std::vector<int32_t>{9});
  }
  {  // a trigger that would start inside earlier text but was never completed does not fire
    LazyGrammarConstraint c(ctx, trie, {"<tool>"});
    c.accept_text("<too");
    c.accept_text("l!> <tool");
    CHECK(!c.active());
    c.accept_text(">{");
    CHECK(c.active());
  }
  {  // an anchored trigger fires at the start (after whitespace) only
    LazyGrammarConstraint c(ctx, trie, {"^<tool>"});
    c.accept_text(" \n <to");
    c.accept_text("ol>{");
    CHECK(c.active());
    LazyGrammarConstraint d(ctx, trie, {"^<tool>"});
    d.accept_text("x <tool>{");
    CHECK(!d.active());
  }
  CHECK(throws_invalid([&] { LazyGrammarConstraint c(ctx, trie, {""}); }));
}

// Control and EOG tokens never match grammar text (issue 17 item 3): a control token whose bytes
// would fit a JSON string is not allowed inside it, nor may ordinary tokens spell its text; EOG
// is allowed only where the grammar may end. The same holds once a lazy grammar is active.
void test_special_tokens_excluded() {
  // 0 <|im_end|> (EOG, control)   1 <|im_start|> (control)   2.. ordinary tokens
  const std::vector<std::string> vocab = {"<|im_end|>", "<|im_start|>", "{", "}", "\"", "a", "b", "<|", "im",
                                          "_end", "|>", "x<|im_start|>", "<", "|", ">", "_start", "<tool>", ":", "1"};
  const std::vector<int32_t> eog = {0};
  const std::vector<std::pair<int32_t, std::string>> special = {{0, "<|im_end|>"}, {1, "<|im_start|>"}};
  auto trie = std::make_shared<const TokenTrie>(vocab, eog, special);
  auto ctx = grammar_context(GrammarKind::JsonSchema, R"({"type":"string"})");
  GrammarConstraint c(ctx, trie);
  CHECK(c.accept_bytes("\"a"));  // inside the string: every byte but '"' '\\' and controls fits
  auto allowed = [&](GrammarConstraint& k) {
    const auto v = k.allowed_tokens();
    return std::set<int32_t>(v.begin(), v.end());
  };
  std::set<int32_t> a = allowed(c);
  CHECK(!a.count(0) && !a.count(1));  // special tokens: never text
  CHECK(a.count(5) && a.count(7) && a.count(12));  // ordinary text, also "<|" and "<"
  CHECK(!a.count(11));  // an ordinary token whose bytes contain a special text
  CHECK(throws_invalid([&] { c.accept(1); }));
  // Spelling "<|im_end|>" out of ordinary tokens: the last step is refused.
  c.accept(7);
  c.accept(8);
  c.accept(9);
  a = allowed(c);
  CHECK(!a.count(10));  // "|>" would complete "<|im_end|>"
  CHECK(a.count(13) && a.count(14) && a.count(5));  // "|" alone does not, nor ">"
  CHECK(throws_invalid([&] { c.accept(10); }));
  c.accept(13);  // "<|im_end|" then '>' is refused
  a = allowed(c);
  CHECK(!a.count(14) && a.count(4));
  CHECK(!c.accept_bytes(">"));
  c.accept(4);  // closing quote: complete, EOG now allowed
  CHECK(c.is_complete() && allowed(c) == std::set<int32_t>{0});
  c.accept(0);
  // The mask agrees with a brute-force check of every token through the byte path.
  {
    GrammarConstraint d(ctx, trie);
    CHECK(d.accept_bytes("\"ab"));
    const std::set<int32_t> got = allowed(d);
    for (int32_t t = 2; t < static_cast<int32_t>(vocab.size()); ++t) {
      GrammarConstraint e(ctx, trie);
      CHECK(e.accept_bytes("\"ab"));
      CHECK(e.accept_bytes(vocab[t]) == static_cast<bool>(got.count(t)));
    }
  }
  // Lazy: free text (special tokens included) before the trigger; afterwards the same rule.
  auto gctx = grammar_context(GrammarKind::Gbnf, "root ::= \"<tool>\" \"\\\"\" [^\"]* \"\\\"\"");
  LazyGrammarConstraint lz(gctx, trie, {"<tool>"});
  std::vector<float> logits(vocab.size(), 0.0f);
  lz.apply(logits.data(), static_cast<int>(logits.size()));
  for (float x : logits) CHECK(std::isfinite(x));
  lz.accept(1);
  lz.accept(16);
  lz.accept(4);
  CHECK(lz.active());
  logits.assign(vocab.size(), 0.0f);
  lz.apply(logits.data(), static_cast<int>(logits.size()));
  CHECK(!std::isfinite(logits[0]) && !std::isfinite(logits[1]) && std::isfinite(logits[5]));
  CHECK(throws_invalid([&] { lz.accept(0); }));
}

// Shortest completion per state, and budget-aware closing: with the budget set, the walk ends in a
// complete document within it; without, it need not.
void test_budget_close() {
  auto g = CompiledGrammar::from_text(GrammarKind::Gbnf, "root ::= \"{\" item (\",\" item)* \"}\"\nitem ::= [a-z]+ \":\" [0-9]{2,3}");
  GrammarAutomaton a(g);
  CHECK(a.distance(a.initial_state()) == 6);  // {a:00}
  CHECK(a.distance(a.next(a.initial_state(), std::string("{abc"))) == 4);
  CHECK(a.distance(a.next(a.initial_state(), std::string("{a:1"))) == 2);
  CHECK(a.distance(a.next(a.initial_state(), std::string("{a:12}"))) == 0);

  std::vector<std::string> vocab = {"<eos>"};
  for (int b = 32; b < 127; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (const char* w : {"hello", "world", "abc", ":12", "123", ",x", "\"", "{\"", "\":\"", "\"}", "longer"})
    vocab.push_back(w);
  auto trie = std::make_shared<const TokenTrie>(vocab, std::vector<int32_t>{0});
  const char* schema =
      R"({"type":"object","properties":{"bio":{"type":"string","minLength":1},"tags":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["bio","tags"],"additionalProperties":false})";
  auto ctx = grammar_context(GrammarKind::JsonSchema, schema);
  // A "model" that prefers long words: without budget closing the string never ends.
  auto run = [&](bool close, int max_tokens, std::string& text) {
    GrammarConstraint c(ctx, trie, close);
    text.clear();
    for (int i = 0; i < max_tokens; ++i) {
      c.set_remaining(max_tokens - i);
      std::vector<float> logits(vocab.size());
      for (size_t t = 0; t < vocab.size(); ++t) logits[t] = static_cast<float>(vocab[t].size());
      logits[0] = -1.0f;  // EOG least liked
      c.apply(logits.data(), static_cast<int>(logits.size()));
      int32_t best = -1;
      for (size_t t = 0; t < vocab.size(); ++t)
        if (std::isfinite(logits[t]) && (best < 0 || logits[t] > logits[best])) best = static_cast<int32_t>(t);
      CHECK(best >= 0);
      if (best < 0) return false;
      c.accept(best);
      if (best == 0) return true;
      text += vocab[best];
    }
    return c.is_complete();
  };
  std::string text;
  CHECK(!run(false, 30, text));
  for (int budget : {26, 30, 40, 64}) {
    CHECK(run(true, budget, text));
    CHECK(ctx->advance(ctx->initial_state(), text) != GrammarAutomaton::kDead &&
          ctx->is_accepting(ctx->advance(ctx->initial_state(), text)));
  }
  // A budget too small for the shortest document: best effort, each token brings it closer.
  CHECK(!run(true, 5, text));
  CHECK(ctx->distance(ctx->advance(ctx->initial_state(), text)) <
        ctx->distance(ctx->advance(ctx->initial_state(), std::string(""))));
}

}  // namespace

int main() {
  test_utf8_classes();
  test_repetition_and_tail_calls();
  test_recursion();
  test_trie_masks();
  test_lazy_trigger();
  test_special_tokens_excluded();
  test_budget_close();
  return test_util::report();
}
