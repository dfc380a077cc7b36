#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <random>
#include <string>

#include "common/errors.h"
#include "common/machine_memory.h"
#include "model/model_config.h"  // default_context_length

namespace edgellm {
namespace {
constexpr int32_t kMaxContext = 1 << 24;  // tokens per sequence; python/edgellm/validation.py MAX_N_CTX

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Engine::Engine(std::shared_ptr<EngineModel> model, std::shared_ptr<const EngineVocab> vocab, EngineConfig cfg,
               std::shared_ptr<EngineModel> draft)
    : model_(std::move(model)), vocab_(std::move(vocab)), cfg_(cfg) {
  if (cfg_.page_size < 16 || cfg_.page_size > 64)
    throw InvalidRequestError("page_size must be between 16 and 64, got " + std::to_string(cfg_.page_size));
  if (cfg_.max_seqs < 1 || cfg_.max_seqs > 256)
    throw InvalidRequestError("max_seqs must be between 1 and 256, got " + std::to_string(cfg_.max_seqs));
  if (cfg_.max_batch_tokens < 1)
    throw InvalidRequestError("max_batch_tokens must be >= 1, got " + std::to_string(cfg_.max_batch_tokens));
  if (cfg_.n_ctx < 0) throw InvalidRequestError("n_ctx must be >= 0, got " + std::to_string(cfg_.n_ctx));
  if (cfg_.kv_memory < 0) throw InvalidRequestError("kv_memory must be >= 0");
  n_vocab_ = model_->n_vocab();
  const int32_t trained = model_->context_length();
  n_ctx_ = cfg_.n_ctx > 0 ? cfg_.n_ctx : default_context_length(trained);

  KVCacheConfig kc = model_->kv_geometry();
  kc.page_size = cfg_.page_size;
  kc.dtype = cfg_.kv_type;
  kc.max_seqs = cfg_.max_seqs + 1;  // the last slot is eval_logits'
  eval_slot_ = cfg_.max_seqs;

  // Pool sizing (engine/kv_budget.h), checked against what the machine can give.
  const int64_t ctx_pages = ceil_div(n_ctx_, kc.page_size);
  const KvBudget budget(kc, n_ctx_, cfg_.kv_memory, cfg_.max_batch_tokens, cfg_.max_seqs, machine_memory().available);
  seq_pages_max_ = budget.seq_pages_max();
  if (n_ctx_ > kMaxContext)
    throw ContextLengthError("n_ctx " + std::to_string(n_ctx_) + " is beyond the largest context the engine allows (" +
                             std::to_string(kMaxContext) + " tokens)");
  {
    // the draft's pool holds as many positions as the target's sequences can (committed as used)
    DraftPool pool;
    pool.slots = kc.max_seqs;
    pool.positions = std::min<int64_t>(seq_pages_max_, ctx_pages) * kc.max_seqs;
    if (kc.pages_full > 0) pool.positions = std::min<int64_t>(pool.positions, kc.pages_full);
    pool.page_size = kc.page_size;
    pool.kv_type = kc.dtype;
    spec_ = std::make_unique<SpeculativeDecoder>(cfg_.spec, std::move(draft), n_vocab_, n_ctx_, cfg_.max_batch_tokens,
                                                 pool);
  }
  kv_ = budget.reserve(kc);
  if (cfg_.prefix_cache) cache_ = std::make_unique<PrefixCache>(*kv_);
  if (!cfg_.cache_dir.empty()) {
    if (!cache_) throw InvalidRequestError("cache_dir needs the prefix cache (prefix_cache is off)");
    if (model_->kv_tied_to_serving_cache())
      throw InvalidRequestError("cache_dir with GPU-offloaded layers is not supported: their KV lives in device "
                                "memory (use n_gpu_layers=0, or no cache_dir)");
    if (cfg_.cache_max_bytes < 0) throw InvalidRequestError("cache_max_bytes must be >= 0");
    const int64_t max_bytes = cfg_.cache_max_bytes > 0 ? cfg_.cache_max_bytes : (2ll << 30);
    store_ = std::make_unique<PageStore>(cfg_.cache_dir, cfg_.cache_key.empty() ? "model" : cfg_.cache_key,
                                         PrefixCache::layout_of(*kv_), max_bytes);
    cache_->set_store(store_.get());
  }
  slot_tokens_.assign(cfg_.max_seqs, {});
  sched_ = std::make_unique<Scheduler>(*kv_, cache_.get(), cfg_.max_seqs, cfg_.max_batch_tokens);
  sched_->set_whole_prompts(!model_->causal());
  eog_ = vocab_->eog_tokens();
  n_embd_ = std::max(0, model_->n_embd());
  publish_stats();
  if (cfg_.start_thread) thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Wake every waiter: queued work is cancelled, pending tasks are run (they hold promises).
  drain_inbox();
  std::vector<int64_t> ids;
  for (const auto& s : sched_->running()) ids.push_back(s->request_id);
  for (const auto& s : sched_->waiting()) ids.push_back(s->request_id);
  for (int64_t id : ids) do_abort(id);
  if (cache_) cache_->clear();
}

int64_t Engine::submit(std::vector<int32_t> prompt, const SamplingParams& params, std::shared_ptr<OutputChannel> out,
                       std::vector<PromptImage> images, std::shared_ptr<const LoraMix> lora) {
  if (lora && lora->empty()) lora.reset();
  if (prompt.empty()) throw InvalidRequestError("prompt is empty: at least one token is needed");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= n_vocab_)
      throw InvalidRequestError("prompt token id " + std::to_string(prompt[i]) + " at position " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
  params.validate(n_vocab_);
  check_images(prompt, params, images);
  if (params.n > cfg_.max_seqs)
    throw InvalidRequestError("n = " + std::to_string(params.n) + " exceeds max_seqs " + std::to_string(cfg_.max_seqs));
  if (!model_->causal())
    throw InvalidRequestError("this is an embedding model (an encoder): it does not generate text; use embeddings");
  const int64_t np = static_cast<int64_t>(prompt.size());
  if (cfg_.context_shift) {
    // Generation goes on past n_ctx (the context shifts), so only the prompt must fit.
    if (np >= n_ctx_)
      throw ContextLengthError("prompt has " + std::to_string(np) + " tokens: no room to generate within n_ctx " +
                               std::to_string(n_ctx_) + " (context shift keeps generating, but the prompt must fit)");
  } else if (params.max_tokens >= 0) {
    const int64_t total = np + params.max_tokens;
    if (total > n_ctx_)
      throw ContextLengthError("prompt has " + std::to_string(np) + " tokens, max_tokens " +
                               std::to_string(params.max_tokens) + ": " + std::to_string(total) + " > n_ctx " +
                               std::to_string(n_ctx_) + " by " + std::to_string(total - n_ctx_));
  } else if (np >= n_ctx_) {
    throw ContextLengthError("prompt has " + std::to_string(np) + " tokens: no room to generate within n_ctx " +
                             std::to_string(n_ctx_));
  }
  int64_t span = params.max_tokens >= 0 ? np + params.max_tokens : n_ctx_;
  if (cfg_.context_shift) span = std::min<int64_t>(span, n_ctx_);
  const int64_t pages = ceil_div(span, kv_->page_size());
  if (pages > seq_pages_max_)
    throw ContextLengthError("request needs up to " + std::to_string(span) + " tokens = " + std::to_string(pages) +
                             " KV pages, but the KV memory (" + std::to_string(kv_->bytes_budget()) +
                             " bytes) holds only " + std::to_string(seq_pages_max_) + " pages (" +
                             std::to_string(seq_pages_max_ * kv_->page_size()) +
                             " tokens) of one sequence; raise kv_memory or lower max_tokens");
  std::vector<std::unique_ptr<TokenConstraint>> constraints(params.n);
  if (!params.constraint.empty()) {
    ConstraintSpec spec = params.constraint;
    spec.vocab = vocab_;
    spec.n_vocab = n_vocab_;
    for (auto& c : constraints) c = make_constraint(spec);
  }
  uint64_t seed = params.seed;
  if (!params.has_seed) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }

