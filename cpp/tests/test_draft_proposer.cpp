// DraftProposer (speculative decoding's draft model, issue 18) on the fake model, whose logits
// hash the tokens it reads back from the KV cache, so any stale or missing draft KV shows as a
// different draft: greedy drafts equal to stepping the model by hand, catch-up after rollbacks
// (exact, generous or missing) equal to a fresh proposer, batching several sequences with
// different k, slot ownership by key, retain / pool exhaustion / sliding windows, sampled drafts
// with their distributions, masked ids of a smaller target vocabulary. Then check_draft_vocab on
// the real Qwen2.5-Coder / SmolLM2 tokenizers (skipped when the files are missing), and with
// EDGELLM_DRAFT_TIMING=1 the time of one propose() of the real Qwen2.5-Coder-0.5B (printed, not
// asserted; EDGELLM_DRAFT_TIMING_MODEL=path times another model the same way).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/draft_proposer.h"
#include "engine/model_backend.h"
#include "fake_model.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using edgellm::DraftProposer;
using edgellm::DraftRequest;
using edgellm::DType;
using edgellm::Sampler;
using edgellm::SamplingParams;

namespace {

constexpr int32_t kPage = 4;

// The fake model's logits after `history`, straight from the token list.
std::vector<float> logits_after(const std::vector<int32_t>& history) {
  uint64_t h = 0;
  for (int32_t t : history) h = fake::extend(h, t);
  std::vector<float> l(fake::kVocab);
  fake::logits_for(h, l.data());
  return l;
}

// k greedy tokens after `history` (no EOG stop: a draft does not stop there), ids < n_allowed.
std::vector<int32_t> greedy_ref(std::vector<int32_t> history, int32_t k, int32_t n_allowed = fake::kVocab) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < k; ++i) {
    const std::vector<float> l = logits_after(history);
    const int32_t t = Sampler::argmax(l.data(), std::min(n_allowed, fake::kVocab));
    out.push_back(t);
    history.push_back(t);
  }
  return out;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = 2 + static_cast<int32_t>(rng() % (fake::kVocab - 2));
  return v;
}

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

DraftRequest req(int slot, uint64_t key, const std::vector<int32_t>& tokens, int32_t k, const Sampler& s) {
  DraftRequest r;
  r.slot = slot;
  r.key = key;
  r.tokens = &tokens;
  r.k = k;
  r.sampler = &s;
  return r;
}

std::vector<int32_t> propose_one(DraftProposer& dp, int slot, uint64_t key, const std::vector<int32_t>& tokens, int32_t k,
                                 const Sampler& s) {
  std::vector<DraftRequest> rs{req(slot, key, tokens, k, s)};
  dp.propose(rs);
  return rs[0].draft;
}

std::unique_ptr<DraftProposer> make(std::shared_ptr<fake::FakeModel> m, int32_t slots = 4, int64_t positions = 4096,
                                    int32_t max_batch = 16, int32_t target_vocab = fake::kVocab) {
  return std::make_unique<DraftProposer>(m, target_vocab, slots, positions, kPage, DType::F32, max_batch, 7);
}

void test_greedy_matches_stepping() {
  std::mt19937 rng(1);
  auto m = std::make_shared<fake::FakeModel>();
  auto dp = make(m);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  for (int32_t len : {1, 2, 5, 17, 40}) {
    const std::vector<int32_t> h = random_tokens(rng, len);
    for (int32_t k : {1, 3, 8}) {
      dp->release(0);
      const std::vector<int32_t> d = propose_one(*dp, 0, 100 + len * 10 + k, h, k, s);
      CHECK(d == greedy_ref(h, k));
    }
  }
  // Catch-up over several batches (max_batch 16) and k-1 single-token steps.
  const std::vector<int32_t> h = random_tokens(rng, 50);
  dp->release(1);
  const int64_t calls0 = m->calls, tok0 = m->tokens_computed;
  CHECK(propose_one(*dp, 1, 9, h, 6, s) == greedy_ref(h, 6));
  CHECK(m->calls - calls0 == 4 + 5);           // ceil(50 / 16) catch-up batches + 5 drafting steps
  CHECK(m->tokens_computed - tok0 == 50 + 5);  // d6 is never fed
  CHECK(m->max_batch_seen <= 16);
  CHECK(dp->stats().forwards == m->calls);
  CHECK(dp->stats().tokens == m->tokens_computed);
}

