// The serving engine: one thread that owns the model, the KV cache and the scheduler and runs
//
//   step():  scheduler.schedule()  →  model.forward(batch)  →  sample per sequence  →  postprocess
//
// until no work is left. Other threads only submit requests, abort them, read stats and wait
// on their request's OutputChannel; everything else happens on the engine thread, so the
// scheduler, KV cache and sequences need no locks.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "engine/embedding.h"
#include "engine/kv_budget.h"
#include "engine/engine_model.h"
#include "engine/output_channel.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/speculative_decoder.h"
#include "kv/kv_cache.h"
#include "kv/page_store.h"
#include "kv/prefix_cache.h"

namespace edgellm {

struct EngineConfig {
  int32_t n_ctx = 0;             // max tokens per sequence; 0 = min(model context, 4096)
  int64_t kv_memory = 0;         // KV bytes, both layer groups together; 0 = two full contexts' worth of tokens (KVCache::default_budget)
  DType kv_type = DType::F16;    // F16, F32 or Q8_0
  int32_t max_seqs = 16;         // sequences decoded together
  int32_t max_batch_tokens = 512;
  int32_t page_size = 32;        // 16..64
  bool prefix_cache = true;
  // llama.cpp's --context-shift: a sequence that fills n_ctx while generating keeps its first
  // n_keep tokens and the newer half of the rest (re-prefilled at positions 0..) and goes on,
  // instead of finishing with "length". Off: generation stops at the context's end.
  bool context_shift = false;
  // Persistent prefix cache (kv/page_store.h): full KV pages written under cache_dir as they
  // are registered, read back by lookups in any later process with the same cache_key (the
  // model file's content hash, computed by the caller) and KV layout. cache_max_bytes bounds the
  // files (least recently used removed first); 0 = 2 GiB. Needs prefix_cache.
  std::string cache_dir;
  std::string cache_key;
  int64_t cache_max_bytes = 0;
  bool start_thread = true;      // false: the caller drives step() (tests)
  SpeculativeConfig spec;
};

struct EngineStats {
  // KV pages. Both pools draw on one byte budget (kv_memory), so a pool's size is what it could
  // hold with the whole budget: pages_full_total / pages_window_total, never both at once.
  int64_t pages_used = 0;       // pages held by sequences (prefix-cache-only pages excluded)
  int64_t pages_total = 0;      // the most pages that can be out of the free lists at once (the
                                // budget in the smaller page size; = pages_full_total without windows)
  int64_t pages_full_total = 0, pages_window_total = 0;
  int64_t pages_cached = 0;     // pages only the prefix cache holds (reclaimable)
  int64_t pages_allocated = 0;  // all pages out of the free lists
  int64_t page_bytes_full = 0, page_bytes_window = 0;  // bytes of one page per pool
  // KV bytes: the budget; the pages out of the free lists (sequences' and the prefix cache's,
  // both pools); the pages written and not given back, which bounds the pools' resident memory
  // (never above the budget).
  int64_t kv_bytes_total = 0, kv_bytes_used = 0, kv_bytes_resident = 0;
  int64_t running = 0, waiting = 0;
  int64_t prefix_cache_hits = 0, prefix_cache_queries = 0, prefix_cache_hit_tokens = 0;
  int64_t prompt_tokens_total = 0, generated_tokens_total = 0, tokens_processed = 0;
  int64_t steps = 0, preemptions = 0, requests_finished = 0;
  int64_t context_shifts = 0;   // context shifts (EngineConfig::context_shift)
  // Persistent prefix cache: pages read from / written to cache_dir, files that failed their
  // checks (deleted, never loaded), writes dropped (queue full, disk error), files there now.
  int64_t cache_disk_pages_read = 0, cache_disk_pages_written = 0, cache_disk_corrupt = 0;
  int64_t cache_disk_write_dropped = 0, cache_disk_files = 0, cache_disk_bytes = 0, cache_disk_evicted = 0;
  int64_t cache_disk_hit_tokens = 0;
  bool cache_disk = false;      // a cache_dir is in use
  double busy_seconds = 0.0;     // time spent in steps
  double tokens_per_second = 0.0;  // generated tokens per busy second (since start)
  // Speculative decoding: tokens proposed and verified, how many the target accepted, verify
  // steps (sequence-steps with a draft), and the draft model's forward time.
  int64_t spec_drafted = 0, spec_accepted = 0, spec_steps = 0;
  int64_t spec_draft_forwards = 0;
  double spec_draft_seconds = 0.0;
};

// llama.cpp's slot save / restore / erase (`POST /slots/{id}?action=...`): tokens whose KV was
// written or read, the file's bytes.
struct SlotResult {
  int32_t n_tokens = 0;
  int64_t n_bytes = 0;
};

class Engine {
 public:
  // `draft`: the draft model for SpecMode Draft / Auto (its vocabulary checked by the caller with
  // check_draft_vocab); Draft without one is refused.
  Engine(std::shared_ptr<EngineModel> model, std::shared_ptr<const EngineVocab> vocab, EngineConfig cfg,
         std::shared_ptr<EngineModel> draft = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; returns its id. Its events go to `out` as they come (a
  // channel that collects whole completions, OutputChannel::collect_whole, joins them). Throws
  // InvalidRequestError / ContextLengthError (prompt + max_tokens > n_ctx, or more pages than the
  // whole pool).
  // `images`: image blocks of the prompt (engine/prompt_image.h), sorted, each n_tokens x n_embd
  // embeddings at positions holding its placeholder id; refused with prompt_logprobs, with a block
  // longer than max_batch_tokens or of the wrong width.
  // `lora`: the adapters its sequences run with (model/lora.h; null or empty: the base alone),
  // each loaded by this engine's model (Model::load_lora).
  int64_t submit(std::vector<int32_t> prompt, const SamplingParams& params, std::shared_ptr<OutputChannel> out,
                 std::vector<PromptImage> images = {}, std::shared_ptr<const LoraMix> lora = nullptr);
  // Queues an embedding request: the prompt is prefilled in the same batches as everything
  // else, its final-norm hidden states are pooled (params.pooling, else the model's
  // default_pooling()) and normalised, and its one event carries the vector(s) in `embedding`.
  // Throws InvalidRequestError (empty prompt, bad ids or pooling, a model without hidden states)
  // and ContextLengthError (prompt > n_ctx, or more pages than the whole pool). Never truncates.
  int64_t submit_embedding(std::vector<int32_t> prompt, const EmbeddingParams& params,
                           std::shared_ptr<OutputChannel> out);
  // Cancels a request at any point; its completions finish with "cancelled" and free their pages.
  void abort(int64_t request_id);
  EngineStats stats() const;

  // Logits of every position of `ids` in a fresh context, written to out[len(ids) * n_vocab].
  // Runs on the engine thread between steps, in a slot of its own.
  void eval_logits(const std::vector<int32_t>& ids, float* out, std::shared_ptr<const LoraMix> lora = nullptr);

  // Slots: a slot remembers the tokens of the last sequence that ran in it. save writes the
  // prefix cache's full pages of those tokens (and the tokens) to `file`; restore reads such a
  // file back into the prefix cache (a later request with that prefix reuses it) and makes it
  // the slot's; erase drops the slot's cached pages. model_key: the model file's content hash
  // (kv/page_store.h), written into the file and required of it. Throw InvalidRequestError (bad
  // slot, no prefix cache, a file that is missing, corrupt or from another model / layout) and
  // StorageError (the disk refused the write).
  SlotResult slot_save(int32_t slot, const std::string& file, const std::string& model_key);
  SlotResult slot_restore(int32_t slot, const std::string& file, const std::string& model_key);
  int32_t slot_erase(int32_t slot);
  // Blocks until the persistent cache's queued pages are written (no-op without cache_dir).
  void flush_cache();

  // Runs one step on the calling thread (only when start_thread is false). False when idle.
  bool step();
  bool idle() const;

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_embd() const { return n_embd_; }
  // The model's <arch>.pooling_type when it names one (none/mean/cls/last/rank), else Mean.
  Pooling default_pooling() const;
  // Encoders (EngineModel::causal() false): embeddings only, each input in one batch of at most
  // encoder_input_limit() tokens (n_ctx, max_batch_tokens and the model's positions); rank pooling
  // where rank_outputs() > 0 (a reranker's scores per input).
  bool causal() const { return model_->causal(); }
  int32_t encoder_input_limit() const;
  int32_t rank_outputs() const { return model_->rank_outputs(); }
  const KVCache& kv() const { return *kv_; }
  const EngineConfig& config() const { return cfg_; }

 private:
  struct Pending {
    std::vector<std::shared_ptr<Sequence>> seqs;
  };
  // Hands a validated request's sequences to the engine thread; returns the request id.
  int64_t enqueue(Pending p);
  // Validates submit()'s images against the prompt and the model; sets each one's placeholder id.
  void check_images(const std::vector<int32_t>& prompt, const SamplingParams& params,
                    std::vector<PromptImage>& images) const;
  void loop();
  void drain_inbox();
  void run_task(const std::function<void()>& task);
  // Runs f on the engine thread between steps (directly when there is no thread) and waits.
  void run_sync(const std::function<void()>& f);
  void check_slot(int32_t slot) const;
  void sample_and_postprocess(const std::vector<ScheduledChunk>& plan);
  // Draws the step's plain single-sequence rows in parallel (sample_and_postprocess finishes them).
  void presample(const std::vector<ScheduledChunk>& plan, const std::vector<std::shared_ptr<Sequence>>& hold);
  struct Presampled {
    bool done = false;
    int32_t token = -1;
    TokenLogprob lp;
    std::string error;  // non-empty: the sequence fails with it
  };
  std::vector<Presampled> presampled_;
  std::vector<size_t> presample_idx_;
  void postprocess_token(Sequence* s, int32_t token, TokenLogprob* lp);
  // The sequence's grammar mask on one logits row (EOG barred until the output is complete).
  void mask_constrained(Sequence* s, float* logits);
  // Speculative decoding: the verification of one sequence's drafted rows (SpeculativeDecoder).
  void verify_draft(const ScheduledChunk& c, Sequence* s);
  void send_progress(Sequence* s, int32_t processed);
  void finish_embedding(Sequence* s);
  // Context shift of a sequence whose tokens filled n_ctx (see EngineConfig::context_shift).
  void shift_context(Sequence* s);
  // The one end of a completion (stop, length, error, abort): completes its final event (counts,
  // timings), frees its slot and pages, and pushes the event.
  void finish(Sequence* s, FinishReason reason, OutputEvent ev);
  void fail(Sequence* s, const std::string& message);
  void do_abort(int64_t id);
  void do_eval(const std::vector<int32_t>& ids, float* out, const LoraMix* lora);
  void publish_stats();

  std::shared_ptr<EngineModel> model_;
  std::shared_ptr<const EngineVocab> vocab_;
  EngineConfig cfg_;
  int32_t n_ctx_ = 0, n_vocab_ = 0, n_embd_ = 0, eval_slot_ = 0;
  int64_t seq_pages_max_ = 0;     // pages of positions one sequence can hold within the KV budget
  std::vector<int32_t> eog_;
  std::unique_ptr<KVCache> kv_;
  std::unique_ptr<PageStore> store_;   // before cache_: the cache points at it
  std::unique_ptr<PrefixCache> cache_;
  std::vector<std::vector<int32_t>> slot_tokens_;  // per slot: the last sequence's computed tokens
  std::unique_ptr<Scheduler> sched_;

  Batch batch_;
  std::vector<ScheduledChunk> plan_;
  std::vector<float> logits_, work_, hidden_;

  std::unique_ptr<SpeculativeDecoder> spec_;  // engine thread only

  // Shared with other threads, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<int64_t> aborts_;
  std::vector<std::function<void()>> tasks_;
  bool stop_ = false;
  bool has_work_ = false;
  EngineStats stats_;
  int64_t next_id_ = 1;
  int64_t arrival_ = 0;

  // Counters owned by the engine thread.
  int64_t context_shifts_ = 0;
  int64_t prompt_total_ = 0, generated_total_ = 0, processed_total_ = 0, steps_ = 0, finished_ = 0;
  double busy_s_ = 0.0;
  std::thread thread_;
};

}  // namespace edgellm
