// Embedding requests through the engine, against the fake model (fake_model.h), whose hidden
// state at a position is a hash of the token ids it reads back from the KV cache: pooled
// vectors must equal the ones computed from the token list alone (mean / cls / last / none,
// each normalisation), whether a request runs alone, batched with generation, in chunks, or
// preempted and recomputed; generation next to it must be undisturbed; embedding prompts
// leave nothing in the prefix cache and every page returns to the pool.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "engine/embedding.h"
#include "engine/engine.h"
#include "fake_model.h"
#include "fixtures.h"
#include "test_util.h"

using namespace edgellm;

namespace {

std::vector<int32_t> make_prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(2 + static_cast<int32_t>(fake::mix(i * 17 + salt) % (fake::kVocab - 2)));
  return p;
}

using fixtures::run_until_idle;

EngineConfig small_config() { return fixtures::engine_config(256, 8); }

// Hidden rows of every prompt position, from the token list alone.
std::vector<std::vector<float>> reference_rows(const std::vector<int32_t>& prompt) {
  std::vector<std::vector<float>> rows;
  uint64_t h = 0;
  for (int32_t t : prompt) {
    h = fake::extend(h, t);
    std::vector<float> r(fake::kHidden);
    fake::hidden_for(h, r.data());
    rows.push_back(r);
  }
  return rows;
}

std::vector<float> reference_embedding(const std::vector<int32_t>& prompt, Pooling pooling, int32_t norm) {
  const auto rows = reference_rows(prompt);
  std::vector<float> out;
  if (pooling == Pooling::None) {
    for (auto r : rows) {
      normalize_embedding(r.data(), fake::kHidden, norm);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  if (pooling == Pooling::Cls) out = rows.front();
  else if (pooling == Pooling::Last) out = rows.back();
  else {
    std::vector<double> sum(fake::kHidden, 0.0);
    for (const auto& r : rows)
      for (int d = 0; d < fake::kHidden; ++d) sum[d] += r[d];
    for (int d = 0; d < fake::kHidden; ++d) out.push_back(static_cast<float>(sum[d] / rows.size()));
  }
  normalize_embedding(out.data(), fake::kHidden, norm);
  return out;
}

bool close_to(const std::vector<float>& a, const std::vector<float>& b, double tol = 1e-6) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > tol) return false;
  return true;
}

struct Result {
  bool finished = false;
  std::string reason, error;
  std::vector<float> vec;
  int32_t rows = 0, prompt_tokens = 0, completion_tokens = 0, events = 0;
  std::vector<int32_t> tokens;
};

Result drain(OutputChannel& ch) {
  Result r;
  OutputEvent ev;
  while (ch.try_pop(ev)) {
    ++r.events;
    r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) {
      r.finished = true;
      r.reason = to_string(ev.finish_reason);
      r.error = ev.error;
      r.vec = ev.embedding;
      r.rows = ev.embedding_rows;
      r.prompt_tokens = ev.prompt_tokens;
      r.completion_tokens = ev.completion_tokens;
    }
  }
  return r;
}

EmbeddingParams params(Pooling p, int32_t norm = 2) {
  EmbeddingParams e;
  e.pooling = static_cast<int32_t>(p);
  e.normalize = norm;
  return e;
}

void test_normalize() {
  std::vector<float> v{3.0f, -4.0f};
  normalize_embedding(v.data(), 2, 2);
  CHECK_NEAR(v[0], 0.6, 1e-6);
  CHECK_NEAR(v[1], -0.8, 1e-6);
  v = {3.0f, -4.0f};
  normalize_embedding(v.data(), 2, 1);
  CHECK_NEAR(v[0], 3.0 / 7.0, 1e-6);
  v = {3.0f, -4.0f};
  normalize_embedding(v.data(), 2, 0);
  CHECK_NEAR(v[1], -32760.0, 1e-2);
  CHECK_NEAR(v[0], 32760.0 * 0.75, 1e-2);
  v = {3.0f, -4.0f};
  normalize_embedding(v.data(), 2, 3);
  CHECK_NEAR(std::pow(std::fabs(v[0]), 3) + std::pow(std::fabs(v[1]), 3), 1.0, 1e-5);
  v = {3.0f, -4.0f};
  normalize_embedding(v.data(), 2, -1);
  CHECK(v[0] == 3.0f && v[1] == -4.0f);
  v = {0.0f, 0.0f};
  normalize_embedding(v.data(), 2, 2);
  CHECK(v[0] == 0.0f && v[1] == 0.0f);
}