  Pending p;
  for (int32_t i = 0; i < params.n; ++i) {
    auto s = std::make_shared<Sequence>();
    s->index = i;
    s->out = out;
    s->tokens = prompt;
    s->images = images;
    s->mrope = has_grid(images);
    for (const PromptImage& im : images)
      for (int32_t j = 0; j < im.n_tokens; ++j) s->tokens[static_cast<size_t>(im.pos + j)] = image_key_token(im.hash, j);
    s->n_prompt = static_cast<int32_t>(np);
    s->max_tokens = params.max_tokens;
    s->lora = lora;
    s->lora_key = lora ? lora->cache_key() : 0;
    s->n_keep = params.n_keep;
    s->n_discard = params.n_discard;
    // Completion i draws from seed + i: n completions of a seeded request differ, yet repeat.
    s->sampler = std::make_unique<Sampler>(params, eog_, seed + static_cast<uint64_t>(i));
    s->constraint = std::move(constraints[i]);
    s->stop = StopMatcher(params.stop);
    if (images.empty()) spec_->start(s.get(), prompt);
    // Completion 0 computes the prompt (the others fork it): it alone reports prefill progress,
    // and only to a channel that streams.
    s->return_progress = i == 0 && !out->collects_whole() && params.return_progress;
    if (i == 0 && params.prompt_logprobs >= 0) {
      s->want_prompt_logprobs = true;
      s->use_prefix_cache = false;  // every prompt row is needed
    }
    if (i > 0) {
      s->parent = p.seqs[0].get();
      s->status = SequenceStatus::Blocked;
      p.seqs[0]->siblings.push_back(s.get());
    }
    p.seqs.push_back(std::move(s));
  }
  out->expect(params.n);
  return enqueue(std::move(p));
}

void Engine::check_images(const std::vector<int32_t>& prompt, const SamplingParams& params,
                          std::vector<PromptImage>& images) const {
  if (images.empty()) return;
  if (params.prompt_logprobs >= 0)
    throw InvalidRequestError("prompt_logprobs are not available for a prompt with images");
  const int64_t np = static_cast<int64_t>(prompt.size());
  int64_t next = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    PromptImage& im = images[i];
    const std::string name = "image " + std::to_string(i) + ": ";
    if (im.n_tokens <= 0 || im.pos < next || im.pos + static_cast<int64_t>(im.n_tokens) > np)
      throw InvalidRequestError(name + "positions [" + std::to_string(im.pos) + ", " + std::to_string(im.pos + im.n_tokens) +
                                ") are not a block of the prompt after the previous image");
    if (im.n_tokens > cfg_.max_batch_tokens)
      throw InvalidRequestError(name + std::to_string(im.n_tokens) + " tokens exceed max_batch_tokens " +
                                std::to_string(cfg_.max_batch_tokens) + " (an image block is computed in one batch)");
    if (!im.embd || n_embd_ <= 0 || im.embd->size() != static_cast<size_t>(im.n_tokens) * static_cast<size_t>(n_embd_))
      throw InvalidRequestError(name + "embeddings must be " + std::to_string(im.n_tokens) + " x " +
                                std::to_string(n_embd_) + " floats (the text model's width)");
    if ((im.rows != 0 || im.cols != 0) &&
        (!model_->mrope() || im.rows <= 0 || im.cols <= 0 || static_cast<int64_t>(im.rows) * im.cols != im.n_tokens))
      throw InvalidRequestError(name + "a grid of " + std::to_string(im.rows) + " x " + std::to_string(im.cols) +
                                " needs an M-RoPE model and rows x cols = its " + std::to_string(im.n_tokens) + " tokens");
    im.token = prompt[static_cast<size_t>(im.pos)];
    im.bidirectional = model_->image_blocks_bidirectional();
    next = im.pos + im.n_tokens;
  }
}

