// Engine + scheduler + paged KV + prefix cache against a fake model whose logits hash the
// token ids it reads back from the cache (fake_model.h): batched, chunked, preempted, forked
// and prefix-cached runs must all produce the reference greedy tokens, and every page must be
// back in the pool once the requests are done.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "engine/engine.h"
#include "fake_model.h"
#include "fixtures.h"
#include "test_util.h"

using namespace edgellm;

namespace {

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason, stop_string, error;
  int32_t cached_tokens = 0;
  bool finished = false;
};

using fake::make_prompt;
using fixtures::greedy;
using fixtures::run_until_idle;

EngineConfig small_config() { return fixtures::engine_config(); }

// Drains the events of a channel into per-index results.
void collect(OutputChannel& ch, std::map<int32_t, Collected>& out) {
  OutputEvent ev;
  while (ch.try_pop(ev)) {
    Collected& c = out[ev.index];
    c.text += ev.text;
    c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) {
      c.finished = true;
      c.finish_reason = to_string(ev.finish_reason);
      c.stop_string = ev.stop_string;
      c.error = ev.error;
      c.cached_tokens = ev.cached_tokens;
    }
  }
}

struct Run {
  std::vector<std::shared_ptr<OutputChannel>> channels;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
};

// Submits prompts of mixed lengths, runs to completion, checks each against the reference.
void check_batch(Engine& e, int n, int32_t min_len, int32_t max_len, int32_t max_tokens, const char* what) {
  Run r;
  for (int i = 0; i < n; ++i) {
    const int32_t len = min_len + (i * 37) % (max_len - min_len + 1);
    r.prompts.push_back(make_prompt(len, i));
    r.max_tokens.push_back(max_tokens - i % 3);
    r.channels.push_back(std::make_shared<OutputChannel>());
    e.submit(r.prompts.back(), greedy(r.max_tokens.back()), r.channels.back());
  }
  run_until_idle(e);
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    std::map<int32_t, Collected> got;
    collect(*r.channels[i], got);
    const auto want = fake::reference_greedy(r.prompts[i], r.max_tokens[i]);
    if (got[0].finished && got[0].tokens == want && got[0].error.empty()) ++ok;
    else std::fprintf(stderr, "%s: request %d differs (finished %d, error '%s', %zu vs %zu tokens)\n", what, i,
                      got[0].finished, got[0].error.c_str(), got[0].tokens.size(), want.size());
  }
  CHECK(ok == n);
  CHECK(e.stats().pages_used == 0);
  CHECK(e.stats().running == 0 && e.stats().waiting == 0);
}

void test_single_and_batched() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  check_batch(e, 1, 20, 20, 40, "single");
  check_batch(e, 16, 3, 90, 40, "batched");
  CHECK(model->max_batch_seen > 1);
}

void test_chunked_prefill() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.max_batch_tokens = 16;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  check_batch(e, 8, 40, 120, 30, "chunked");
  CHECK(model->max_batch_seen <= 16);
}

void test_preemption() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  // 16 pages of 16 tokens: far less than 8 sequences of ~100 tokens need at once.
  c.kv_memory = static_cast<int64_t>(16) * 16 * 2 * 32 * 4;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  CHECK(e.stats().pages_full_total == 16);
  check_batch(e, 8, 30, 70, 60, "preemption");
  CHECK(e.stats().preemptions > 0);
}

void test_prefix_cache() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  const auto prompt = make_prompt(70, 5);
  auto a = std::make_shared<OutputChannel>();
  e.submit(prompt, greedy(20), a);
  run_until_idle(e);
  const int64_t computed_first = model->tokens_computed;
  auto b = std::make_shared<OutputChannel>();
  e.submit(prompt, greedy(20), b);
  run_until_idle(e);
  std::map<int32_t, Collected> ga, gb;
  collect(*a, ga);
  collect(*b, gb);
  const auto want = fake::reference_greedy(prompt, 20);
  CHECK(ga[0].tokens == want);
  CHECK(gb[0].tokens == want);
  CHECK(gb[0].cached_tokens == 64);  // 4 full pages of 16; the last prompt token is recomputed
  CHECK(e.stats().prefix_cache_hits == 1);
  CHECK(e.stats().prefix_cache_queries == 2);
  CHECK(model->tokens_computed - computed_first < computed_first);
  CHECK(e.stats().pages_used == 0);
  CHECK(e.stats().pages_cached > 0);
  // A prompt sharing only the first two pages reuses exactly those.
  auto other = prompt;
  other[40] = (other[40] + 1) % fake::kVocab;
  auto c = std::make_shared<OutputChannel>();
  e.submit(other, greedy(10), c);
  run_until_idle(e);
  std::map<int32_t, Collected> gc;
  collect(*c, gc);
  CHECK(gc[0].cached_tokens == 32);
  CHECK(gc[0].tokens == fake::reference_greedy(other, 10));
}

