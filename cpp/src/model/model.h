// A loaded model: configuration from GGUF metadata, weight views into the mapping, and the
// forward pass of its architecture. Architectures (one file each under model/arch/, listed in
// model/architecture.cpp's registry) are looked up by `general.architecture`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gguf/gguf_file.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/layer_executor.h"
#include "model/load_progress.h"
#include "model/model_config.h"

namespace edgellm {

class ThreadPool;
class LoraAdapter;

struct LoadOptions {
  int n_threads = 0;        // 0 = physical cores
  int max_batch_tokens = 512;  // largest batch forward() accepts (scratch is sized for it)
  int n_gpu_layers = 0;     // last layers to run on the GPU (-1 = all), by make_executor
  // Builds the executor of the offloaded layers (model/layer_executor.h; the GPU's is
  // backend/gpu_offload.h's make_gpu_executor); needed when n_gpu_layers != 0.
  ExecutorFactory make_executor;
  // Tokens per sequence the caller will run (the engine's n_ctx); 0 = default_context_length.
  // Picks LongRoPE's long or short frequency factors (model/rope.h) where a model has them.
  int n_ctx = 0;
  // Run on this pool instead of a new one (n_threads ignored): a draft model shares the target's
  // workers, as both only run from the engine thread, one after the other.
  std::shared_ptr<ThreadPool> threads;
  // Told the load's progress (model/load_progress.h): open, bind, repack. A callback that
  // returns false makes load() throw LoadCancelled.
  LoadProgress progress;
};

// Parts of a model load's progress range (LoadOptions::progress): mapping and validating the
// file, binding its tensors, repacking the matrices (the rest).
constexpr double kLoadOpenEnd = 0.05, kLoadBindEnd = 0.1;

// The KV geometry a model of config `c` needs (layer windows, heads, dims): Model::kv_config,
// and the memory plan's before any load.
KVCacheConfig kv_config_for(const ModelConfig& c);

class Model {
 public:
  virtual ~Model();  // out of line: ThreadPool is incomplete here

  // Opens `path`, reads the config and binds the weights. Throws ModelFormatError.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});
  static std::unique_ptr<Model> load(std::shared_ptr<GgufFile> file, const LoadOptions& opts = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const std::shared_ptr<GgufFile>& file_handle() const { return file_; }
  ThreadPool& threads() { return *threads_; }
  const std::shared_ptr<ThreadPool>& thread_pool() const { return threads_; }
  int max_batch_tokens() const { return max_batch_tokens_; }
  // Layers actually running on the GPU (0 when none could be offloaded), and where.
  int gpu_layers() const { return gpu_layers_; }
  const std::string& gpu_description() const { return gpu_description_; }

  // The KV geometry this model needs (layer windows, heads, dims); the caller chooses pages,
  // page size, dtype and sequence slots.
  KVCacheConfig kv_config() const;

  // Runs `batch` (at most max_batch_tokens tokens). For every token its K/V are stored at
  // (seq, pos) — the caller has reserved the pages — and it attends to positions of its own
  // sequence up to itself (within the window on sliding-window layers). Writes one row of
  // n_vocab logits per token with want_logits, in batch order, to `logits`, and one row of
  // n_embd final-norm hidden states (the LM head's input: what embeddings pool) per token with
  // want_hidden, in batch order, to `hidden`.
  virtual void forward(const Batch& batch, KVCache& kv, float* logits, float* hidden = nullptr) = 0;

  // Runs fn(task, thread) for task in [0, n_tasks) on this model's pool, as ThreadPool::run, but
  // never beside a forward pass (which owns the pool while it runs): the engine samples a
  // step's sequences this way.
  virtual void run_tasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) = 0;

  // Opens the LoRA adapter at `path` for this model (model/lora.h): checked against its
  // architecture and matrices, and the forward scratch made ready for its rank. Safe beside a
  // running forward pass. Throws ModelFormatError (a bad or foreign adapter) and
  // InvalidRequestError (a model that cannot run adapters: layers offloaded to a GPU).
  virtual std::shared_ptr<const LoraAdapter> load_lora(const std::string& path);
  // Encoders (model/encoder.h) are not causal: a sequence runs whole in one forward pass, and
  // produces hidden states only.
  virtual bool causal() const { return true; }
  // Scores of a reranker's classification head (0: none), and the head applied to a pooled
  // [CLS] hidden state (n_embd floats) -> rank_outputs() scores.
  virtual int32_t rank_outputs() const { return 0; }
  virtual void rank(const float* cls_hidden, float* scores);

 protected:
  std::shared_ptr<GgufFile> file_;
  ModelConfig config_;
  std::shared_ptr<ThreadPool> threads_;
  int max_batch_tokens_ = 0;
  int gpu_layers_ = 0;
  std::string gpu_description_;
};

}  // namespace edgellm
