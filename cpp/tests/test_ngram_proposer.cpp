// NgramProposer (prompt lookup): the indexed proposer against a brute-force rescan of the whole
// history on randomized histories with pushes and rollbacks (small alphabets so matches happen,
// extreme int32 ids), hand-written cases (code edit, quoted passage, self-overlap, no match,
// longest-then-most-recent), and the per-step cost at a 32k-token history (printed, not asserted).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/ngram_proposer.h"
#include "test_util.h"

using edgellm::NgramProposer;

namespace {

struct RefResult {
  std::vector<int32_t> tokens;
  int n = 0;
  size_t end = 0;
};

// The rule, by rescanning: longest n first; for it, the latest earlier occurrence of the last n
// tokens; its continuation up to k tokens, continuing from the proposal itself past the end.
RefResult reference(const std::vector<int32_t>& h, int max_n, int min_n, int k) {
  RefResult r;
  const size_t s = h.size();
  for (int n = max_n; n >= min_n && r.n == 0; --n) {
    if (s <= static_cast<size_t>(n)) continue;
    for (size_t e = s - 1; e >= static_cast<size_t>(n); --e) {
      bool eq = true;
      for (int i = 1; i <= n && eq; ++i) eq = h[e - i] == h[s - i];
      if (eq) {
        r.n = n;
        r.end = e;
        break;
      }
    }
  }
  if (r.n == 0 || k <= 0) return r;
  std::vector<int32_t> ext = h;
  for (int j = 0; j < k; ++j) {
    ext.push_back(ext[r.end + j]);
    r.tokens.push_back(ext.back());
  }
  return r;
}

bool agrees(const NgramProposer& p, int k) {
  std::vector<int32_t> got;
  const NgramProposer::Match m = p.propose(k, &got);
  const RefResult want = reference(p.history(), p.max_n(), p.min_n(), k);
  const NgramProposer::Match fm = p.find_match();
  bool ok = got == want.tokens && fm.n == want.n && (want.n == 0 || fm.end == want.end);
  if (k > 0) ok = ok && m.n == fm.n && m.end == fm.end;
  return ok;
}

// Words → ids for the hand-written cases.
struct Vocab {
  std::map<std::string, int32_t> ids;
  std::vector<int32_t> operator()(const std::string& text) {
    std::vector<int32_t> out;
    std::istringstream in(text);
    std::string w;
    while (in >> w) {
      auto it = ids.emplace(w, static_cast<int32_t>(ids.size()) * 7919 - 40000).first;
      out.push_back(it->second);
    }
    return out;
  }
};

void test_randomized() {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> values = {0, kMin, kMax, -1, 1, kMin + 1, kMax - 1, 65535};
  const std::vector<std::pair<int, int>> configs = {{4, 1}, {3, 2}, {1, 1}, {6, 3}, {2, 1}};
  int mismatches = 0, checks = 0, with_match = 0;
  size_t longest = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    const auto cfg = configs[seed % configs.size()];
    const int alphabet = 1 + static_cast<int>(rng() % 5);  // 1..5 symbols
    NgramProposer p(cfg.first, cfg.second);
    std::vector<int32_t> shadow;
    auto tok = [&] { return values[rng() % alphabet]; };
    const int ops = seed % 10 == 0 ? 2500 : 250;  // every tenth seed grows a longer history
    for (int op = 0; op < ops; ++op) {
      const uint32_t r = rng() % 100;
      if (r < 65) {
        const int32_t t = tok();
        p.push(t);
        shadow.push_back(t);
      } else if (r < 75) {
        std::vector<int32_t> burst(rng() % 20);
        for (auto& t : burst) t = tok();
        p.push(burst);
        shadow.insert(shadow.end(), burst.begin(), burst.end());
      } else if (r < 99) {
        const size_t back = rng() % 7;  // a rejected draft of up to 6 tokens (or more than all)
        const size_t keep = back >= shadow.size() ? 0 : shadow.size() - back;
        p.truncate(keep);
        shadow.resize(keep);
      } else {
        p.clear();
        shadow.clear();
      }
      if (p.history() != shadow) ++mismatches;
      for (int k : {0, 1, 1 + static_cast<int>(rng() % 10)}) {
        ++checks;
        if (!agrees(p, k)) {
          if (mismatches < 5)
            std::fprintf(stderr, "mismatch: seed %u op %d size %zu k %d\n", seed, op, p.size(), k);
          ++mismatches;
        }
      }
      if (p.find_match().n > 0) ++with_match;
      longest = std::max(longest, p.size());
    }
  }
  std::printf(
      "randomized: 400 seeds, %d checks against the rescan (histories up to %zu tokens), %d"
      " states with a match, %d mismatches\n",
      checks, longest, with_match, mismatches);
  CHECK(mismatches == 0);
  CHECK(with_match > checks / 6);  // the small alphabets do produce matches
}

