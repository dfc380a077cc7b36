// Context shift (EngineConfig::context_shift, llama-server's --context-shift): a sequence that
// fills n_ctx while generating keeps its first n_keep tokens and the newer half of the rest,
// re-prefilled at positions 0.., and goes on. The fake model's logits hash the tokens it reads
// back from the KV cache at positions 0..pos, so the output equals the reference below only if
// the kept tokens sit at the right positions after every shift, with no stale page left.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "engine/engine.h"
#include "fake_model.h"
#include "test_util.h"

using namespace edgellm;

namespace {

struct Result {
  std::vector<int32_t> tokens;
  std::string finish_reason, error;
  int32_t completion_tokens = 0, context_shifts = 0;
  bool finished = false;
};

// Greedy generation with llama-server's context shift applied to the token list itself.
std::vector<int32_t> reference(std::vector<int32_t> tokens, int32_t n_ctx, int32_t n_keep, int32_t max_tokens,
                               bool shift, bool ignore_eos, int32_t* shifts = nullptr, int32_t n_discard = 0) {
  const int32_t n_prompt = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> out;
  float l[fake::kVocab];
  if (shifts) *shifts = 0;
  while (max_tokens < 0 || static_cast<int32_t>(out.size()) < max_tokens) {
    uint64_t h = 0;
    for (int32_t t : tokens) h = fake::extend(h, t);
    fake::logits_for(h, l);
    if (ignore_eos) l[fake::kEog] = -INFINITY;
    const int32_t t = fake::argmax(l);
    out.push_back(t);
    tokens.push_back(t);
    if (t == fake::kEog) break;
    if (max_tokens >= 0 && static_cast<int32_t>(out.size()) >= max_tokens) break;
    if (static_cast<int32_t>(tokens.size()) >= n_ctx) {
      if (!shift) break;
      int32_t keep = n_keep < 0 ? n_prompt : n_keep;
      keep = std::max(0, std::min(keep, n_ctx - 4));
      const int32_t n_past = static_cast<int32_t>(tokens.size()) - 1;
      const int32_t discard = n_discard > 0 ? std::min(n_discard, n_past - keep) : (n_past - keep) / 2;
      tokens.erase(tokens.begin() + keep, tokens.begin() + keep + discard);
      if (shifts) ++*shifts;
    }
  }
  return out;
}

SamplingParams greedy(int32_t max_tokens, int32_t n_keep = 0) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.n_keep = n_keep;
  p.ignore_eos = true;
  return p;
}

EngineConfig config(bool shift, int32_t n_ctx = 64) {
  EngineConfig c;
  c.n_ctx = n_ctx;
  c.kv_type = DType::F32;
  c.page_size = 16;
  c.max_seqs = 8;
  c.max_batch_tokens = 32;
  c.start_thread = false;
  c.context_shift = shift;
  return c;
}

void run(Engine& e) {
  for (int i = 0; i < 100000 && e.step(); ++i) {
    // Pages held never exceed what one context needs per sequence.
    CHECK(e.stats().pages_used <= static_cast<int64_t>(e.stats().running) * ((e.n_ctx() + 15) / 16 + 1) * 2);
  }
}

std::map<int32_t, Result> drain(OutputChannel& ch) {
  std::map<int32_t, Result> out;
  OutputEvent ev;
  while (ch.try_pop(ev)) {
    Result& r = out[ev.index];
    r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) {
      r.finished = true;
      r.finish_reason = to_string(ev.finish_reason);
      r.error = ev.error;
      r.completion_tokens = ev.completion_tokens;
      r.context_shifts = ev.timings.context_shifts;
    }
  }
  return out;
}

Result generate(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& p, bool stream = true) {
  auto ch = std::make_shared<OutputChannel>();
  if (!stream) ch->collect_whole();
  e.submit(prompt, p, ch);
  run(e);
  return drain(*ch)[0];
}

void test_keeps_generating() {
  for (int32_t n_keep : {0, 5, -1})
    for (bool stream : {true, false}) {
      auto model = std::make_shared<fake::FakeModel>();
      Engine e(model, std::make_shared<fake::FakeVocab>(), config(true));
      const auto prompt = fake::make_prompt(20, 3 + n_keep);
      int32_t shifts = 0;
      const auto want = reference(prompt, 64, n_keep, 200, true, true, &shifts);
      const Result r = generate(e, prompt, greedy(200, n_keep), stream);
      CHECK(r.finished && r.error.empty());
      CHECK(r.finish_reason == "length");  // max_tokens, not the context
      CHECK(r.tokens.size() == 200u);
      CHECK(r.completion_tokens == 200);
      CHECK(r.tokens == want);
      CHECK(shifts > 2);
      CHECK(r.context_shifts == shifts);
      CHECK(e.stats().context_shifts == shifts);
      CHECK(e.stats().pages_used == 0);
      CHECK(e.stats().running == 0);
      CHECK(e.stats().generated_tokens_total == 200);
    }
}