void test_rollback_and_catch_up() {
  std::mt19937 rng(2);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  for (int mode = 0; mode < 3; ++mode) {  // 0: exact rollback, 1: rollback one too many, 2: none
    auto m = std::make_shared<fake::FakeModel>();
    auto dp = make(m);
    std::vector<int32_t> h = random_tokens(rng, 23);
    for (int round = 0; round < 12; ++round) {
      const int32_t k = 1 + static_cast<int32_t>(rng() % 7);
      const std::vector<int32_t> d = propose_one(*dp, 2, 5, h, k, s);
      auto fresh = make(std::make_shared<fake::FakeModel>());
      CHECK(d == propose_one(*fresh, 2, 5, h, k, s));
      CHECK(d == greedy_ref(h, k));
      // Verification: accept some, then a correction (or a bonus token when all were accepted).
      const int32_t accept = static_cast<int32_t>(rng() % (d.size() + 1));
      const int32_t n_final = static_cast<int32_t>(h.size()) + accept;
      h.insert(h.end(), d.begin(), d.begin() + accept);
      int32_t next = 2 + static_cast<int32_t>(rng() % (fake::kVocab - 2));
      if (accept < static_cast<int32_t>(d.size()) && next == d[accept]) next = next == 2 ? 3 : 2;
      h.push_back(next);
      if (mode == 0) dp->rollback(2, 5, n_final);
      if (mode == 1) dp->rollback(2, 5, n_final + 1);
      if (mode == 0) {
        // Only the correction token and the new drafting steps are computed next time.
        const int64_t tok0 = m->tokens_computed;
        const int32_t k2 = 3;
        const std::vector<int32_t> d2 = propose_one(*dp, 2, 5, h, k2, s);
        CHECK(d2 == greedy_ref(h, k2));
        const int32_t fed = accept == static_cast<int32_t>(d.size()) ? 2 : 1;  // d_k was never fed
        CHECK(m->tokens_computed - tok0 == fed + k2 - 1);
        dp->rollback(2, 5, static_cast<int32_t>(h.size()));
      }
    }
    // Several plain decode steps without drafting or rollback: the tokens after the drafted
    // point differ from the drafts at some position before the last, and the draft KV must
    // notice (it holds d1..d_{k-1} there).
    for (int rep = 0; rep < 6; ++rep) {
      const std::vector<int32_t> d = propose_one(*dp, 2, 5, h, 6, s);
      CHECK(d == greedy_ref(h, 6));
      const int32_t keep = rep % 3;  // accepted drafts, then 3 other tokens
      h.insert(h.end(), d.begin(), d.begin() + keep);
      for (int j = 0; j < 3; ++j) h.push_back(d[keep + j] == 2 ? 3 : 2);
      const int64_t tok0 = m->tokens_computed;
      CHECK(propose_one(*dp, 2, 5, h, 2, s) == greedy_ref(h, 2));
      CHECK(m->tokens_computed - tok0 == 3 + 1);  // the 3 new tokens, then one drafting step
    }
    // A deep rollback (below what the draft has) and a rollback by another key (ignored).
    dp->rollback(2, 999, 1);
    dp->rollback(2, 5, 10);
    CHECK(propose_one(*dp, 2, 5, h, 4, s) == greedy_ref(h, 4));
    dp->rollback(2, 5, 0);
    CHECK(propose_one(*dp, 2, 5, h, 4, s) == greedy_ref(h, 4));
  }
}

