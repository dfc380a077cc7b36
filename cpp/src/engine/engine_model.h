// What the engine needs from a model and from a vocabulary. The real implementations wrap
// Model and Tokenizer (engine/model_backend.h); tests plug in a fake model whose logits are
// a hash of the tokens it finds in the KV cache, which makes any paging mistake visible.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "model/batch.h"

namespace edgellm {

class EngineModel {
 public:
  virtual ~EngineModel() = default;
  virtual int32_t n_vocab() const = 0;
  virtual int32_t context_length() const = 0;  // the model's trained context
  // KV geometry (layers, heads, head dims, per-layer windows); the engine fills in pages,
  // page size, dtype and sequence slots.
  virtual KVCacheConfig kv_geometry() const = 0;
  // Batch.pos of each sequence continues where its KV ends; pages are reserved by the caller.
  // Rows with want_logits get n_vocab logits, rows with want_hidden n_embd() final-norm hidden
  // states (in batch order, each kind in its own buffer).
  virtual void forward(const Batch& batch, KVCache& kv, float* logits, float* hidden = nullptr) = 0;
  // Width of a hidden-state row (0: this model gives none, so embedding requests are refused).
  virtual int32_t n_embd() const { return 0; }
  // The model's embedding pooling (llama.cpp's enum, GGUF <arch>.pooling_type); -1 unspecified.
  virtual int32_t pooling_type() const { return -1; }
  // Whether an image block's tokens attend to each other both ways (ModelConfig::image_blocks_bidirectional).
  virtual bool image_blocks_bidirectional() const { return false; }
  // Whether positions are M-RoPE's (t, h, w) (ModelConfig::mrope: image blocks may carry a grid).
  virtual bool mrope() const { return false; }
  // False for encoders (model/encoder.h): each prompt runs whole in one forward pass, no logits.
  virtual bool causal() const { return true; }
  // A reranker's scores per input (0: no classification head), from its pooled [CLS] row.
  virtual int32_t rank_outputs() const { return 0; }
  virtual void rank(const float* /*cls_hidden*/, float* /*scores*/) {}
  // True when some layers keep their KV in device pages mirroring the serving cache's page ids:
  // forward() may then only be given the serving cache.
  virtual bool kv_tied_to_serving_cache() const { return false; }
  // Runs fn(task) for task in [0, n_tasks), in parallel where the model has worker threads
  // (never beside its forward pass); by default one after the other on the calling thread.
  virtual void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
  }
};

class EngineVocab {
 public:
  virtual ~EngineVocab() = default;
  virtual std::vector<int32_t> eog_tokens() const = 0;
  // The bytes a generated token adds to the output text.
  virtual std::string piece(int32_t token) const = 0;
  // Tokens that are markup, never text (control / unknown types and the EOG ids), with their
  // texts: constrained decoding keeps them, and their texts, out of grammar output.
  virtual std::vector<std::pair<int32_t, std::string>> special_tokens() const { return {}; }
  // The BOS id when the vocabulary adds one to prompts, else -1 (context shift: n_keep counts
  // the tokens after it, as llama-server's).
  virtual int32_t added_bos() const { return -1; }
};

}  // namespace edgellm