int64_t Engine::enqueue(Pending p) {
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    for (auto& s : p.seqs) {
      s->request_id = id;
      s->arrival = arrival_++;
    }
    inbox_.push_back(std::move(p));
    has_work_ = true;
  }
  cv_.notify_all();
  return id;
}

int32_t Engine::encoder_input_limit() const {
  return std::min({n_ctx_, cfg_.max_batch_tokens, std::max(1, model_->context_length())});
}

Pooling Engine::default_pooling() const {
  const int32_t p = model_->pooling_type();
  return p >= 0 && p <= 4 ? static_cast<Pooling>(p) : Pooling::Mean;
}

int64_t Engine::submit_embedding(std::vector<int32_t> prompt, const EmbeddingParams& params,
                                 std::shared_ptr<OutputChannel> out) {
  if (n_embd_ <= 0) throw InvalidRequestError("this model gives no hidden states: embeddings are not available");
  if (prompt.empty()) throw InvalidRequestError("input is empty: at least one token is needed for an embedding");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= n_vocab_)
      throw InvalidRequestError("input token id " + std::to_string(prompt[i]) + " at position " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
  if (params.pooling < -1 || params.pooling > 4)
    throw InvalidRequestError("pooling " + std::to_string(params.pooling) +
                              " is not a pooling type (-1 model default, 0 none, 1 mean, 2 cls, 3 last)");
  const Pooling pooling = params.pooling < 0 ? default_pooling() : static_cast<Pooling>(params.pooling);
  if (pooling == Pooling::Rank && model_->rank_outputs() <= 0)
    throw InvalidRequestError("pooling 'rank' needs a reranker's classification head, which this model has not "
                              "(use none, mean, cls or last)");
  const int64_t np = static_cast<int64_t>(prompt.size());
  if (!model_->causal() && np > cfg_.max_batch_tokens)
    throw ContextLengthError("input has " + std::to_string(np) + " tokens > max_batch_tokens " +
                             std::to_string(cfg_.max_batch_tokens) + ": an encoder runs each input in one batch");
  if (np > n_ctx_)
    throw ContextLengthError("input has " + std::to_string(np) + " tokens > n_ctx " + std::to_string(n_ctx_) + " by " +
                             std::to_string(np - n_ctx_));
  const int64_t pages = ceil_div(np, kv_->page_size());
  if (pages > seq_pages_max_)
    throw ContextLengthError("input of " + std::to_string(np) + " tokens needs " + std::to_string(pages) +
                             " KV pages, but the KV memory (" + std::to_string(kv_->bytes_budget()) +
                             " bytes) holds only " + std::to_string(seq_pages_max_) + " pages (" +
                             std::to_string(seq_pages_max_ * kv_->page_size()) + " tokens) of one sequence; raise kv_memory");

  auto s = std::make_shared<Sequence>();
  s->out = out;
  s->tokens = std::move(prompt);
  s->n_prompt = static_cast<int32_t>(np);
  s->max_tokens = 0;
  s->sampler = std::make_unique<Sampler>(SamplingParams{}, eog_, 0);  // never drawn from
  s->use_prefix_cache = false;  // every used position's hidden state must be computed
  s->embedding = true;
  s->embd = EmbeddingPool(pooling, pooling == Pooling::Rank ? -1 : params.normalize, n_embd_, model_->causal());
  out->expect(1);
  Pending p;
  p.seqs.push_back(std::move(s));
  return enqueue(std::move(p));
}