void test_several_sequences() {
  std::mt19937 rng(3);
  auto m = std::make_shared<fake::FakeModel>();
  auto dp = make(m, 6, 4096, 7);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  std::vector<std::vector<int32_t>> h;
  const int32_t lens[] = {20, 3, 11, 1, 30};
  const int32_t ks[] = {3, 0, 6, 1, 8};
  for (int32_t len : lens) h.push_back(random_tokens(rng, len));
  for (int round = 0; round < 4; ++round) {
    std::vector<DraftRequest> rs;
    for (int i = 0; i < 5; ++i) rs.push_back(req(i, 10 + i, h[i], ks[(i + round) % 5], s));
    dp->propose(rs);
    for (int i = 0; i < 5; ++i) {
      CHECK(rs[i].draft == greedy_ref(h[i], rs[i].k));
      CHECK(rs[i].q.empty());
    }
    CHECK(m->max_batch_seen <= 7);
    // Grow each sequence by its first drafted token (or a new one when k was 0) + a correction.
    for (int i = 0; i < 5; ++i) {
      const int32_t n_final = static_cast<int32_t>(h[i].size()) + (rs[i].draft.empty() ? 0 : 1);
      if (!rs[i].draft.empty()) h[i].push_back(rs[i].draft[0]);
      h[i].push_back(2 + static_cast<int32_t>(rng() % 40));
      dp->rollback(i, 10 + i, n_final);
    }
  }
  // k = 0 on an empty slot leaves it without pages.
  auto dp2 = make(std::make_shared<fake::FakeModel>());
  CHECK(propose_one(*dp2, 3, 1, h[0], 0, s).empty());
  CHECK(dp2->pages_used() == 0);
}

void test_key_change_resets() {
  std::mt19937 rng(4);
  auto m = std::make_shared<fake::FakeModel>();
  auto dp = make(m);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  const std::vector<int32_t> a = random_tokens(rng, 30);
  std::vector<int32_t> b(a.begin(), a.begin() + 20);  // shares a prefix, so a missed reset would not show in the draft
  const std::vector<int32_t> tail = random_tokens(rng, 5);
  b.insert(b.end(), tail.begin(), tail.end());
  CHECK(propose_one(*dp, 0, 1, a, 4, s) == greedy_ref(a, 4));
  const int64_t tok0 = m->tokens_computed;
  CHECK(propose_one(*dp, 0, 2, b, 4, s) == greedy_ref(b, 4));
  CHECK(m->tokens_computed - tok0 == 25 + 3);  // recomputed from scratch
  // Same key again continues (only the new last token).
  b.push_back(7);
  const int64_t tok1 = m->tokens_computed;
  dp->rollback(0, 2, 25);
  CHECK(propose_one(*dp, 0, 2, b, 2, s) == greedy_ref(b, 2));
  CHECK(m->tokens_computed - tok1 == 1 + 1);
  // A totally different sequence under a new key.
  const std::vector<int32_t> c = random_tokens(rng, 9);
  CHECK(propose_one(*dp, 0, 3, c, 5, s) == greedy_ref(c, 5));
}

void test_retain_and_release() {
  std::mt19937 rng(5);
  auto dp = make(std::make_shared<fake::FakeModel>());
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  const std::vector<int32_t> a = random_tokens(rng, 30), b = random_tokens(rng, 12);
  propose_one(*dp, 0, 1, a, 3, s);
  const int64_t pa = dp->pages_used();
  CHECK(pa == (30 + 2 + kPage - 1) / kPage);
  propose_one(*dp, 1, 2, b, 3, s);
  CHECK(dp->pages_used() > pa);
  dp->retain({{0, 1}, {1, 99}});  // slot 1 now belongs to another key: freed
  CHECK(dp->pages_used() == pa);
  dp->retain({{0, 1}});
  CHECK(dp->pages_used() == pa);
  dp->retain({});
  CHECK(dp->pages_used() == 0);
  propose_one(*dp, 2, 3, b, 3, s);
  dp->release(2);
  CHECK(dp->pages_used() == 0);
  // After a release the next propose starts over and is still right.
  CHECK(propose_one(*dp, 0, 1, a, 3, s) == greedy_ref(a, 3));
}