void test_each_pooling() {
  const Pooling kinds[] = {Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::None};
  for (Pooling p : kinds)
    for (int32_t norm : {-1, 2}) {
      auto model = std::make_shared<fake::FakeModel>();
      Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
      const auto prompt = make_prompt(37, static_cast<int32_t>(p) * 10 + norm);
      auto ch = std::make_shared<OutputChannel>();
      e.submit_embedding(prompt, params(p, norm), ch);
      run_until_idle(e);
      Result r = drain(*ch);
      CHECK(r.finished && r.reason == "stop" && r.error.empty());
      CHECK(r.events == 1);
      CHECK(r.tokens.empty() && r.completion_tokens == 0);
      CHECK(r.prompt_tokens == 37);
      CHECK(r.rows == (p == Pooling::None ? 37 : 1));
      const bool same = close_to(r.vec, reference_embedding(prompt, p, norm));
      if (!same) std::fprintf(stderr, "pooling %s norm %d differs from the reference\n", pooling_name(p), norm);
      CHECK(same);
      // cls / last compute only the one hidden row they use.
      CHECK(model->hidden_rows == (p == Pooling::Cls || p == Pooling::Last ? 1 : 37));
      CHECK(e.stats().pages_used == 0 && e.stats().pages_allocated == 0);  // freed, not cached
    }
}

// Many embedding requests and generation requests at once, in small chunks: every vector equals
// its reference, every generation its greedy reference.
void test_batched_with_generation(int32_t max_batch_tokens, int64_t kv_pages, const char* what) {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.max_batch_tokens = max_batch_tokens;
  if (kv_pages > 0) c.kv_memory = kv_pages * 16 * 2 * 32 * 4;  // pages of 16 F32 tokens, K + V, one head of 32
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  std::vector<std::vector<int32_t>> eprompts, gprompts;
  std::vector<std::shared_ptr<OutputChannel>> ech, gch;
  for (int i = 0; i < 10; ++i) {
    eprompts.push_back(make_prompt(5 + (i * 23) % 90, 100 + i));
    ech.push_back(std::make_shared<OutputChannel>());
    e.submit_embedding(eprompts.back(), params(i % 2 ? Pooling::Mean : Pooling::None), ech.back());
    if (i % 3 == 0) {
      gprompts.push_back(make_prompt(10 + i * 5, 200 + i));
      gch.push_back(std::make_shared<OutputChannel>());
      SamplingParams sp;
      sp.temperature = 0.0f;
      sp.max_tokens = 40;
      e.submit(gprompts.back(), sp, gch.back());
    }
  }
  run_until_idle(e);
  int ok = 0;
  for (size_t i = 0; i < eprompts.size(); ++i) {
    Result r = drain(*ech[i]);
    const bool good = r.finished && r.error.empty() &&
                      close_to(r.vec, reference_embedding(eprompts[i], i % 2 ? Pooling::Mean : Pooling::None, 2));
    if (!good) std::fprintf(stderr, "%s: embedding %zu differs (error '%s')\n", what, i, r.error.c_str());
    ok += good;
  }
  CHECK(ok == static_cast<int>(eprompts.size()));
  ok = 0;
  for (size_t i = 0; i < gprompts.size(); ++i) {
    Result r = drain(*gch[i]);
    const bool good = r.finished && r.tokens == fake::reference_greedy(gprompts[i], 40);
    if (!good) std::fprintf(stderr, "%s: generation %zu differs\n", what, i);
    ok += good;
  }
  CHECK(ok == static_cast<int>(gprompts.size()));
  CHECK(model->max_batch_seen <= max_batch_tokens);
  if (kv_pages > 0) CHECK(e.stats().preemptions > 0);
  CHECK(e.stats().pages_used == 0 && e.stats().running == 0 && e.stats().waiting == 0);
}

// A generation that grows while an embedding prefills in a pool too small for both: the embedding
// (the newest) is preempted, recomputed from scratch, and must still pool each row exactly once.
void test_preempted_embedding() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.max_batch_tokens = 16;
  c.prefix_cache = false;  // the recompute really recomputes
  c.kv_memory = 8 * 16 * 2 * 32 * 4;  // 8 pages
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  const auto gp = make_prompt(20, 1), ep = make_prompt(100, 2);
  auto g = std::make_shared<OutputChannel>(), em = std::make_shared<OutputChannel>();
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 100;
  sp.ignore_eos = true;
  e.submit(gp, sp, g);
  e.submit_embedding(ep, params(Pooling::Mean), em);
  run_until_idle(e);
  CHECK(e.stats().preemptions > 0);
  Result r = drain(*em);
  CHECK(r.finished && close_to(r.vec, reference_embedding(ep, Pooling::Mean, 2)));
  CHECK(drain(*g).tokens.size() == 100);
  CHECK(e.stats().pages_used == 0);
}

