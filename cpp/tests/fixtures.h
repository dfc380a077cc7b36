// Fixtures shared by the engine and KV tests: a small KV cache geometry, token runs, and an
// engine configuration for the fake model (fake_model.h) that the test drives step by step.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "kv/kv_cache.h"

namespace fixtures {

// A KV cache of `n_layers` layers (layer 1 a sliding window of `window` tokens when window > 0),
// 16-token pages, 4 sequence slots and `pages` pages in each pool used.
inline edgellm::KVCacheConfig kv_config(int n_layers, int n_kv_heads, int64_t pages, int32_t window,
                                        edgellm::DType dt) {
  edgellm::KVCacheConfig c;
  c.n_layers = n_layers;
  c.n_kv_heads = n_kv_heads;
  c.head_dim_k = c.head_dim_v = 32;
  c.layer_window.assign(c.n_layers, 0);
  if (window) c.layer_window[1] = window;
  c.page_size = 16;
  c.dtype = dt;
  c.max_seqs = 4;
  c.pages_full = pages;
  c.pages_window = window ? pages : 0;
  return c;
}

// n token ids below 101; salt picks the run.
inline std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt) % 101);
  return t;
}

// An engine the test steps itself (no thread): F32 KV in 16-token pages, 128-token batches.
inline edgellm::EngineConfig engine_config(int32_t n_ctx = 512, int32_t max_seqs = 16) {
  edgellm::EngineConfig c;
  c.n_ctx = n_ctx;
  c.kv_type = edgellm::DType::F32;
  c.page_size = 16;
  c.max_seqs = max_seqs;
  c.max_batch_tokens = 128;
  c.start_thread = false;
  return c;
}

inline edgellm::SamplingParams greedy(int32_t max_tokens) {
  edgellm::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// Plain sampling at `temperature` (no top-k / top-p / min-p truncation), seeded.
inline edgellm::SamplingParams sampled(float temperature, int32_t max_tokens, uint64_t seed) {
  edgellm::SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.max_tokens = max_tokens;
  p.has_seed = true;
  p.seed = seed;
  return p;
}

// Steps the engine until it has nothing left to do (or max_steps).
inline void run_until_idle(edgellm::Engine& e, int max_steps = 100000) {
  for (int i = 0; i < max_steps && e.step(); ++i) {
  }
}

}  // namespace fixtures