void test_pool_exhaustion() {
  std::mt19937 rng(6);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  // 32 positions in all (8 pages of 4).
  auto dp = make(std::make_shared<fake::FakeModel>(), 4, 32);
  const std::vector<int32_t> h = random_tokens(rng, 30);
  const std::vector<int32_t> d = propose_one(*dp, 0, 1, h, 8, s);
  CHECK(d.size() == 3);  // positions 30, 31 fed (d1, d2), d3 drawn; feeding d3 needs a 9th page
  CHECK(d == greedy_ref(h, 3));
  // A second sequence finds no room: empty, and it holds nothing.
  const std::vector<int32_t> h2 = random_tokens(rng, 10);
  const int64_t used = dp->pages_used();
  CHECK(propose_one(*dp, 1, 2, h2, 4, s).empty());
  CHECK(dp->pages_used() == used);
  // A sequence longer than the whole pool.
  auto dp2 = make(std::make_shared<fake::FakeModel>(), 2, 32);
  const std::vector<int32_t> big = random_tokens(rng, 40);
  CHECK(propose_one(*dp2, 0, 1, big, 4, s).empty());
  CHECK(dp2->pages_used() == 0);
  // Freed room: drafting works again.
  dp->retain({{1, 2}});
  CHECK(propose_one(*dp, 1, 2, h2, 4, s) == greedy_ref(h2, 4));
  // Many sequences on a small pool, random growth: never a crash, drafts always a greedy prefix.
  auto dp3 = make(std::make_shared<fake::FakeModel>(), 5, 64, 8);
  std::vector<std::vector<int32_t>> hs;
  for (int i = 0; i < 5; ++i) hs.push_back(random_tokens(rng, 2 + static_cast<int32_t>(rng() % 12)));
  for (int round = 0; round < 20; ++round) {
    std::vector<DraftRequest> rs;
    for (int i = 0; i < 5; ++i) rs.push_back(req(i, 50 + i, hs[i], 1 + static_cast<int32_t>(rng() % 6), s));
    dp3->propose(rs);
    for (int i = 0; i < 5; ++i) {
      CHECK(rs[i].draft.size() <= static_cast<size_t>(rs[i].k));
      CHECK(rs[i].draft == greedy_ref(hs[i], static_cast<int32_t>(rs[i].draft.size())));
      const int32_t acc = rs[i].draft.empty() ? 0 : static_cast<int32_t>(rng() % (rs[i].draft.size() + 1));
      dp3->rollback(i, 50 + i, static_cast<int32_t>(hs[i].size()) + acc);
      hs[i].insert(hs[i].end(), rs[i].draft.begin(), rs[i].draft.begin() + acc);
      hs[i].push_back(2 + static_cast<int32_t>(rng() % 40));
      if (hs[i].size() > 40) {  // finished: a new sequence takes the slot
        hs[i] = random_tokens(rng, 3);
        dp3->release(i);
      }
    }
  }
}

void test_sliding_window() {
  std::mt19937 rng(7);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  auto m = std::make_shared<fake::FakeModel>(/*window=*/8);
  auto dp = std::make_unique<DraftProposer>(m, fake::kVocab, 2, 256, kPage, DType::F32, 5, 7);
  std::vector<int32_t> h = random_tokens(rng, 37);
  for (int round = 0; round < 15; ++round) {
    const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
    const std::vector<int32_t> d = propose_one(*dp, 1, 3, h, k, s);  // the fake model throws on a missing window page
    CHECK(d == greedy_ref(h, k));
    const int32_t acc = static_cast<int32_t>(rng() % (d.size() + 1));
    dp->rollback(1, 3, static_cast<int32_t>(h.size()) + acc);
    h.insert(h.end(), d.begin(), d.begin() + acc);
    h.push_back(2 + static_cast<int32_t>(rng() % 40));
  }
  CHECK(dp->pages_used() < (static_cast<int64_t>(h.size()) + kPage - 1) / kPage * 2);  // window pages were trimmed
  dp->rollback(1, 3, 5);  // below the trimmed window: starts over
  CHECK(propose_one(*dp, 1, 3, h, 3, s) == greedy_ref(h, 3));
}