void test_prefix_cache_untouched() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  const auto prompt = make_prompt(80, 7);
  for (int round = 0; round < 2; ++round) {
    auto ch = std::make_shared<OutputChannel>();
    e.submit_embedding(prompt, params(Pooling::Mean), ch);
    run_until_idle(e);
    Result r = drain(*ch);
    CHECK(close_to(r.vec, reference_embedding(prompt, Pooling::Mean, 2)));
  }
  CHECK(e.stats().pages_cached == 0);
  CHECK(e.stats().prefix_cache_hits == 0);
  CHECK(model->tokens_computed == 160);  // computed in full both times
  // A generation over the same prompt afterwards still works (and finds nothing cached).
  auto ch = std::make_shared<OutputChannel>();
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 5;
  e.submit(prompt, sp, ch);
  run_until_idle(e);
  CHECK(drain(*ch).tokens == fake::reference_greedy(prompt, 5));
}

void test_model_default_pooling() {
  auto model = std::make_shared<fake::FakeModel>();
  model->set_pooling_type(3);  // last
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  CHECK(e.default_pooling() == Pooling::Last);
  const auto prompt = make_prompt(20, 3);
  auto ch = std::make_shared<OutputChannel>();
  EmbeddingParams p;  // pooling -1: the model's
  e.submit_embedding(prompt, p, ch);
  run_until_idle(e);
  CHECK(close_to(drain(*ch).vec, reference_embedding(prompt, Pooling::Last, 2)));

  auto plain = std::make_shared<fake::FakeModel>();
  Engine e2(plain, std::make_shared<fake::FakeVocab>(), small_config());
  CHECK(e2.default_pooling() == Pooling::Mean);
}

void test_abort() {
  auto model = std::make_shared<fake::FakeModel>();
  EngineConfig c = small_config();
  c.max_batch_tokens = 16;
  Engine e(model, std::make_shared<fake::FakeVocab>(), c);
  auto ch = std::make_shared<OutputChannel>();
  const int64_t id = e.submit_embedding(make_prompt(100, 1), params(Pooling::Mean), ch);
  e.step();
  e.step();
  e.abort(id);
  run_until_idle(e);
  Result r = drain(*ch);
  CHECK(r.finished && r.reason == "cancelled" && r.vec.empty());
  CHECK(e.stats().pages_used == 0 && e.stats().pages_allocated == 0);
}

template <class E, class F>
bool throws_with(F f, const std::string& needle) {
  try {
    f();
  } catch (const E& ex) {
    const bool has = std::string(ex.what()).find(needle) != std::string::npos;
    if (!has) std::fprintf(stderr, "message '%s' lacks '%s'\n", ex.what(), needle.c_str());
    return has;
  } catch (...) {
    return false;
  }
  return false;
}

void test_errors() {
  auto model = std::make_shared<fake::FakeModel>();
  Engine e(model, std::make_shared<fake::FakeVocab>(), small_config());
  auto ch = std::make_shared<OutputChannel>();
  CHECK(throws_with<InvalidRequestError>([&] { e.submit_embedding({}, params(Pooling::Mean), ch); }, "empty"));
  CHECK(throws_with<InvalidRequestError>([&] { e.submit_embedding({2, 999}, params(Pooling::Mean), ch); },
                                         "outside the vocabulary"));
  CHECK(throws_with<InvalidRequestError>([&] { e.submit_embedding({2, 3}, params(Pooling::Rank), ch); }, "rank"));
  EmbeddingParams bad;
  bad.pooling = 9;
  CHECK(throws_with<InvalidRequestError>([&] { e.submit_embedding({2, 3}, bad, ch); }, "pooling"));
  // n_ctx 256: 256 tokens fit (nothing is generated), 300 do not, by 44.
  CHECK(throws_with<ContextLengthError>([&] { e.submit_embedding(make_prompt(300, 1), params(Pooling::Mean), ch); },
                                        "by 44"));
  auto ok = std::make_shared<OutputChannel>();
  e.submit_embedding(make_prompt(256, 1), params(Pooling::Mean), ok);
  run_until_idle(e);
  CHECK(drain(*ok).rows == 1);
  CHECK(e.stats().running == 0 && e.stats().waiting == 0);
}

}  // namespace

int main() {
  test_normalize();
  test_each_pooling();
  test_batched_with_generation(128, 0, "batched");
  test_batched_with_generation(16, 0, "chunked");
  test_batched_with_generation(32, 14, "preempted");
  test_preempted_embedding();
  test_prefix_cache_untouched();
  test_model_default_pooling();
  test_abort();
  test_errors();
  return test_util::report();
}