void test_edges() {
  NgramProposer p;  // max_n 4, min_n 1
  CHECK(p.size() == 0);
  CHECK(p.find_match().n == 0);
  CHECK(p.propose(5).empty());
  CHECK(p.propose(0).empty());
  p.push(7);
  CHECK(p.propose(5).empty());  // one token: nothing earlier to match
  p.push(9);
  CHECK(p.propose(5).empty());  // no repetition
  p.truncate(100);              // longer than the history: no-op
  CHECK(p.size() == 2);
  p.push(7);  // 7 9 7: the 1-gram "7" occurred at end 1, followed by 9 7, then the period goes on
  CHECK(p.find_match().n == 1);
  CHECK(p.find_match().end == 1);
  CHECK((p.propose(5) == std::vector<int32_t>{9, 7, 9, 7, 9}));
  CHECK(p.propose(0).empty());
  std::vector<int32_t> out = {1, 2, 3};
  const auto m0 = p.propose(0, &out);
  CHECK(out.empty() && m0.n == 0);
  CHECK(p.propose(-3).empty());

  // History shorter than max_n: shorter n-grams still match.
  NgramProposer q(4, 2);
  q.push({5, 5});
  CHECK(q.propose(3).empty());  // n = 2 needs an occurrence ending before the last position
  q.push(5);                    // 5 5 5: "5 5" at end 2, followed by the current position
  CHECK(q.find_match().n == 2);
  CHECK((q.propose(3) == std::vector<int32_t>{5, 5, 5}));

  // Invalid configurations.
  bool threw = false;
  try {
    NgramProposer bad(2, 3);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    NgramProposer bad(4, 0);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    NgramProposer bad(NgramProposer::kMaxNgram + 1, 1);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

void test_self_overlap() {
  // "a a a a": the latest earlier occurrence of "a a a" ends one before the current position;
  // the proposal continues the period (length 1) for all k tokens.
  NgramProposer p;
  p.push({42, 42, 42, 42});
  CHECK(p.find_match().n == 3);
  CHECK(p.find_match().end == 3);
  CHECK((p.propose(6) == std::vector<int32_t>(6, 42)));
  // Period 2: x y x y x → y x y x y.
  NgramProposer q;
  q.push({1, 2, 1, 2, 1});
  CHECK(q.find_match().n == 3);  // "1 2 1" ending at 3; "2 1 2 1" has no earlier occurrence
  CHECK((q.propose(5) == std::vector<int32_t>{2, 1, 2, 1, 2}));
  // Period 3 with a longer history: the proposal is the repeating cycle.
  NgramProposer r;
  for (int i = 0; i < 30; ++i) r.push(i % 3 - 1);  // -1 0 1 -1 0 1 ...
  CHECK((r.propose(7) == std::vector<int32_t>{-1, 0, 1, -1, 0, 1, -1}));
}

void test_code_edit() {
  // The prompt holds a function; the answer returns it with foo renamed to bar. Once the
  // renamed header is written, the body is proposed from the prompt; once the output repeats a
  // line it already rewrote, its own newer copy (with bar) is the source.
  Vocab v;
  NgramProposer p;
  p.push(v("Rename foo to bar : def foo ( a , b ) : NL x = foo ( a - 1 , b ) NL return x + b NL"));
  p.push(v("def bar ( a , b ) :"));
  CHECK(p.find_match().n == 4);  // ", b ) :"
  CHECK((p.propose(6) == v("NL x = foo ( a")));  // the draft runs into the rename: "foo" is wrong
  // The model writes the renamed call. Right after it the most recent "bar (" is the header's
  // (a wrong draft); one token later "( a -" picks the prompt's body up again.
  p.push(v("NL x = bar ("));
  CHECK((p.propose(3) == v("a , b")));
  p.push(v("a -"));
  CHECK((p.propose(5) == v("1 , b ) NL")));
  p.push(v("1 , b ) NL return x + b NL"));
  // A second pass over the same body: ": NL x =" now also occurs in the output, the most recent
  // occurrence, so the renamed version is proposed rather than the prompt's.
  p.push(v("def bar ( a , b ) : NL x ="));
  CHECK(p.find_match().n == 4);
  CHECK((p.propose(2) == v("bar (")));
}

void test_quoted_passage() {
  Vocab v;
  NgramProposer p;
  p.push(v("Source : the quick brown fox jumps over the lazy dog near the river bank . "
           "Question : what does the source say ? Answer : it says \" the quick brown"));
  CHECK(p.find_match().n == 3);  // "the quick brown" (the 4-gram starts with the quote mark)
  CHECK((p.propose(8) == v("fox jumps over the lazy dog near the")));
  // After the quote, "the river bank ." leads back into the prompt's next sentence.
  p.push(v("fox jumps over the lazy dog near the river bank ."));
  const auto prop = p.propose(4);
  CHECK((prop == v("Question : what does")));
}

void test_rule_preferences() {
  Vocab v;
  // Most recent occurrence wins among equal lengths.
  NgramProposer p;
  p.push(v("A B C z z A B D y y A B"));
  CHECK(p.find_match().n == 2);
  CHECK((p.propose(1) == v("D")));
  // A longer match wins over a more recent shorter one.
  NgramProposer q;
  q.push(v("x A B C z z y A B D w w x A B"));
  CHECK(q.find_match().n == 3);
  CHECK((q.propose(1) == v("C")));
  // min_n bounds the shortest match: with min_n 2, a lone repeated token is not enough.
  NgramProposer r(4, 2);
  r.push(v("p q r s p"));
  CHECK(r.propose(3).empty());
  NgramProposer r1(4, 1);
  r1.push(v("p q r s p"));
  CHECK((r1.propose(3) == v("q r s")));
  // No repetition at all → nothing to propose.
  NgramProposer none;
  for (int i = 0; i < 1000; ++i) none.push(static_cast<int32_t>(static_cast<uint32_t>(i) * 2654435761u));
  CHECK(none.propose(8).empty());
}

void test_rollback_and_move() {
  Vocab v;
  NgramProposer p;
  p.push(v("one two three four one two three four one two"));
  const auto before = p.propose(6);
  const auto before_m = p.find_match();
  // A draft of 5 tokens, then verification accepts 1 of them: roll back the other 4.
  p.push(v("three nine nine nine nine"));
  p.truncate(p.size() - 4);
  p.truncate(p.size() - 1);  // and, say, a full rejection of the remaining draft token
  CHECK(p.propose(6) == before);
  CHECK(p.find_match().end == before_m.end);
  // Moving keeps the index valid (its hash reads the history through a stable pointer).
  NgramProposer moved(std::move(p));
  CHECK(moved.propose(6) == before);
  moved.push(v("three"));
  NgramProposer target(2, 1);
  target.push({1, 1, 1});
  target = std::move(moved);
  CHECK(target.max_n() == 4);
  CHECK((target.propose(3) == v("four one two")));
  target.clear();
  CHECK(target.size() == 0 && target.propose(3).empty());
  target.push(v("one two one"));
  CHECK((target.propose(2) == v("two one")));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void test_cost_at_32k() {
  // A 32k-token history like a long RAG/code prompt: 32k-vocabulary random text with passages
  // that recur. Then 2000 decode steps whose true tokens alternate between quoting a passage and
  // fresh text; each step proposes k = 8, "verification" accepts the draft's correct prefix plus
  // one token, and the proposer is fed exactly the accepted tokens.
  std::mt19937 rng(1234);
  std::vector<std::vector<int32_t>> passages(32);
  for (auto& ps : passages) {
    ps.resize(50 + rng() % 200);
    for (auto& t : ps) t = static_cast<int32_t>(rng() % 32000);
  }
  auto text = [&](size_t len) {
    std::vector<int32_t> out;
    while (out.size() < len) {
      if (rng() % 3 == 0) {
        const auto& ps = passages[rng() % passages.size()];
        out.insert(out.end(), ps.begin(), ps.end());
      } else {
        for (int i = 0; i < 100; ++i) out.push_back(static_cast<int32_t>(rng() % 32000));
      }
    }
    out.resize(len);
    return out;
  };
  const std::vector<int32_t> prompt = text(32768);
  const std::vector<int32_t> truth = text(4000);

  NgramProposer p;
  auto t0 = std::chrono::steady_clock::now();
  p.push(prompt);
  const double ingest_s = seconds_since(t0);

  std::vector<int32_t> draft;
  size_t pos = 0, steps = 0, drafted = 0, accepted = 0, hits = 0;
  t0 = std::chrono::steady_clock::now();
  while (pos + 9 < truth.size() && steps < 2000) {
    p.propose(8, &draft);
    size_t a = 0;
    while (a < draft.size() && draft[a] == truth[pos + a]) ++a;
    drafted += draft.size();
    accepted += a;
    hits += !draft.empty();
    p.push(truth.data() + pos, a + 1);
    pos += a + 1;
    ++steps;
  }
  const double step_s = seconds_since(t0) / steps;
  const size_t at = p.size();

  // Lookup alone when nothing matches (a fresh token): every n is tried and misses.
  p.push(-7);
  const int misses = 20000;
  size_t sink = 0;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < misses; ++i) sink += p.propose(8, &draft).n;
  const double miss_s = seconds_since(t0) / misses;
  CHECK(sink == 0);

  // Rollback: push an 8-token draft, reject all of it.
  const int rb = 5000;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rb; ++i) {
    p.push(truth.data() + (i % 3000), 8);
    p.truncate(p.size() - 8);
  }
  const double rollback_s = seconds_since(t0) / rb;

  // The rescan the index replaces, at the same length: the no-match state, then a few steps,
  // checking agreement.
  const int ref_steps = 20;
  t0 = std::chrono::steady_clock::now();
  const RefResult miss = reference(p.history(), 4, 1, 8);
  const double ref_miss_s = seconds_since(t0);
  CHECK(miss.n == 0);
  int agree = 0;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < ref_steps; ++i) {
    const RefResult r = reference(p.history(), 4, 1, 8);
    agree += r.tokens == p.propose(8);
    p.push(truth[pos + i]);
  }
  const double ref_s = seconds_since(t0) / ref_steps;
  CHECK(agree == ref_steps);

  std::printf(
      "cost at a 32k history (%zu..%zu tokens): ingest %.0f ns/token (%.1f ms for the 32k prompt);"
      " decode step (propose k=8 + push accepted) %.0f ns; propose with no match %.0f ns;"
      " push 8 + roll back 8 %.0f ns; brute-force rescan %.0f us/step, %.0f us with no match\n",
      prompt.size(), at, 1e9 * ingest_s / prompt.size(), 1e3 * ingest_s, 1e9 * step_s,
      1e9 * miss_s, 1e9 * rollback_s, 1e6 * ref_s, 1e6 * ref_miss_s);
  std::printf("  %zu steps: draft on %zu, %zu tokens drafted, %zu accepted (%.2f tokens/step)\n",
              steps, hits, drafted, accepted, static_cast<double>(pos) / steps);
}

}  // namespace

int main() {
  test_edges();
  test_self_overlap();
  test_rule_preferences();
  test_code_edit();
  test_quoted_passage();
  test_rollback_and_move();
  test_randomized();
  test_cost_at_32k();
  return test_util::report();
}