void Engine::abort(int64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  EngineStats st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = stats_;
  }
  if (store_) {  // the writer thread's counters, read now (the store locks its own)
    const PageStoreStats d = store_->stats();
    st.cache_disk = true;
    st.cache_disk_pages_read = d.pages_read;
    st.cache_disk_pages_written = d.pages_written;
    st.cache_disk_corrupt = d.corrupt;
    st.cache_disk_write_dropped = d.write_dropped;
    st.cache_disk_files = d.files;
    st.cache_disk_bytes = d.bytes;
    st.cache_disk_evicted = d.evicted;
  }
  return st;
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !has_work_ && inbox_.empty() && aborts_.empty() && tasks_.empty();
}

void Engine::eval_logits(const std::vector<int32_t>& ids, float* out, std::shared_ptr<const LoraMix> lora) {
  if (ids.empty()) return;
  if (!model_->causal()) throw InvalidRequestError("this is an embedding model (an encoder): it has no logits");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab_)
      throw InvalidRequestError("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
  if (static_cast<int64_t>(ids.size()) > n_ctx_)
    throw ContextLengthError("eval_logits: " + std::to_string(ids.size()) + " tokens > n_ctx " + std::to_string(n_ctx_));
  run_sync([&] { do_eval(ids, out, lora && !lora->empty() ? lora.get() : nullptr); });
}

void Engine::run_sync(const std::function<void()>& f) {
  if (!thread_.joinable()) {
    drain_inbox();
    f();
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> fut = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw RequestCancelled("the engine is shutting down");
    tasks_.push_back([&f, done] {
      try {
        f();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_all();
  fut.get();
}

void Engine::check_slot(int32_t slot) const {
  if (slot < 0 || slot >= cfg_.max_seqs)
    throw InvalidRequestError("slot id " + std::to_string(slot) + " is out of range [0, " +
                              std::to_string(cfg_.max_seqs) + ")");
  if (!cache_) throw InvalidRequestError("slot save / restore needs the prefix cache (prefix_cache is off)");
  if (model_->kv_tied_to_serving_cache())
    throw InvalidRequestError("slot save / restore with GPU-offloaded layers is not supported: their KV lives in "
                              "device memory");
}

SlotResult Engine::slot_save(int32_t slot, const std::string& file, const std::string& model_key) {
  check_slot(slot);
  SlotResult res;
  run_sync([&] {
    const std::vector<int32_t>& t = slot_tokens_[slot];
    std::vector<PageRecord> recs = cache_->export_chain(t.data(), static_cast<int32_t>(t.size()));
    res.n_tokens = static_cast<int32_t>(recs.size()) * kv_->page_size();
    res.n_bytes = PageStore::write_slot(file, PrefixCache::layout_of(*kv_), model_key, t, recs);
  });
  return res;
}

SlotResult Engine::slot_restore(int32_t slot, const std::string& file, const std::string& model_key) {
  check_slot(slot);
  std::vector<int32_t> tokens;
  std::vector<PageRecord> recs;
  SlotResult res;
  res.n_bytes = PageStore::read_slot(file, PrefixCache::layout_of(*kv_), model_key, n_ctx_, tokens,
                                     recs);  // off the engine thread
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab_) throw InvalidRequestError("slot file '" + file + "' holds token ids outside the vocabulary");
  run_sync([&] {
    res.n_tokens = cache_->import_chain(tokens.data(), static_cast<int32_t>(tokens.size()), recs);
    slot_tokens_[slot] = tokens;
    publish_stats();
  });
  return res;
}

int32_t Engine::slot_erase(int32_t slot) {
  check_slot(slot);
  int32_t n = 0;
  run_sync([&] {
    std::vector<int32_t>& t = slot_tokens_[slot];
    n = cache_->erase_chain(t.data(), static_cast<int32_t>(t.size()));
    t.clear();
    publish_stats();
  });
  return n;
}

void Engine::flush_cache() {
  if (store_) store_->flush();
}

void Engine::do_eval(const std::vector<int32_t>& ids, float* out, const LoraMix* lora) {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (!model_->kv_tied_to_serving_cache()) {
    // eval_logits is the scoring API (perplexity, log-prob research): it runs at full KV precision
    // in a private F32 cache sized for this call, so its results depend neither on kv_type nor on
    // what the serving pool holds. GPU layers keep their KV in device pages that mirror the
    // serving cache's page ids, so with offload the serving pool's eval slot is used instead.
    KVCacheConfig kc = kv_->config();
    kc.dtype = DType::F32;
    kc.max_seqs = 1;
    kc.pages_full = ceil_div(n, kc.page_size);
    kc.pages_window = kv_->has_window_group() ? kc.pages_full : 0;
    kc.budget_bytes = 0;  // sized for this call alone: the serving cache's (F16-sized) budget does not apply
    KVCache kv(kc);
    Batch b;
    for (int32_t start = 0; start < n; start += cfg_.max_batch_tokens) {
      const int32_t end = std::min(n, start + cfg_.max_batch_tokens);
      if (!kv.reserve(0, end))
        throw ContextLengthError("eval_logits: the private KV cache could not hold " + std::to_string(end) + " tokens");
      b.clear();
      for (int32_t p = start; p < end; ++p) b.add(ids[p], p, 0, true);
      b.set_lora(0, lora);
      model_->forward(b, kv, out + static_cast<size_t>(start) * n_vocab_);
      kv.set_n_positions(0, end);
    }
    return;
  }
  kv_->release(eval_slot_);
  try {
    Batch b;
    for (int32_t start = 0; start < n; start += cfg_.max_batch_tokens) {
      const int32_t end = std::min(n, start + cfg_.max_batch_tokens);
      if (!sched_->reserve_outside(eval_slot_, end))
        throw ContextLengthError("eval_logits: " + std::to_string(n) + " tokens do not fit the KV memory (" +
                                 std::to_string(seq_pages_max_ * kv_->page_size()) + " tokens of one sequence)");
      b.clear();
      for (int32_t p = start; p < end; ++p) b.add(ids[p], p, eval_slot_, true);
      b.set_lora(0, lora);
      model_->forward(b, *kv_, out + static_cast<size_t>(start) * n_vocab_);
      kv_->set_n_positions(eval_slot_, end);
      kv_->trim_window(eval_slot_, end);
    }
  } catch (...) {
    kv_->release(eval_slot_);
    throw;
  }
  kv_->release(eval_slot_);
  publish_stats();
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || !tasks_.empty() || has_work_; });
      if (stop_) return;
    }
    bool progressed = true;
    try {
      progressed = step();
    } catch (const std::exception& e) {
      // Nothing may escape the engine thread: fail what is in flight and keep serving.
      std::vector<std::shared_ptr<Sequence>> all(sched_->running().begin(), sched_->running().end());
      all.insert(all.end(), sched_->waiting().begin(), sched_->waiting().end());
      for (const auto& s : all) fail(s.get(), std::string("engine step failed: ") + e.what());
      publish_stats();
    }
    if (!progressed) {
      // Work is queued but nothing could be scheduled (should not happen): do not spin.
      std::unique_lock<std::mutex> lock(mu_);
      if (has_work_) cv_.wait_for(lock, std::chrono::milliseconds(2));
    }
  }
}

