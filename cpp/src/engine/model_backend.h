// The engine's view of a real Model and Tokenizer (EngineModel / EngineVocab adapters).
#pragma once
#include <memory>

#include "engine/engine_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace edgellm {

class ModelBackend : public EngineModel {
 public:
  explicit ModelBackend(std::shared_ptr<Model> model) : model_(std::move(model)) {}
  int32_t n_vocab() const override { return model_->config().n_vocab; }
  int32_t context_length() const override { return model_->config().n_ctx_train; }
  KVCacheConfig kv_geometry() const override { return model_->kv_config(); }
  // A model file changed in place under the mapping fails the step (and every later one) with
  // ModelFileChangedError: its outputs are discarded before anything is sampled from them.
  void forward(const Batch& batch, KVCache& kv, float* logits, float* hidden) override {
    model_->file().check_unchanged();
    model_->forward(batch, kv, logits, hidden);
    model_->file().check_unchanged();
  }
  int32_t n_embd() const override { return model_->config().n_embd; }
  int32_t pooling_type() const override { return model_->config().pooling_type; }
  bool image_blocks_bidirectional() const override { return model_->config().image_blocks_bidirectional; }
  bool mrope() const override { return model_->config().mrope(); }
  bool causal() const override { return model_->causal(); }
  int32_t rank_outputs() const override { return model_->rank_outputs(); }
  void rank(const float* cls_hidden, float* scores) override { model_->rank(cls_hidden, scores); }
  bool kv_tied_to_serving_cache() const override { return model_->gpu_layers() != 0; }
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) override {
    model_->run_tasks(n_tasks, [&](int64_t t, int) { fn(t); });
  }
  const std::shared_ptr<Model>& model() const { return model_; }

 private:
  std::shared_ptr<Model> model_;
};

class TokenizerVocab : public EngineVocab {
 public:
  explicit TokenizerVocab(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
  std::vector<int32_t> eog_tokens() const override { return tok_->eog_ids(); }
  // Generated text renders no control tokens (llama-server's default); EOG ends before it.
  std::string piece(int32_t token) const override { return tok_->token_to_piece(token, false); }
  std::vector<std::pair<int32_t, std::string>> special_tokens() const override {
    const Vocab& v = tok_->vocab();
    std::vector<std::pair<int32_t, std::string>> out;
    for (int32_t t = 0; t < v.n_tokens(); ++t)
      if ((v.attrs[t] & (kAttrControl | kAttrUnknown)) || v.is_eog[t]) out.emplace_back(t, v.tokens[t]);
    return out;
  }
  int32_t added_bos() const override { return tok_->vocab().add_bos ? tok_->bos_id() : -1; }

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace edgellm
