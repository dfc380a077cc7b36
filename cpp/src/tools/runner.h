// A single-sequence runner: one model, one KV cache of n_ctx positions, tokens appended in
// order. It is the test and tool surface (`edgellm._core.ModelRunner`, teacher-forced logits,
// greedy decoding) and a simple client of Model::forward; the engine serves many sequences
// with its own scheduler instead.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"

namespace edgellm {

struct RunnerOptions {
  int n_ctx = 0;              // 0: min(n_ctx_train, 4096)
  DType kv_type = DType::F16;
  int page_size = 32;
};

class ModelRunner {
 public:
  ModelRunner(std::shared_ptr<Model> model, const RunnerOptions& opts = {});

  const Model& model() const { return *model_; }
  int n_ctx() const { return n_ctx_; }
  int n_past() const { return n_past_; }
  int n_vocab() const { return model_->config().n_vocab; }

  // Appends `ids` to the sequence, in chunks of at most max_batch_tokens. Writes logits for
  // every token (all_logits, n rows) or for the last one only (one row) to `logits`.
  // Throws ContextLengthError when n_past + n exceeds n_ctx (nothing is appended then).
  void eval(const int32_t* ids, int n, bool all_logits, float* logits);
  std::vector<float> eval(const std::vector<int32_t>& ids, bool all_logits);

  // Greedy decoding from the current state: appends `prompt`, then up to n tokens, each the
  // argmax of the previous logits, stopping after a token of `stop`. Returns the new tokens.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int n, const std::vector<int32_t>& stop = {});

  // Forget the sequence (the cache pages are released).
  void reset();

 private:
  std::shared_ptr<Model> model_;
  std::unique_ptr<KVCache> kv_;
  int n_ctx_ = 0;
  int n_past_ = 0;
  int max_batch_ = 0;
  Batch batch_;
  std::vector<float> last_logits_;
};

}  // namespace edgellm
