// Speculative decoding in the engine (issue 18) against fake models (fake_model.h) whose logits
// hash what they read back from the KV cache, so a rolled-back page or position shows up as a
// different token:
//   - greedy output with n-gram and draft-model proposals equals decoding without them, batched,
//     with stop strings, max_tokens and a small KV pool (preemption); pages back to zero;
//   - at temperature > 0 n-gram verification reproduces the unspeculated output of the same seed;
//   - with a draft model whose distribution differs from the target's, the speculative sampling
//     rule gives the target's distribution (chi-square on the 2nd and 3rd generated tokens);
//   - the cost model and the draft-length choice.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "engine/engine.h"
#include "engine/spec_policy.h"
#include "engine/speculative_decoder.h"
#include "fake_model.h"
#include "fixtures.h"
#include "test_util.h"

using namespace edgellm;

namespace {

// Logits depend only on the last token (read back from the KV cache), so greedy output soon
// cycles and n-gram drafts are accepted; the page reads still catch paging mistakes.
class LastTokenModel : public fake::FakeModel {
 public:
  void forward(const Batch& b, KVCache& kv, float* logits, float* hidden) override {
    FakeModel::forward(b, kv, logits, hidden);  // writes K, checks pages
    int32_t row = 0;
    for (int32_t i = 0; i < b.size(); ++i) {
      if (!b.want_logits[i]) continue;
      const auto& t = kv.page_table(0, b.seq[i]);
      const float* k = reinterpret_cast<const float*>(kv.k_head(0, t[b.pos[i] / kv.page_size()], 0) +
                                                      (b.pos[i] % kv.page_size()) * kv.k_row_bytes());
      fake::logits_for(static_cast<uint64_t>(*k) * 977 + 5, logits + static_cast<size_t>(row) * fake::kVocab);
      ++row;
    }
  }
};

// A draft that sees the same history as the fake target but adds a noise of its own to the
// logits: a different distribution, so drafts are sometimes rejected.
class NoisyDraft : public fake::FakeModel {
 public:
  explicit NoisyDraft(float noise) : noise_(noise) {}
  void forward(const Batch& b, KVCache& kv, float* logits, float* hidden) override {
    FakeModel::forward(b, kv, logits, hidden);
    int32_t row = 0;
    for (int32_t i = 0; i < b.size(); ++i) {
      if (!b.want_logits[i]) continue;
      float* l = logits + static_cast<size_t>(row) * fake::kVocab;
      for (int32_t v = 0; v < fake::kVocab; ++v)
        l[v] += noise_ * static_cast<float>(fake::mix(static_cast<uint64_t>(b.token[i]) * 7919 + v) % 1000) / 1000.0f;
      ++row;
    }
  }