void test_sampled() {
  std::mt19937 rng(8);
  auto m = std::make_shared<fake::FakeModel>();
  auto dp = make(m);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.3f;
  p.logit_bias = {{5, 2.0f}};
  const Sampler s(p, {fake::kEog}, 0);
  std::vector<int32_t> h = random_tokens(rng, 15);
  for (int round = 0; round < 6; ++round) {
    DraftRequest r = req(0, 4, h, 5, s);
    r.n_generated = round;
    std::vector<DraftRequest> rs{r};
    dp->propose(rs);
    const DraftRequest& o = rs[0];
    CHECK(o.draft.size() == 5);
    CHECK(o.q.size() == o.draft.size());
    std::vector<int32_t> hist = h;
    for (size_t j = 0; j < o.draft.size() && j < o.q.size(); ++j) {
      double sum = 0.0;
      float q_tok = 0.0f;
      for (const auto& tp : o.q[j]) {
        sum += tp.p;
        if (tp.id == o.draft[j]) q_tok = tp.p;
      }
      CHECK_NEAR(sum, 1.0, 1e-4);
      CHECK(q_tok > 0.0f);
      // q is the chain's distribution over the draft's logits after the history with drafts.
      std::vector<float> l = logits_after(hist);
      std::vector<edgellm::TokenProb> want;
      s.distribution(l.data(), fake::kVocab, hist, round + static_cast<int32_t>(j), want);
      bool same = want.size() == o.q[j].size();
      for (size_t t = 0; same && t < want.size(); ++t)
        same = want[t].id == o.q[j][t].id && std::fabs(want[t].p - o.q[j][t].p) < 1e-6f;
      CHECK(same);
      hist.push_back(o.draft[j]);
    }
    dp->rollback(0, 4, static_cast<int32_t>(h.size()) + 2);
    h.insert(h.end(), o.draft.begin(), o.draft.begin() + 2);
    h.push_back(9);
  }
  // The same seed and key draw the same drafts; a different key draws others (somewhere).
  const std::vector<int32_t> g = random_tokens(rng, 12);
  SamplingParams ps = p;
  ps.has_seed = true;
  ps.seed = 1234;
  const Sampler ss(ps, {fake::kEog}, 0);
  auto d1 = make(std::make_shared<fake::FakeModel>()), d2 = make(std::make_shared<fake::FakeModel>());
  const std::vector<int32_t> r77 = propose_one(*d1, 0, 77, g, 8, ss);
  CHECK(r77 == propose_one(*d2, 3, 77, g, 8, ss));  // whatever the slot
  bool differs = false;
  for (uint64_t key = 78; key < 90 && !differs; ++key) {
    auto d3 = make(std::make_shared<fake::FakeModel>());
    differs = propose_one(*d3, 0, key, g, 8, ss) != r77;
  }
  CHECK(differs);
}

void test_target_vocab_mask() {
  std::mt19937 rng(9);
  const int32_t target_vocab = 20;  // the draft has 48 ids: 20..47 must never be drafted
  auto dp = make(std::make_shared<fake::FakeModel>(), 4, 4096, 16, target_vocab);
  const Sampler g(greedy_params(), {fake::kEog}, 0);
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const Sampler s(p, {fake::kEog}, 0);
  for (int i = 0; i < 20; ++i) {
    const std::vector<int32_t> h = random_tokens(rng, 1 + static_cast<int32_t>(rng() % 20));
    const std::vector<int32_t> d = propose_one(*dp, 0, 200 + i, h, 6, g);
    CHECK(d == greedy_ref(h, 6, target_vocab));
    std::vector<DraftRequest> rs{req(1, 300 + i, h, 6, s)};
    dp->propose(rs);
    CHECK(rs[0].draft.size() == 6);
    for (int32_t t : rs[0].draft) CHECK(t >= 0 && t < target_vocab);
    for (const auto& q : rs[0].q)
      for (const auto& tp : q) CHECK(tp.id < target_vocab);
  }
  // A target with more ids than the draft (within the 128 allowed): a logit_bias on an id the
  // draft lacks is harmless, and such an id is never drafted.
  auto wide = make(std::make_shared<fake::FakeModel>(), 2, 4096, 16, fake::kVocab + 10);
  SamplingParams pb = greedy_params();
  pb.logit_bias = {{fake::kVocab + 5, 100.0f}};
  const Sampler sb(pb, {fake::kEog}, 0);
  const std::vector<int32_t> h = random_tokens(rng, 8);
  CHECK(propose_one(*wide, 0, 1, h, 4, sb) == greedy_ref(h, 4));
}