void Engine::drain_inbox() {
  std::vector<Pending> inbox;
  std::vector<int64_t> aborts;
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    tasks.swap(tasks_);
  }
  for (auto& p : inbox)
    for (auto& s : p.seqs) sched_->enqueue(std::move(s));
  for (int64_t id : aborts) do_abort(id);
  for (auto& t : tasks) t();
}

bool Engine::step() {
  drain_inbox();
  const auto t_draft = Clock::now();
  spec_->propose(sched_->running());
  busy_s_ += std::chrono::duration<double>(Clock::now() - t_draft).count();
  sched_->schedule(batch_, plan_);
  if (batch_.empty()) {
    publish_stats();
    return false;
  }
  // return_progress: the first event when a sequence is admitted, before any of its prompt is
  // computed (processed == cache == the prefix-cache hit).
  for (const auto& c : plan_)
    if (c.seq->return_progress && c.seq->progress_sent < 0) send_progress(c.seq, c.start);
  const auto t0 = Clock::now();
  logits_.resize(static_cast<size_t>(batch_.n_outputs()) * n_vocab_);
  const int32_t n_hidden = batch_.n_hidden_outputs();
  hidden_.resize(static_cast<size_t>(n_hidden) * n_embd_);
  try {
    model_->forward(batch_, *kv_, logits_.data(), n_hidden > 0 ? hidden_.data() : nullptr);
  } catch (const std::exception& e) {
    std::vector<std::shared_ptr<Sequence>> hold;
    for (const auto& c : plan_) hold.push_back(sched_->find(c.seq));
    for (const auto& s : hold)
      if (s) fail(s.get(), std::string("model forward failed: ") + e.what());
    publish_stats();
    return true;
  }
  sched_->complete(plan_);
  processed_total_ += batch_.size();
  // One progress event per prefill chunk, before the token the last chunk samples. Only forward:
  // a prompt recomputed after preemption reports nothing until it passes what was reported.
  for (const auto& c : plan_) {
    Sequence* s = c.seq;
    if (s->return_progress && c.start < s->n_prompt) {
      const int32_t processed = std::min(s->n_computed, s->n_prompt);
      if (processed > s->progress_sent) send_progress(s, processed);
    }
  }
  sample_and_postprocess(plan_);
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  busy_s_ += step_s;
  spec_->observe_step(batch_.size(), step_s);
  ++steps_;
  publish_stats();
  return true;
}