 private:
  float noise_;
};

using fake::make_prompt;

using fixtures::greedy;

EngineConfig config(SpecMode mode, int32_t max_draft = 6, bool adaptive = false) {
  EngineConfig c = fixtures::engine_config();
  c.spec.mode = mode;
  c.spec.max_draft = max_draft;
  c.spec.adaptive = adaptive;
  return c;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text, finish_reason, error;
  int32_t draft_n = 0, draft_n_accepted = 0;
};

void run_until_idle(Engine& e) { fixtures::run_until_idle(e, 200000); }

Result drain(OutputChannel& ch) {
  Result r;
  OutputEvent ev;
  while (ch.try_pop(ev)) {
    r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    r.text += ev.text;
    if (ev.finished) {
      r.finish_reason = to_string(ev.finish_reason);
      r.error = ev.error;
      r.draft_n = ev.timings.draft_n;
      r.draft_n_accepted = ev.timings.draft_n_accepted;
    }
  }
  return r;
}

// Runs the requests together on a fresh engine and returns their results.
std::vector<Result> run(std::shared_ptr<EngineModel> model, EngineConfig cfg, const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<SamplingParams>& params, std::shared_ptr<EngineModel> draft = nullptr,
                        EngineStats* stats = nullptr) {
  Engine e(model, std::make_shared<fake::FakeVocab>(), cfg, draft);
  std::vector<std::shared_ptr<OutputChannel>> chans;
  for (size_t i = 0; i < prompts.size(); ++i) {
    chans.push_back(std::make_shared<OutputChannel>());
    e.submit(prompts[i], params[i], chans.back());
  }
  run_until_idle(e);
  std::vector<Result> out;
  for (auto& c : chans) out.push_back(drain(*c));
  const EngineStats st = e.stats();
  CHECK(st.pages_used == 0);
  CHECK(st.running == 0 && st.waiting == 0);
  if (stats) *stats = st;
  return out;
}

bool same_tokens(const std::vector<Result>& a, const std::vector<Result>& b, const char* what) {
  bool ok = a.size() == b.size();
  for (size_t i = 0; ok && i < a.size(); ++i)
    if (a[i].tokens != b[i].tokens || a[i].text != b[i].text || a[i].finish_reason != b[i].finish_reason) {
      std::fprintf(stderr, "%s: request %zu differs (%zu vs %zu tokens, '%s' vs '%s')\n", what, i, a[i].tokens.size(),
                   b[i].tokens.size(), a[i].finish_reason.c_str(), b[i].finish_reason.c_str());
      ok = false;
    }
  return ok;
}

void test_greedy_identical() {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 10; ++i) {
    prompts.push_back(make_prompt(5 + i * 13, i));
    params.push_back(greedy(30 + i * 7));
  }
  params[3].stop = {"cd"};  // stop strings end runs in the middle of accepted drafts
  params[4].stop = {"ab", "q"};
  for (int m = 0; m < 2; ++m) {
    std::shared_ptr<EngineModel> model =
        m == 0 ? std::shared_ptr<EngineModel>(std::make_shared<fake::FakeModel>()) : std::make_shared<LastTokenModel>();
    const auto off = run(model, config(SpecMode::Off), prompts, params);
    EngineStats st;
    const auto ngram = run(model, config(SpecMode::Ngram), prompts, params, nullptr, &st);
    CHECK(same_tokens(off, ngram, m == 0 ? "ngram (hash model)" : "ngram (last-token model)"));
    CHECK(st.spec_drafted > 0);
    if (m == 1) CHECK(st.spec_accepted > st.spec_drafted / 2);  // cycles: drafts are accepted
    CHECK(st.spec_accepted <= st.spec_drafted);
    // Draft model: the same function (all accepted) and a noisy one (some rejected).
    const auto same = run(model, config(SpecMode::Draft, 5), prompts, params,
                          m == 0 ? std::shared_ptr<EngineModel>(std::make_shared<fake::FakeModel>())
                                 : std::make_shared<LastTokenModel>(),
                          &st);
    CHECK(same_tokens(off, same, "draft = target"));
    // all accepted but what a stop string or EOG cut short
    CHECK(st.spec_drafted > 0 && st.spec_accepted >= st.spec_drafted * 9 / 10);
    const auto noisy = run(model, config(SpecMode::Draft, 5), prompts, params, std::make_shared<NoisyDraft>(6.0f), &st);
    CHECK(same_tokens(off, noisy, "noisy draft"));
    CHECK(st.spec_drafted > 0 && st.spec_accepted < st.spec_drafted);
    const auto aut = run(model, config(SpecMode::Auto, 4, true), prompts, params, std::make_shared<NoisyDraft>(2.0f));
    CHECK(same_tokens(off, aut, "auto, adaptive"));
  }
}

void test_timings_and_small_pool() {
  auto model = std::make_shared<LastTokenModel>();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(make_prompt(30 + i * 5, 100 + i));
    params.push_back(greedy(60));
  }
  EngineConfig small = config(SpecMode::Ngram, 8);
  small.kv_memory = static_cast<int64_t>(20) * 16 * 32 * 4 * 2;  // 20 pages: preemption with drafts in flight
  EngineConfig small_off = small;
  small_off.spec.mode = SpecMode::Off;
  const auto off = run(model, small_off, prompts, params);
  EngineStats st;
  const auto spec = run(model, small, prompts, params, nullptr, &st);
  CHECK(same_tokens(off, spec, "small pool"));
  CHECK(st.preemptions > 0);
  int64_t drafted = 0, accepted = 0;
  for (const auto& r : spec) {
    drafted += r.draft_n;
    accepted += r.draft_n_accepted;
  }
  CHECK(drafted == st.spec_drafted && accepted == st.spec_accepted && drafted > 0);
}