void test_catch_up_budget() {
  std::mt19937 rng(10);
  auto m = std::make_shared<fake::FakeModel>();
  auto dp = make(m, 4, 4096, 8);
  dp->set_catch_up_budget(10);
  const Sampler s(greedy_params(), {fake::kEog}, 0);
  const std::vector<int32_t> a = random_tokens(rng, 35), b = random_tokens(rng, 4);
  int calls = 0;
  std::vector<DraftRequest> rs;
  while (true) {
    rs = {req(0, 1, a, 4, s), req(1, 2, b, 3, s)};
    const int64_t tok0 = m->tokens_computed;
    dp->propose(rs);
    ++calls;
    const int64_t fed = m->tokens_computed - tok0;
    if (calls == 1) CHECK(rs[1].draft == greedy_ref(b, 3));  // the short catch-up is served first
    if (calls > 1) CHECK(rs[1].draft.size() == 3);
    if (!rs[0].draft.empty()) break;
    CHECK(fed == 10 + 2);  // the budget, then b's 2 drafting steps
    if (calls > 10) break;
  }
  // b's 4 tokens + 6 of a, then (b's last token again, unchanged tokens) 1 + 9 per call: 6, 15, 24, 33, 35.
  CHECK(calls == 5);
  CHECK(rs[0].draft == greedy_ref(a, 4));
  CHECK(rs[1].draft == greedy_ref(b, 3));
  CHECK(m->max_batch_seen <= 8);
}

// ---- real models ----

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string model_path(const char* file) {
  const std::string dir = !env("EDGELLM_MODELS").empty() ? env("EDGELLM_MODELS") : env("HOME") + "/.cache/edgellm/models";
  return dir + "/" + file;
}

bool exists(const std::string& p) { return std::ifstream(p).good(); }

constexpr const char* kQwen05 = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
constexpr const char* kQwen15 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
constexpr const char* kSmol = "SmolLM2-135M-Instruct.Q4_1.gguf";

void test_vocab_check_real() {
  const std::string q05 = model_path(kQwen05), q15 = model_path(kQwen15), smol = model_path(kSmol);
  if (!exists(q05) || !exists(q15) || !exists(smol)) {
    std::printf("SKIP: check_draft_vocab on real tokenizers (%s, %s or %s missing)\n", q05.c_str(), q15.c_str(),
                smol.c_str());
    return;
  }
  auto t05 = edgellm::Tokenizer::from_gguf(q05);
  auto t15 = edgellm::Tokenizer::from_gguf(q15);
  auto ts = edgellm::Tokenizer::from_gguf(smol);
  bool ok = true;
  try {
    edgellm::check_draft_vocab(*t15, *t05);
    edgellm::check_draft_vocab(*t05, *t15);
  } catch (const edgellm::InvalidRequestError& e) {
    std::fprintf(stderr, "qwen pair refused: %s\n", e.what());
    ok = false;
  }
  CHECK(ok);
  for (int dir = 0; dir < 2; ++dir) {
    std::string msg;
    try {
      if (dir == 0) edgellm::check_draft_vocab(*t15, *ts);
      else edgellm::check_draft_vocab(*ts, *t05);
    } catch (const edgellm::InvalidRequestError& e) {
      msg = e.what();
    }
    std::printf("smollm2 vs qwen: %s\n", msg.c_str());
    CHECK(msg.find("draft model vocabulary does not match the target's") != std::string::npos);
    CHECK(msg.find("differ") != std::string::npos || msg.find("in the target and") != std::string::npos);
  }
}