void Engine::sample_and_postprocess(const std::vector<ScheduledChunk>& plan) {
  // Hold every sequence of the step: finishing one drops the scheduler's reference.
  std::vector<std::shared_ptr<Sequence>> hold;
  for (const auto& c : plan) hold.push_back(sched_->find(c.seq));
  presample(plan, hold);
  for (size_t ci = 0; ci < plan.size(); ++ci) {
    const ScheduledChunk& c = plan[ci];
    Sequence* s = hold[ci].get();
    if (!s) continue;
    if (presampled_[ci].done) {  // drawn by presample: only what must stay in order is left
      Presampled& r = presampled_[ci];
      if (!r.error.empty()) fail(s, r.error);
      else postprocess_token(s, r.token, s->sampler->params().logprobs >= 0 ? &r.lp : nullptr);
      continue;
    }
    if (s->embedding) {
      if (c.n_hidden_rows > 0)
        s->embd.add(hidden_.data() + static_cast<size_t>(c.first_hidden_row) * n_embd_, c.n_hidden_rows);
      if (c.samples) finish_embedding(s);
      continue;
    }
    if (s->want_prompt_logprobs) {
      const int32_t n_top = s->sampler->params().prompt_logprobs;
      const int32_t end = std::min(c.start + c.n_tokens, s->n_prompt);
      for (int32_t p = c.start; p < end; ++p) {
        if (p + 1 >= s->n_prompt) continue;
        const float* row = logits_.data() + static_cast<size_t>(c.first_row + (p - c.start)) * n_vocab_;
        s->prompt_logprobs.push_back(Sampler::logprobs_of(row, n_vocab_, s->tokens[p + 1], n_top));
      }
      if (s->n_computed >= s->n_prompt) s->want_prompt_logprobs = false;
    }
    if (!c.samples) continue;
    if (c.n_draft > 0) {
      verify_draft(c, s);
      continue;
    }
    const float* row = logits_.data() + static_cast<size_t>(c.first_row + c.n_rows - 1) * n_vocab_;

    std::vector<std::shared_ptr<Sequence>> group{hold[ci]};
    if (!s->siblings.empty()) {
      // n > 1: the prompt is in the cache now; siblings share its pages and this logits row.
      for (Sequence* sib : s->siblings) {
        std::shared_ptr<Sequence> sp = sched_->find(sib);
        if (!sp) continue;
        sp->unblock();
        if (sched_->fork_into(s, sp)) group.push_back(sp);
        // else: admitted later like any waiting sequence (prefix cache shares the full pages)
      }
      s->siblings.clear();
    }
    for (const auto& x : group) {
      work_.assign(row, row + n_vocab_);
      int32_t token;
      TokenLogprob lp;
      try {
        mask_constrained(x.get(), work_.data());
        token = x->sampler->sample(work_.data(), n_vocab_, x->tokens, x->n_generated(), &lp);
        if (x->constraint) x->constraint->accept(token);
      } catch (const std::exception& e) {
        fail(x.get(), e.what());
        continue;
      }
      postprocess_token(x.get(), token, x->sampler->params().logprobs >= 0 ? &lp : nullptr);
    }
  }
}

// The plain case of a step's sampling — one sequence on its own logits row: no draft to verify,
// no siblings sharing the row, no grammar, no prompt log-probs — is drawn for all such
// sequences at once on the model's threads, each in place on its own row (the row is this
// step's scratch, so no copy of the vocabulary). With many streams this was a serial tail of
// every step: a copy and a scan (argmax) or a top-k pass of the vocabulary per sequence, e.g.
// 16 × 262k logits on Gemma 3, while the other threads waited. Samplers are per sequence
// (their own generator), so the draws are the ones the serial loop makes.
void Engine::presample(const std::vector<ScheduledChunk>& plan, const std::vector<std::shared_ptr<Sequence>>& hold) {
  presampled_.assign(plan.size(), Presampled{});
  presample_idx_.clear();
  for (size_t ci = 0; ci < plan.size(); ++ci) {
    const ScheduledChunk& c = plan[ci];
    const Sequence* s = hold[ci].get();
    if (s && !s->embedding && c.samples && c.n_draft == 0 && s->siblings.empty() && !s->constraint &&
        !s->want_prompt_logprobs)
      presample_idx_.push_back(ci);
  }
  model_->run_tasks(static_cast<int64_t>(presample_idx_.size()), [&](int64_t i) {
    const size_t ci = presample_idx_[static_cast<size_t>(i)];
    const ScheduledChunk& c = plan[ci];
    Sequence* s = hold[ci].get();
    Presampled& r = presampled_[ci];
    float* row = logits_.data() + static_cast<size_t>(c.first_row + c.n_rows - 1) * n_vocab_;
    try {
      r.token = s->sampler->sample(row, n_vocab_, s->tokens, s->n_generated(), &r.lp);
    } catch (const std::exception& e) {
      r.error = e.what();
      if (r.error.empty()) r.error = "sampling failed";
    }
    r.done = true;
  });
}

void Engine::mask_constrained(Sequence* s, float* logits) {
  if (!s->constraint) return;
  // Tokens left including this one (max_tokens, then the context), for budget closing.
  // With context shift the context never ends generation: only max_tokens does.
  int32_t left = cfg_.context_shift ? INT32_MAX / 2 : n_ctx_ - static_cast<int32_t>(s->tokens.size());
  if (s->max_tokens >= 0) left = std::min(left, s->max_tokens - s->n_generated());
  s->constraint->set_remaining(left);
  s->constraint->apply(logits, n_vocab_);
  if (!s->constraint->is_complete())
    for (int32_t t : eog_) logits[t] = -INFINITY;
}