void test_window_layers() {
  // A sliding window of 40 tokens on the second layer; prompts longer than the window so pages
  // are trimmed, with the prefix cache on and a small pool so cached window pages are evicted.
  auto model = std::make_shared<fake::FakeModel>(40);
  EngineConfig c = small_config();
  c.max_batch_tokens = 32;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  check_batch(e, 6, 50, 150, 40, "window");
  const auto prompt = make_prompt(120, 77);
  for (int rep = 0; rep < 2; ++rep) {
    auto ch = std::make_shared<OutputChannel>();
    e.submit(prompt, greedy(30), ch);
    run_until_idle(e);
    std::map<int32_t, Collected> g;
    collect(*ch, g);
    CHECK(g[0].error.empty());
    CHECK(g[0].tokens == fake::reference_greedy(prompt, 30));
  }
  CHECK(e.stats().pages_used == 0);
}

void test_abort() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.max_batch_tokens = 16;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  // Mid-prefill: a 100-token prompt takes several 16-token steps.
  auto a = std::make_shared<OutputChannel>();
  const int64_t ida = e.submit(make_prompt(100, 1), greedy(50), a);
  e.step();
  e.step();
  CHECK(e.stats().pages_used > 0);
  e.abort(ida);
  e.step();
  std::map<int32_t, Collected> ga;
  collect(*a, ga);
  CHECK(ga[0].finished && ga[0].finish_reason == "cancelled");
  CHECK(ga[0].tokens.empty());
  CHECK(e.stats().pages_used == 0);
  // Mid-decode.
  auto b = std::make_shared<OutputChannel>();
  const int64_t idb = e.submit(make_prompt(10, 2), greedy(200), b);
  for (int i = 0; i < 20; ++i) e.step();
  e.abort(idb);
  e.step();
  std::map<int32_t, Collected> gb;
  collect(*b, gb);
  CHECK(gb[0].finished && gb[0].finish_reason == "cancelled");
  CHECK(gb[0].tokens.size() >= 10);
  CHECK(e.stats().pages_used == 0);
  CHECK(e.idle());
}

void test_fork_n() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  const auto prompt = make_prompt(40, 9);
  auto ch = std::make_shared<OutputChannel>();
  SamplingParams p = greedy(25);
  p.n = 3;
  e.submit(prompt, p, ch);
  run_until_idle(e);
  std::map<int32_t, Collected> g;
  collect(*ch, g);
  const auto want = fake::reference_greedy(prompt, 25);
  CHECK(g.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(g[i].finished && g[i].tokens == want);
  CHECK(model->tokens_computed < 40 + 3 * 25 + 3);  // the prompt was computed once
  CHECK(e.stats().pages_used == 0);

  // Sampled: completions differ from each other but repeat with the same seed.
  auto run = [&](uint64_t seed) {
    SamplingParams q = fixtures::sampled(1.0f, 20, seed);
    q.n = 2;
    auto c = std::make_shared<OutputChannel>();
    e.submit(prompt, q, c);
    run_until_idle(e);
    std::map<int32_t, Collected> r;
    collect(*c, r);
    return r;
  };
  auto r1 = run(42), r2 = run(42);
  CHECK(r1[0].tokens == r2[0].tokens && r1[1].tokens == r2[1].tokens);
  CHECK(r1[0].tokens != r1[1].tokens);
}

void test_errors() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  auto ch = std::make_shared<OutputChannel>();
  bool threw = false;
  try {
    e.submit(make_prompt(500, 1), greedy(100), ch);
  } catch (const ContextLengthError& err) {
    threw = std::string(err.what()) == "prompt has 500 tokens, max_tokens 100: 600 > n_ctx 512 by 88";
  }
  CHECK(threw);
  threw = false;
  try {
    e.submit({}, greedy(4), ch);
  } catch (const InvalidRequestError&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    SamplingParams p = greedy(4);
    p.constraint.regex = "[a-z]+";
    e.submit(make_prompt(4, 1), p, ch);
  } catch (const InvalidRequestError& err) {
    threw = std::string(err.what()).find("constraint") != std::string::npos;
  }
  CHECK(threw);
  // More pages than the pool: rejected at submit, not after a deadlock.
  EngineConfig c = small_config();
  c.kv_memory = static_cast<int64_t>(4) * 16 * 2 * 32 * 4;  // 4 pages = 64 tokens
  Engine small(model, std::make_shared<fake::FakeVocab>(), c);
  threw = false;
  try {
    small.submit(make_prompt(40, 1), greedy(40), ch);
  } catch (const ContextLengthError& err) {
    threw = std::string(err.what()).find("holds only 4 pages (64 tokens) of one sequence") != std::string::npos;
  }
  CHECK(threw);
}