void test_sampled_ngram_reproduces_off() {
  auto model = std::make_shared<LastTokenModel>();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(make_prompt(20, 200 + i));
    SamplingParams p;
    p.temperature = 0.9f;
    p.max_tokens = 50;
    p.has_seed = true;
    p.seed = 1234 + i;
    params.push_back(p);
  }
  const auto off = run(model, config(SpecMode::Off), prompts, params);
  EngineStats st;
  const auto spec = run(model, config(SpecMode::Ngram, 8), prompts, params, nullptr, &st);
  CHECK(same_tokens(off, spec, "sampled n-gram"));
  CHECK(st.spec_accepted > 0);
}

// Chi-square critical value at p = 0.001 (Wilson-Hilferty).
double chi2_critical(int df) {
  const double z = 3.090232, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Chi-square of observed counts against expected probabilities, cells with expectation < 5 merged.
double chi2(const std::vector<double>& expect_p, const std::vector<int>& counts, int n, int* df) {
  double stat = 0.0, pool_e = 0.0, pool_o = 0.0;
  int cells = 0;
  for (size_t v = 0; v < expect_p.size(); ++v) {
    const double e = expect_p[v] * n;
    if (e < 5.0) {
      pool_e += e;
      pool_o += counts[v];
      continue;
    }
    stat += (counts[v] - e) * (counts[v] - e) / e;
    ++cells;
  }
  if (pool_e > 0.0) {
    stat += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-9);
    ++cells;
  }
  *df = cells - 1;
  return stat;
}

// The target's sampling distribution after `history` (the engine's chain at these params).
std::vector<double> target_dist(const std::vector<int32_t>& history, const SamplingParams& p) {
  uint64_t h = 0;
  for (int32_t t : history) h = fake::extend(h, t);
  float l[fake::kVocab];
  fake::logits_for(h, l);
  Sampler s(p, {fake::kEog}, 0);
  std::vector<TokenProb> d;
  s.distribution(l, fake::kVocab, history, static_cast<int32_t>(history.size()), d);
  std::vector<double> out(fake::kVocab, 0.0);
  for (const auto& x : d) out[x.id] = x.p;
  return out;
}