void Engine::verify_draft(const ScheduledChunk& c, Sequence* s) {
  const int32_t shifts = s->context_shifts;
  const float* rows = logits_.data() + static_cast<size_t>(c.first_row + c.n_rows - 1 - c.n_draft) * n_vocab_;
  SpeculativeDecoder::Hooks hooks;
  hooks.mask = [&](float* logits) { mask_constrained(s, logits); };
  hooks.emit = [&](int32_t token, TokenLogprob* lp) { postprocess_token(s, token, lp); };
  hooks.fail = [&](const std::string& message) { fail(s, message); };
  const int32_t accepted = spec_->verify(s, c.n_draft, rows, n_vocab_, work_, hooks);
  if (s->slot < 0 || s->context_shifts != shifts) return;  // gone, or recomputed from the kept tokens
  sched_->commit_draft(s, accepted);
  spec_->rollback(s);
}

void Engine::postprocess_token(Sequence* s, int32_t token, TokenLogprob* lp) {
  s->tokens.push_back(token);
  if (s->ngram) s->ngram->push(token);
  const auto now = Clock::now();
  if (!s->has_first_token()) {
    s->advance(SequenceStatus::Decode);
    s->t_first = now;
  }
  s->t_last = now;
  ++generated_total_;

  OutputEvent ev;
  ev.index = s->index;
  ev.token_ids.push_back(token);
  if (lp) ev.logprobs.push_back(*lp);
  std::optional<FinishReason> reason;
  const auto& params = s->sampler->params();
  if (std::find(eog_.begin(), eog_.end(), token) != eog_.end()) {
    reason = FinishReason::Stop;
  } else if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
             params.stop_token_ids.end()) {
    reason = FinishReason::Stop;
    ev.stop_token = token;
  } else {
    StopMatcher::Step st = s->stop.push(vocab_->piece(token));
    ev.text = std::move(st.text);
    if (st.stop_index >= 0) {
      reason = FinishReason::Stop;
      ev.stop_string = params.stop[st.stop_index];
      ev.has_stop_string = true;
    }
  }
  bool shift = false;
  if (!reason) {
    if (s->max_tokens >= 0 && s->n_generated() >= s->max_tokens) reason = FinishReason::Length;
    else if (static_cast<int32_t>(s->tokens.size()) >= n_ctx_) {
      if (cfg_.context_shift && !s->embedding && s->images.empty()) shift = true;  // keep generating on the kept tokens
      else reason = FinishReason::Length;
    }
  }
  if (reason && !ev.has_stop_string) ev.text += s->stop.flush();
  if (s->index == 0 && !s->prompt_logprobs_sent && params.prompt_logprobs >= 0 && !s->want_prompt_logprobs) {
    ev.prompt_logprobs = s->prompt_logprobs;
    ev.has_prompt_logprobs = true;
    s->prompt_logprobs_sent = true;
  }
  if (!reason) {
    s->out->push(std::move(ev));
    if (shift) shift_context(s);
    return;
  }
  finish(s, *reason, std::move(ev));
}

// llama-server's context shift (n_keep, n_discard = half of what follows it), done exactly: the
// KV of the kept tokens is not rotated to its new positions (RoPE'd keys would need a K-shift and
// sliding-window pages their own bookkeeping) but recomputed, the kept tokens being prefilled
// again at positions 0.. as a prompt would be — so what follows is exactly what a fresh request
// with the kept tokens as its prompt would generate. The token just sampled is among them (it
// was not computed yet); n_keep's first pages are usually still in the prefix cache.
void Engine::shift_context(Sequence* s) {
  const int32_t n_tok = static_cast<int32_t>(s->tokens.size());
  int32_t n_keep = s->n_keep < 0 ? std::min(s->n_prompt, n_tok) : s->n_keep;
  const int32_t bos = vocab_->added_bos();
  if (s->n_keep >= 0 && bos >= 0 && s->tokens[0] == bos) n_keep += 1;  // n_keep counts after the BOS
  n_keep = std::max(0, std::min(n_keep, n_ctx_ - 4));
  const int32_t n_past = n_tok - 1;  // positions the KV holds (the new token is not computed yet)
  const int32_t n_left = n_past - n_keep;
  const int32_t n_discard = s->n_discard > 0 ? std::min(s->n_discard, n_left) : n_left / 2;
  if (n_discard < 1) {  // nothing can go (n_ctx < 5): end as without context shift
    OutputEvent ev;
    ev.text = s->stop.flush();
    finish(s, FinishReason::Length, std::move(ev));
    return;
  }
  s->tokens.erase(s->tokens.begin() + n_keep, s->tokens.begin() + n_keep + n_discard);
  s->n_shifted += n_discard;
  ++s->context_shifts;
  ++context_shifts_;
  spec_->forget(s);  // its drafts and draft KV follow the old positions
  for (Sequence* sib : s->siblings) sib->unblock();  // (siblings fork before the first token)
  s->siblings.clear();
  sched_->restart(s);
}

void Engine::send_progress(Sequence* s, int32_t processed) {
  const auto now = Clock::now();
  if (s->progress_sent < 0) s->t_progress = now;
  s->progress_sent = processed;
  OutputEvent ev;
  ev.index = s->index;
  ev.has_progress = true;
  ev.progress.total = s->n_prompt;
  ev.progress.cache = s->cached_tokens;
  ev.progress.processed = processed;
  ev.progress.time_ms = ms_between(s->t_progress, now);
  s->out->push(std::move(ev));
}

