// return_progress: the prompt-progress events a streaming request gets while its prompt is
// prefilled (one at admission, then one per prefill chunk), on the fake model of fake_model.h.
// The events must not disturb the rest of the stream: the tokens still match the reference.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "fake_model.h"
#include "test_util.h"

using namespace edgellm;

namespace {

struct Stream {
  std::vector<PromptProgress> progress;
  std::vector<int32_t> progress_index;   // the completion index of each progress event
  std::map<int32_t, std::vector<int32_t>> tokens;
  int32_t finished = 0;
  bool progress_after_token = false;     // a progress event came after a token or final event
  bool progress_with_payload = false;    // a progress event carried text, tokens or finished
};

void drain(OutputChannel& ch, Stream& s) {
  OutputEvent ev;
  while (ch.try_pop(ev)) {
    if (ev.has_progress) {
      if (!s.tokens.empty() || s.finished) s.progress_after_token = true;
      if (!ev.text.empty() || !ev.token_ids.empty() || ev.finished) s.progress_with_payload = true;
      s.progress.push_back(ev.progress);
      s.progress_index.push_back(ev.index);
      continue;
    }
    auto& t = s.tokens[ev.index];
    t.insert(t.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) ++s.finished;
  }
}

std::vector<int32_t> make_prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(2 + static_cast<int32_t>(fake::mix(i * 17 + salt) % (fake::kVocab - 2)));
  return p;
}

SamplingParams params(int32_t max_tokens, bool progress) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.return_progress = progress;
  return p;
}

EngineConfig config(int32_t max_batch_tokens) {
  EngineConfig c;
  c.n_ctx = 512;
  c.kv_type = DType::F32;
  c.page_size = 16;
  c.max_seqs = 8;
  c.max_batch_tokens = max_batch_tokens;
  c.start_thread = false;
  return c;
}

// Runs the engine step by step, draining the channel after each so the order of events is kept.
void run(Engine& e, OutputChannel& ch, Stream& s) {
  for (int i = 0; i < 100000 && e.step(); ++i) drain(ch, s);
  drain(ch, s);
}

// processed values of the events
std::vector<int32_t> processed(const Stream& s) {
  std::vector<int32_t> v;
  for (const auto& p : s.progress) v.push_back(p.processed);
  return v;
}

// Properties every progress sequence has: total and cache fixed, processed strictly growing from
// cache to total, time 0 first and never going back, all before the first token.
void check_shape(const Stream& s, int32_t total, int32_t cache) {
  CHECK(!s.progress.empty());
  if (s.progress.empty()) return;
  CHECK(s.progress.front().processed == cache);
  CHECK(s.progress.front().time_ms == 0.0);
  CHECK(s.progress.back().processed == total);
  for (size_t i = 0; i < s.progress.size(); ++i) {
    CHECK(s.progress[i].total == total);
    CHECK(s.progress[i].cache == cache);
    if (i > 0) {
      CHECK(s.progress[i].processed > s.progress[i - 1].processed);
      CHECK(s.progress[i].time_ms >= s.progress[i - 1].time_ms);
    }
  }
  CHECK(!s.progress_after_token);
  CHECK(!s.progress_with_payload);
}

void test_chunked_prefill() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), config(16));
  const auto prompt = make_prompt(50, 1);
  auto ch = std::make_shared<OutputChannel>();
  e.submit(prompt, params(6, true), ch);
  Stream s;
  run(e, *ch, s);
  check_shape(s, 50, 0);
  CHECK((processed(s) == std::vector<int32_t>{0, 16, 32, 48, 50}));
  CHECK(s.tokens[0] == fake::reference_greedy(prompt, 6));
  CHECK(s.finished == 1);

  // The same prompt again: three full pages (48 tokens) come from the prefix cache, the last two
  // tokens are one chunk.
  auto again = std::make_shared<OutputChannel>();
  e.submit(prompt, params(6, true), again);
  Stream s2;
  run(e, *again, s2);
  check_shape(s2, 50, 48);
  CHECK((processed(s2) == std::vector<int32_t>{48, 50}));
  CHECK(s2.tokens[0] == fake::reference_greedy(prompt, 6));

  // A prompt sharing two pages: cache 32, then 16 + 16 + 6 more.
  auto other = prompt;
  other.push_back(7);
  other[40] = (other[40] + 1) % fake::kVocab;
  auto third = std::make_shared<OutputChannel>();
  e.submit(other, params(3, true), third);
  Stream s3;
  run(e, *third, s3);
  check_shape(s3, 51, 32);
  CHECK((processed(s3) == std::vector<int32_t>{32, 48, 51}));
}

void test_no_progress_unless_streaming_and_asked() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), config(16));
  const auto prompt = make_prompt(40, 2);
  auto off = std::make_shared<OutputChannel>();
  e.submit(prompt, params(4, false), off);
  Stream s;
  run(e, *off, s);
  CHECK(s.progress.empty());
  CHECK(s.finished == 1);

  // Non-streaming requests ignore the flag: one final event, nothing else.
  auto whole = std::make_shared<OutputChannel>();
  whole->collect_whole();
  e.submit(make_prompt(40, 3), params(4, true), whole);
  int events = 0;
  OutputEvent ev;
  for (int i = 0; i < 1000 && e.step(); ++i) {
  }
  while (whole->try_pop(ev)) {
    ++events;
    CHECK(!ev.has_progress);
  }
  CHECK(events == 1);
}

void test_n_completions() {
  // n = 2: completion 0 computes the prompt and reports it; the fork reports nothing.
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), config(32));
  const auto prompt = make_prompt(70, 4);
  SamplingParams p = params(5, true);
  p.n = 2;
  auto ch = std::make_shared<OutputChannel>();
  e.submit(prompt, p, ch);
  Stream s;
  run(e, *ch, s);
  check_shape(s, 70, 0);
  CHECK((processed(s) == std::vector<int32_t>{0, 32, 64, 70}));
  for (int32_t i : s.progress_index) CHECK(i == 0);
  CHECK(s.finished == 2);
  CHECK(s.tokens[0] == fake::reference_greedy(prompt, 5));
  CHECK(s.tokens[1] == fake::reference_greedy(prompt, 5));
}

void test_shared_batches_and_preemption() {
  // Several long prompts in a small pool: chunks share batches with other sequences' decode
  // steps, sequences are preempted and recomputed; each stream's progress still only grows.
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = config(24);
  c.kv_memory = static_cast<int64_t>(14) * 16 * 2 * 32 * 4;  // 14 pages of 16 tokens
  c.prefix_cache = false;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  std::vector<std::shared_ptr<OutputChannel>> chans;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(make_prompt(60 + 9 * i, 10 + i));
    chans.push_back(std::make_shared<OutputChannel>());
    e.submit(prompts.back(), params(40, true), chans.back());
  }
  std::vector<Stream> streams(4);
  for (int i = 0; i < 100000 && e.step(); ++i)
    for (int k = 0; k < 4; ++k) drain(*chans[k], streams[k]);
  for (int k = 0; k < 4; ++k) {
    drain(*chans[k], streams[k]);
    check_shape(streams[k], static_cast<int32_t>(prompts[k].size()), 0);
    CHECK(streams[k].tokens[0] == fake::reference_greedy(prompts[k], 40));
  }
  CHECK(e.stats().preemptions > 0);
}

}  // namespace

int main() {
  test_chunked_prefill();
  test_no_progress_unless_streaming_and_asked();
  test_n_completions();
  test_shared_batches_and_preemption();
  return test_util::report();
}