void test_sampling_rule_distribution() {
  auto model = std::make_shared<fake::FakeModel>();
  const std::vector<int32_t> prompt = make_prompt(6, 300);
  SamplingParams p = fixtures::sampled(0.8f, 3, 0);
  // Exact marginals of the 2nd and 3rd generated tokens (the 1st comes from the prefill row; the
  // 2nd and 3rd from verification rows 0 and 1 when drafts are in flight).
  std::vector<double> m2(fake::kVocab, 0.0), m3(fake::kVocab, 0.0);
  SamplingParams chain = p;
  const auto p1 = target_dist(prompt, chain);
  for (int32_t a = 0; a < fake::kVocab; ++a) {
    if (p1[a] == 0.0 || a == fake::kEog) continue;
    auto h1 = prompt;
    h1.push_back(a);
    const auto p2 = target_dist(h1, chain);
    for (int32_t b = 0; b < fake::kVocab; ++b) {
      m2[b] += p1[a] * p2[b];
      if (p2[b] == 0.0 || b == fake::kEog) continue;
      auto h2 = h1;
      h2.push_back(b);
      const auto p3 = target_dist(h2, chain);
      for (int32_t c = 0; c < fake::kVocab; ++c) m3[c] += p1[a] * p2[b] * p3[c];
    }
  }
  // EOG ends a sequence early; those runs are left out of the later cells' counts, so condition
  // the expectation the same way: count only runs that produced 3 tokens with no EOG before.
  const int n = 6000;
  std::vector<int> c2(fake::kVocab, 0), c3(fake::kVocab, 0), d2(fake::kVocab, 0);
  int n2 = 0, n3 = 0;
  EngineConfig cfg = config(SpecMode::Draft, 3);
  cfg.max_seqs = 32;
  cfg.prefix_cache = true;
  EngineStats st;
  {
    Engine e(model, std::make_shared<fake::FakeVocab>(), cfg, std::make_shared<NoisyDraft>(3.0f));
    for (int base = 0; base < n; base += 32) {
      std::vector<std::shared_ptr<OutputChannel>> chans;
      for (int i = base; i < std::min(n, base + 32); ++i) {
        SamplingParams q = p;
        q.seed = 77 + static_cast<uint64_t>(i);
        chans.push_back(std::make_shared<OutputChannel>());
        e.submit(prompt, q, chans.back());
      }
      run_until_idle(e);
      for (auto& ch : chans) {
        const Result r = drain(*ch);
        if (r.tokens.size() >= 2 && r.tokens[0] != fake::kEog) {
          ++c2[r.tokens[1]];
          ++n2;
        }
        if (r.tokens.size() >= 3 && r.tokens[0] != fake::kEog && r.tokens[1] != fake::kEog) {
          ++c3[r.tokens[2]];
          ++n3;
        }
      }
    }
    st = e.stats();
  }
  CHECK(st.spec_drafted > 0 && st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
  // Runs reaching token 2 are those whose 1st was not EOG: renormalise m2 over that event (it
  // already excludes a = EOG), and m3 likewise over runs with neither of the first two EOG.
  double s2 = 0.0, s3 = 0.0;
  for (int32_t v = 0; v < fake::kVocab; ++v) s2 += m2[v];
  for (auto& x : m2) x /= s2;
  for (int32_t v = 0; v < fake::kVocab; ++v) s3 += m3[v];
  for (auto& x : m3) x /= s3;
  int df2 = 0, df3 = 0;
  const double x2 = chi2(m2, c2, n2, &df2), x3 = chi2(m3, c3, n3, &df3);
  std::printf("sampling rule: token 2 chi2 %.1f (df %d, critical %.1f), token 3 chi2 %.1f (df %d, critical %.1f), "
              "acceptance %lld/%lld\n",
              x2, df2, chi2_critical(df2), x3, df3, chi2_critical(df3), static_cast<long long>(st.spec_accepted),
              static_cast<long long>(st.spec_drafted));
  CHECK(df2 >= 3 && x2 < chi2_critical(df2));
  CHECK(df3 >= 3 && x3 < chi2_critical(df3));
}

// The rule itself on explicit distributions: the output follows p for a q far from it.
void test_speculative_pick() {
  const std::vector<TokenProb> p = {{0, 0.5f}, {1, 0.3f}, {2, 0.2f}};
  const std::vector<TokenProb> q = {{0, 0.1f}, {1, 0.1f}, {2, 0.8f}};
  SamplingParams sp;
  Sampler rng(sp, {}, 9);
  std::vector<int> counts(3, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    // the draft is drawn from q
    const int32_t d = rng.draw_from(q);
    ++counts[speculative_pick(p, d, q, rng)];
  }
  const std::vector<double> want = {0.5, 0.3, 0.2};
  int df = 0;
  const double x = chi2(want, counts, n, &df);
  CHECK(x < chi2_critical(df));
  // Accepting every draft would give q: the test has power.
  std::vector<int> naive = {static_cast<int>(0.1 * n), static_cast<int>(0.1 * n), static_cast<int>(0.8 * n)};
  CHECK(chi2(want, naive, n, &df) > chi2_critical(df));
}

void test_cost_model_and_choice() {
  StepCostModel cost;
  CHECK(cost.estimate(4) == 0.0);
  // Memory-bound up to 8 tokens, then compute-bound at 1 ms per token.
  auto truth = [](int n) { return n <= 8 ? 0.010 : 0.010 + 0.001 * (n - 8); };
  for (int n : {1, 2, 4, 8, 16, 32})
    for (int r = 0; r < 5; ++r) cost.observe(n, truth(n));
  CHECK_NEAR(cost.estimate(1), 0.010, 1e-9);
  CHECK_NEAR(cost.estimate(16), truth(16), 1e-9);
  CHECK(cost.estimate(24) >= cost.estimate(16) && cost.estimate(24) <= cost.estimate(32));
  CHECK(expected_tokens(0.0, 5) == 1.0);
  CHECK_NEAR(expected_tokens(0.5, 2), 1.75, 1e-9);
  // One stream, high acceptance: draft many; low acceptance where extra tokens cost: draft none.
  CHECK(choose_draft_length(cost, 1, 0.95, 16, 0.0).k >= 7);
  CHECK(choose_draft_length(cost, 1, 0.3, 16, 0.0).k <= 7);
  CHECK(choose_draft_length(cost, 32, 0.3, 16, 0.0).k == 0);  // compute-bound batch, poor acceptance
  // An expensive draft model turns drafting off.
  CHECK(choose_draft_length(cost, 1, 0.6, 8, 0.02).k == 0);
  // Nothing measured yet: a short draft to learn the costs.
  StepCostModel empty;
  CHECK(choose_draft_length(empty, 1, 0.5, 16, 0.0).k > 0);
}

// Free prose (issue 43 item 5): n-gram matches of every length, none of their drafts accepted.
// The policy must stop drafting after a few tries, not try again at each match length it has
// not failed at yet. Counted: the steps that draft, out of 240, for a cost model where a drafted
// row costs 3 % of a step (memory-bound, as a small model on a CPU).
int32_t drafting_steps(bool pooled, int32_t accepted_per_step) {
  StepCostModel cost;
  for (int n = 1; n <= 40; ++n)
    for (int r = 0; r < 3; ++r) cost.observe(n, 0.010 * (1.0 + 0.03 * (n - 1)));
  Sequence s;
  s.accept_ngram.assign(13, SpecAcceptance{});
  int32_t steps = 0;
  for (int i = 0; i < 240; ++i) {
    const int32_t n = 1 + i % 12;
    const double alpha = pooled ? ngram_alpha(s, n) : s.accept_ngram[static_cast<size_t>(n)].alpha();
    const int32_t k = choose_draft_length(cost, 1, alpha, 32, 0.0).k;
    if (k <= 0) continue;
    ++steps;
    const int32_t acc = std::min(k, accepted_per_step);
    s.accept_ngram[static_cast<size_t>(n)].update(k, acc);
  }
  return steps;
}

void test_prose_stops_drafting() {
  const int32_t before = drafting_steps(false, 0), after = drafting_steps(true, 0);
  std::printf("prose: %d of 240 steps drafted with per-length acceptance alone, %d with the "
              "longer matches as prior\n", before, after);
  CHECK(before > 60);  // the old rule: each of the 12 lengths learnt on its own
  CHECK(after <= 20);  // each length tried once or twice (lengths come shortest first)
  // Copying (every draft accepted whole): drafting goes on at every step.
  CHECK(drafting_steps(true, 64) == 240);
}

void test_refusals() {
  auto model = std::make_shared<fake::FakeModel>();
  CHECK(test_util::throws_invalid([&] { Engine e(model, std::make_shared<fake::FakeVocab>(), config(SpecMode::Draft)); }));
  CHECK(test_util::throws_invalid([&] { Engine e(model, std::make_shared<fake::FakeVocab>(), config(SpecMode::Ngram, 65)); }));
}

}  // namespace

int main() {
  test_speculative_pick();
  test_cost_model_and_choice();
  test_prose_stops_drafting();
  test_refusals();
  test_greedy_identical();
  test_timings_and_small_pool();
  test_sampled_ngram_reproduces_off();
  test_sampling_rule_distribution();
  return test_util::report();
}