void test_vocab_check_synthetic() {
  auto base = [] {
    edgellm::Vocab v;
    v.type = edgellm::VocabType::Spm;
    v.model = "llama";
    for (int i = 0; i < 300; ++i) v.tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "t" + std::to_string(i));
    v.types.assign(v.tokens.size(), 1);
    v.types[0] = 2;
    v.types[1] = 3;
    v.types[2] = 3;
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    return v;
  };
  auto tok = [](edgellm::Vocab v) {
    edgellm::finalize_vocab(v);
    return edgellm::Tokenizer::create(std::move(v));
  };
  auto a = tok(base());
  auto refused = [&](edgellm::Vocab v, const std::string& needle) {
    auto b = tok(std::move(v));
    std::string msg;
    try {
      edgellm::check_draft_vocab(*a, *b);
    } catch (const edgellm::InvalidRequestError& e) {
      msg = e.what();
    }
    if (msg.find(needle) == std::string::npos) std::fprintf(stderr, "message '%s' lacks '%s'\n", msg.c_str(), needle.c_str());
    return msg.find(needle) != std::string::npos;
  };
  CHECK(!test_util::throws_invalid([&] { edgellm::check_draft_vocab(*a, *a); }));
  {
    edgellm::Vocab v = base();
    for (int i = 0; i < 128; ++i) v.tokens.push_back("x" + std::to_string(i));
    v.types.assign(v.tokens.size(), 1);
    v.types[0] = 2;
    v.types[1] = 3;
    v.types[2] = 3;
    auto b = tok(v);
    CHECK(!test_util::throws_invalid([&] { edgellm::check_draft_vocab(*a, *b); }));  // 128 more: allowed
    v.tokens.push_back("y");
    v.types.push_back(1);
    CHECK(refused(v, "sizes 300 and 429 differ by more than 128"));
  }
  {
    edgellm::Vocab v = base();
    v.tokens[123] = "bar";
    CHECK(refused(v, "token 123 is 't123' in the target and 'bar' in the draft"));
  }
  {
    edgellm::Vocab v = base();
    v.bos = 3;
    CHECK(refused(v, "BOS ids differ (1 vs 3)"));
  }
  {
    edgellm::Vocab v = base();
    v.eos = 4;
    CHECK(refused(v, "EOS ids differ"));
  }
}

void timing_real() {
  if (env("EDGELLM_DRAFT_TIMING").empty() || env("EDGELLM_DRAFT_TIMING") == "0") return;
  // EDGELLM_DRAFT_TIMING_MODEL: another file (the target, to compare a decode step's cost).
  const std::string q05 = !env("EDGELLM_DRAFT_TIMING_MODEL").empty() ? env("EDGELLM_DRAFT_TIMING_MODEL") : model_path(kQwen05);
  if (!exists(q05)) {
    std::printf("SKIP: timing (%s missing)\n", q05.c_str());
    return;
  }
  edgellm::LoadOptions lo;
  lo.max_batch_tokens = 512;
  if (!env("EDGELLM_THREADS").empty()) lo.n_threads = std::atoi(env("EDGELLM_THREADS").c_str());
  std::shared_ptr<edgellm::Model> model = edgellm::Model::load(q05, lo);
  auto backend = std::make_shared<edgellm::ModelBackend>(model);
  auto tok = edgellm::Tokenizer::from_gguf(q05);
  DraftProposer dp(backend, backend->n_vocab(), 2, 4096, 32, DType::F16, 512, 1);
  std::string text;
  for (int i = 0; text.size() < 4000; ++i)
    text += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + " + 1\n\n";
  std::vector<int32_t> h = tok->encode(text, false, false);
  h.resize(500);
  const Sampler s(greedy_params(), tok->eog_ids(), 0);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> d = propose_one(dp, 0, 1, h, 1, s);
  auto t1 = std::chrono::steady_clock::now();
  std::printf("timing: catch-up of 500 tokens + 1 draft: %.1f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
  for (int rep = 0; rep < 3; ++rep) {
    dp.rollback(0, 1, 500);
    h.resize(500);
    h.push_back(d.empty() ? 1 : d[0]);  // one new token to catch up
    const int64_t f0 = dp.stats().forwards;
    const double s0 = dp.stats().seconds;
    t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> d8 = propose_one(dp, 0, 1, h, 8, s);
    t1 = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::printf("timing: propose k=8 at 501 tokens: %.1f ms (%.1f ms in %lld forwards), %zu tokens, %.2f ms per drafted token\n",
                ms, 1e3 * (dp.stats().seconds - s0), static_cast<long long>(dp.stats().forwards - f0), d8.size(),
                ms / std::max<size_t>(1, d8.size()));
  }
}

}  // namespace

int main() {
  test_greedy_matches_stepping();
  test_rollback_and_catch_up();
  test_several_sequences();
  test_key_change_resets();
  test_retain_and_release();
  test_pool_exhaustion();
  test_sliding_window();
  test_sampled();
  test_target_vocab_mask();
  test_catch_up_budget();
  test_vocab_check_synthetic();
  test_vocab_check_real();
  timing_real();
  return test_util::report();
}