void test_n_discard() {
  // llama-server's n_discard: a fixed number of tokens dropped per shift (more shifts when small).
  for (int32_t nd : {3, 40, 1000}) {
    Engine e(std::make_shared<fake::FakeModel>(), std::make_shared<fake::FakeVocab>(), config(true));
    const auto prompt = fake::make_prompt(20, 11);
    SamplingParams p = greedy(150, 8);
    p.n_discard = nd;
    int32_t shifts = 0;
    const auto want = reference(prompt, 64, 8, 150, true, true, &shifts, nd);
    const Result r = generate(e, prompt, p);
    CHECK(r.tokens == want);
    CHECK(r.context_shifts == shifts);
    if (nd == 3) CHECK(shifts > 30);
    CHECK(e.stats().pages_used == 0);
  }
  Engine e(std::make_shared<fake::FakeModel>(), std::make_shared<fake::FakeVocab>(), config(true));
  SamplingParams p = greedy(10);
  p.n_discard = -1;
  CHECK(test_util::throws_invalid([&] { e.submit(fake::make_prompt(8, 1), p, std::make_shared<OutputChannel>()); }));
}

void test_off_stops_at_length() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), config(false));
  const auto prompt = fake::make_prompt(20, 9);
  const Result r = generate(e, prompt, greedy(-1));
  CHECK(r.finish_reason == "length");
  CHECK(r.tokens.size() == 44u);  // 20 + 44 = n_ctx
  CHECK(r.tokens == reference(prompt, 64, 0, -1, false, true));
  CHECK(r.context_shifts == 0 && e.stats().context_shifts == 0);
  bool threw = false;
  try {
    e.submit(prompt, greedy(200), std::make_shared<OutputChannel>());
  } catch (const ContextLengthError&) {
    threw = true;
  }
  CHECK(threw);  // prompt + max_tokens > n_ctx is refused without the opt-in
  CHECK(e.stats().pages_used == 0);
}

void test_prompt_must_fit() {
  Engine e(std::make_shared<fake::FakeModel>(), std::make_shared<fake::FakeVocab>(), config(true));
  bool threw = false;
  try {
    e.submit(fake::make_prompt(64, 1), greedy(10), std::make_shared<OutputChannel>());
  } catch (const ContextLengthError&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    SamplingParams p = greedy(10, -2);
    e.submit(fake::make_prompt(8, 1), p, std::make_shared<OutputChannel>());
  } catch (const InvalidRequestError&) {
    threw = true;
  }
  CHECK(threw);
  // Without max_tokens a shifted sequence runs until EOG; with max_tokens it ends there.
  const auto prompt = fake::make_prompt(60, 4);
  const Result r = generate(e, prompt, greedy(100, -1));
  CHECK(r.tokens == reference(prompt, 64, -1, 100, true, true));
  CHECK(r.context_shifts > 10);  // the whole prompt is kept: each shift frees only a little
  CHECK(e.stats().pages_used == 0);
}

void test_window_model() {
  // Sliding window of 24 on a second layer: the re-prefill trims window pages as a prompt does.
  auto model = std::make_shared<fake::FakeModel>(24);
  Engine e(model, std::make_shared<fake::FakeVocab>(), config(true, 80));
  const auto prompt = fake::make_prompt(30, 5);
  const Result r = generate(e, prompt, greedy(250, 10));
  CHECK(r.error.empty());
  CHECK(r.tokens == reference(prompt, 80, 10, 250, true, true));
  CHECK(e.stats().pages_used == 0);
}

void test_batched_preempted_forked() {
  // Several long generations in a pool too small for them all: shifts, preemption, n = 2 forks
  // and the prefix cache together.
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = config(true);
  c.kv_memory = static_cast<int64_t>(10) * 16 * 2 * 32 * 4;  // 10 pages of 16 tokens
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<OutputChannel>> chs;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(fake::make_prompt(10 + 7 * i, 40 + i));
    chs.push_back(std::make_shared<OutputChannel>());
    SamplingParams p = greedy(150, i);
    p.n = i == 0 ? 2 : 1;
    e.submit(prompts.back(), p, chs.back());
  }
  run(e);
  for (int i = 0; i < 4; ++i) {
    auto got = drain(*chs[i]);
    const auto want = reference(prompts[i], 64, i, 150, true, true);
    for (int k = 0; k < (i == 0 ? 2 : 1); ++k) {
      CHECK(got[k].error.empty());
      CHECK(got[k].tokens == want);
    }
  }
  CHECK(e.stats().preemptions > 0);
  CHECK(e.stats().context_shifts > 0);
  CHECK(e.stats().pages_used == 0);
}

void test_speculative() {
  // N-gram drafts stop short of the context end; a shift drops any draft. Output unchanged.
  EngineConfig c = config(true);
  c.spec.mode = SpecMode::Ngram;
  c.spec.adaptive = false;
  c.spec.max_draft = 8;
  Engine e(std::make_shared<fake::FakeModel>(), std::make_shared<fake::FakeVocab>(), c);
  // A repetitive prompt so that n-gram lookups propose.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back(2 + i % 5);
  const Result r = generate(e, prompt, greedy(200, 4));
  CHECK(r.tokens == reference(prompt, 64, 4, 200, true, true));
  CHECK(e.stats().context_shifts > 0);
  CHECK(e.stats().pages_used == 0);
}

}  // namespace

int main() {
  test_keeps_generating();
  test_n_discard();
  test_off_stops_at_length();
  test_prompt_must_fit();
  test_window_model();
  test_batched_preempted_forked();
  test_speculative();
  return test_util::report();
}
