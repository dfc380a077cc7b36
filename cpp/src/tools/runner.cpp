#include "tools/runner.h"

#include <algorithm>
#include <string>

#include "common/errors.h"

namespace edgellm {

ModelRunner::ModelRunner(std::shared_ptr<Model> model, const RunnerOptions& opts) : model_(std::move(model)) {
  if (!model_) throw InvalidRequestError("ModelRunner: no model");
  const ModelConfig& c = model_->config();
  n_ctx_ = opts.n_ctx > 0 ? opts.n_ctx : std::min(c.n_ctx_train, 4096);
  if (opts.n_ctx < 0) throw InvalidRequestError("ModelRunner: n_ctx must be positive, got " + std::to_string(opts.n_ctx));
  if (opts.page_size <= 0) throw InvalidRequestError("ModelRunner: page_size must be positive");
  max_batch_ = model_->max_batch_tokens();

  KVCacheConfig k = model_->kv_config();
  k.page_size = opts.page_size;
  k.dtype = opts.kv_type;
  k.max_seqs = 1;
  const int64_t full_pages = (n_ctx_ + k.page_size - 1) / k.page_size;
  k.pages_full = full_pages;
  // Window layers keep only the pages the next chunk can see: window - 1 earlier positions
  // plus one chunk, rounded out to pages on both ends.
  int32_t window = 0;
  for (int32_t w : k.layer_window) window = std::max(window, w);
  k.pages_window = window > 0 ? std::min<int64_t>(full_pages, (window - 1 + max_batch_) / k.page_size + 2) : 0;
  kv_ = std::make_unique<KVCache>(k);
}

void ModelRunner::eval(const int32_t* ids, int n, bool all_logits, float* logits) {
  if (n <= 0) throw InvalidRequestError("ModelRunner.eval: no tokens");
  if (static_cast<int64_t>(n_past_) + n > n_ctx_)
    throw ContextLengthError("ModelRunner.eval: " + std::to_string(n_past_) + " tokens in the context + " +
                             std::to_string(n) + " new = " + std::to_string(static_cast<int64_t>(n_past_) + n) +
                             " exceeds n_ctx = " + std::to_string(n_ctx_));
  const int n_vocab = model_->config().n_vocab;
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab)
      throw InvalidRequestError("ModelRunner.eval: token id " + std::to_string(ids[i]) + " at index " +
                                std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  for (int start = 0; start < n; start += max_batch_) {
    const int len = std::min(max_batch_, n - start);
    kv_->trim_window(0, n_past_);
    if (!kv_->reserve(0, n_past_ + len))
      throw ContextLengthError("ModelRunner.eval: KV cache pages exhausted at position " + std::to_string(n_past_));
    batch_.clear();
    for (int i = 0; i < len; ++i) {
      const bool want = all_logits || start + i == n - 1;
      batch_.add(ids[start + i], n_past_ + i, 0, want);
    }
    float* out = all_logits ? logits + static_cast<int64_t>(start) * n_vocab : logits;
    model_->forward(batch_, *kv_, out);
    n_past_ += len;
  }
}

std::vector<float> ModelRunner::eval(const std::vector<int32_t>& ids, bool all_logits) {
  const int n = static_cast<int>(ids.size());
  std::vector<float> out(static_cast<size_t>(all_logits ? n : 1) * model_->config().n_vocab);
  eval(ids.data(), n, all_logits, out.data());
  return out;
}

std::vector<int32_t> ModelRunner::greedy(const std::vector<int32_t>& prompt, int n, const std::vector<int32_t>& stop) {
  std::vector<int32_t> out;
  if (n <= 0) return out;
  const int n_vocab = model_->config().n_vocab;
  last_logits_.resize(n_vocab);
  if (prompt.empty()) throw InvalidRequestError("ModelRunner.greedy: empty prompt");
  eval(prompt.data(), static_cast<int>(prompt.size()), false, last_logits_.data());
  for (int i = 0; i < n; ++i) {
    const int32_t tok = static_cast<int32_t>(std::max_element(last_logits_.begin(), last_logits_.end()) -
                                             last_logits_.begin());
    out.push_back(tok);
    if (std::find(stop.begin(), stop.end(), tok) != stop.end() || i + 1 == n) break;
    eval(&tok, 1, false, last_logits_.data());
  }
  return out;
}

void ModelRunner::reset() {
  kv_->release(0);
  n_past_ = 0;
}

}  // namespace edgellm