void test_stop_strings() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  const auto prompt = make_prompt(12, 3);
  auto full_ch = std::make_shared<OutputChannel>();
  e.submit(prompt, greedy(40), full_ch);
  run_until_idle(e);
  std::map<int32_t, Collected> full;
  collect(*full_ch, full);
  const std::string text = full[0].text;
  CHECK(text.size() >= 20);
  // A stop string that spans token boundaries in the middle of the text.
  const std::string stop = text.substr(9, 3);
  const size_t at = text.find(stop);
  for (bool stream : {true, false}) {
    SamplingParams p = greedy(40);
    p.stop = {stop};
    auto ch = std::make_shared<OutputChannel>();
    if (!stream) ch->collect_whole();
    e.submit(prompt, p, ch);
    run_until_idle(e);
    std::map<int32_t, Collected> g;
    collect(*ch, g);
    CHECK(g[0].text == text.substr(0, at));
    CHECK(g[0].finish_reason == "stop" && g[0].stop_string == stop);
  }
  CHECK(e.stats().pages_used == 0);
}

void test_threaded() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.start_thread = true;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      const auto prompt = make_prompt(10 + t * 7, t);
      auto ch = std::make_shared<OutputChannel>();
      e.submit(prompt, greedy(30), ch);
      std::vector<int32_t> got;
      OutputEvent ev;
      while (ch->pop(ev, 10000)) {
        got.insert(got.end(), ev.token_ids.begin(), ev.token_ids.end());
        if (ev.finished) break;
      }
      ok[t] = got == fake::reference_greedy(prompt, 30);
    });
  for (auto& th : threads) th.join();
  int n = 0;
  for (int v : ok) n += v;
  CHECK(n == 8);
  // eval_logits on the engine thread, between steps: rows equal the reference logits.
  const auto ids = make_prompt(50, 11);
  std::vector<float> rows(ids.size() * fake::kVocab);
  e.eval_logits(ids, rows.data());
  uint64_t h = 0;
  float want[fake::kVocab];
  bool same = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    h = fake::extend(h, ids[i]);
    fake::logits_for(h, want);
    for (int v = 0; v < fake::kVocab; ++v) same = same && rows[i * fake::kVocab + v] == want[v];
  }
  CHECK(same);
  CHECK(e.stats().pages_used == 0);
}

// A channel that collects whole completions (a non-streaming request): one event per completion,
// its final one, with everything sent before it joined; an error's carries only the error.
void test_channel_collects_whole() {
  OutputChannel ch;
  ch.collect_whole();
  auto token = [](int32_t index, int32_t id, const std::string& text) {
    OutputEvent ev;
    ev.index = index;
    ev.text = text;
    ev.token_ids = {id};
    ev.logprobs.push_back(TokenLogprob{});
    ev.logprobs.back().token = id;
    return ev;
  };
  OutputEvent first = token(0, 1, "a");
  first.has_prompt_logprobs = true;
  first.prompt_logprobs.resize(3);
  ch.push(first);
  ch.push(token(1, 7, "x"));
  ch.push(token(0, 2, "b"));
  OutputEvent ev;
  CHECK(!ch.try_pop(ev));  // nothing queued before a completion ends
  OutputEvent last = token(0, 3, "c");
  last.finished = true;
  last.finish_reason = FinishReason::Stop;
  ch.push(last);
  OutputEvent failed;
  failed.index = 1;
  failed.finished = true;
  failed.finish_reason = FinishReason::Error;
  failed.error = "boom";
  ch.push(failed);
  CHECK(ch.try_pop(ev));
  CHECK(ev.index == 0 && ev.finished && ev.text == "abc");
  CHECK((ev.token_ids == std::vector<int32_t>{1, 2, 3}));
  CHECK(ev.logprobs.size() == 3 && ev.logprobs[2].token == 3);
  CHECK(ev.has_prompt_logprobs && ev.prompt_logprobs.size() == 3);
  CHECK(ch.try_pop(ev));
  CHECK(ev.index == 1 && ev.finished && ev.error == "boom" && ev.text.empty() && ev.token_ids.empty());
  CHECK(!ch.try_pop(ev));
}

}  // namespace

int main() {
  test_channel_collects_whole();
  test_single_and_batched();
  test_chunked_prefill();
  test_preemption();
  test_prefix_cache();
  test_window_layers();
  test_abort();
  test_fork_n();
  test_errors();
  test_stop_strings();
  test_threaded();
  return test_util::report();
}