void Engine::finish_embedding(Sequence* s) {
  OutputEvent ev;
  ev.embedding = s->embd.finish(&ev.embedding_rows);
  if (s->embd.pooling() == Pooling::Rank) {  // the classification head's scores of the [CLS] (decoder: last) row
    std::vector<float> scores(model_->rank_outputs());
    model_->rank(ev.embedding.data(), scores.data());
    ev.embedding = std::move(scores);
  }
  const auto now = Clock::now();
  s->advance(SequenceStatus::Decode);  // timings: prompt_ms runs to the moment the vector is ready
  s->t_first = s->t_last = now;
  finish(s, FinishReason::Stop, std::move(ev));
}

void Engine::finish(Sequence* s, FinishReason reason, OutputEvent ev) {
  ev.index = s->index;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.prompt_tokens = s->n_prompt;
  ev.completion_tokens = std::max(0, s->n_generated());
  ev.cached_tokens = s->cached_tokens;
  if (reason != FinishReason::Cancelled) {  // a cancelled completion reports no timings
    ev.timings.prompt_n = s->index == 0 ? s->n_prompt - s->cached_tokens : 0;
    ev.timings.predicted_n = ev.completion_tokens;
    ev.timings.draft_n = s->draft_n;
    ev.timings.draft_n_accepted = s->draft_n_accepted;
    ev.timings.context_shifts = s->context_shifts;
    if (s->has_first_token()) {
      ev.timings.prompt_ms = ms_between(s->t_start, s->t_first);
      ev.timings.predicted_ms = ms_between(s->t_first, s->t_last);
    }
  }
  s->advance(SequenceStatus::Finished);
  if (s->index == 0) prompt_total_ += s->prompt_computed;
  // Siblings still waiting for this sequence's prompt compute it themselves now.
  for (Sequence* sib : s->siblings) sib->unblock();
  s->siblings.clear();
  std::shared_ptr<OutputChannel> out = s->out;
  if (s->slot >= 0 && s->slot < static_cast<int>(slot_tokens_.size()) && !s->embedding)
    slot_tokens_[s->slot].assign(s->tokens.begin(), s->tokens.begin() + std::min<size_t>(s->tokens.size(),
                                                                                          std::max(0, s->n_computed)));
  sched_->finish(s);
  ++finished_;
  publish_stats();  // a caller that sees the last event also sees its pages returned
  out->push(std::move(ev));
}

void Engine::fail(Sequence* s, const std::string& message) {
  OutputEvent ev;
  ev.error = message;
  finish(s, FinishReason::Error, std::move(ev));
}

void Engine::do_abort(int64_t id) {
  std::vector<std::shared_ptr<Sequence>> seqs = sched_->remove_request(id);
  if (!seqs.empty()) publish_stats();
  for (const auto& s : seqs) {  // already out of the scheduler: finish() only reports them
    finish(s.get(), FinishReason::Cancelled, OutputEvent{});
  }
}

void Engine::publish_stats() {
  EngineStats st;
  st.pages_allocated = kv_->pages_used();
  if (cache_)
    for (KvGroup g : kKvGroups) st.pages_cached += cache_->reclaimable_pages(g);
  st.pages_used = st.pages_allocated - st.pages_cached;
  st.pages_full_total = kv_->pages_total(KvGroup::Full);
  st.pages_window_total = kv_->pages_total(KvGroup::Window);
  st.pages_total = std::max(st.pages_full_total, st.pages_window_total);  // the most out at once
  st.kv_bytes_total = kv_->bytes_budget();
  st.kv_bytes_used = kv_->bytes_used();
  st.kv_bytes_resident = kv_->bytes_touched();
  st.page_bytes_full = static_cast<int64_t>(KVCache::page_bytes(kv_->config(), KvGroup::Full));
  st.page_bytes_window = static_cast<int64_t>(KVCache::page_bytes(kv_->config(), KvGroup::Window));
  st.running = static_cast<int64_t>(sched_->n_running());
  st.waiting = static_cast<int64_t>(sched_->n_waiting());
  if (cache_) {
    st.prefix_cache_hits = cache_->hits();
    st.prefix_cache_queries = cache_->queries();
    st.prefix_cache_hit_tokens = cache_->hit_tokens();
    st.cache_disk_hit_tokens = cache_->store_hit_tokens();
  }
  st.prompt_tokens_total = prompt_total_;
  st.generated_tokens_total = generated_total_;
  st.tokens_processed = processed_total_;
  st.steps = steps_;
  st.preemptions = sched_->preemptions();
  st.context_shifts = context_shifts_;
  st.requests_finished = finished_;
  st.busy_seconds = busy_s_;
  st.tokens_per_second = busy_s_ > 0 ? generated_total_ / busy_s_ : 0.0;
  const SpecCounters spec = spec_->counters();
  st.spec_drafted = spec.drafted;
  st.spec_accepted = spec.accepted;
  st.spec_steps = spec.steps;
  st.spec_draft_forwards = spec.draft_forwards;
  st.spec_draft_seconds = spec.draft_seconds;
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = st;
  has_work_ = st.running > 0 || st.waiting > 0;
}

}  // namespace edgellm
