// The KV cache's byte budget and what it holds (issue 38, item 4): one budget for both layer
// groups (full attention and sliding window), sized from EngineConfig's kv_memory or, at 0, the
// default of two full contexts' worth of tokens (KVCache::default_budget, which the memory plan
// uses too), checked against what the machine can give before anything is reserved.
//
// Pages of either group are taken while the bytes in use, both groups together, fit the budget
// (KVCacheConfig::budget_bytes), so 16 short sequences can use it as well as one long one; each
// pool is reserved large enough to hold the whole budget alone and committed only where written
// (kv/kv_cache.h).
#pragma once
#include <cstdint>
#include <memory>

#include "kv/kv_cache.h"

namespace edgellm {

class KvBudget {
 public:
  // Sizes kc (budget_bytes, pages_full, pages_window) for sequences of up to n_ctx tokens.
  // kv_memory 0: the default budget. `available`: bytes the machine can give (machine_memory();
  // -1: unknown, not checked). Throws InvalidRequestError (a budget below one page of each
  // group) and ContextLengthError (more than is available), naming what to lower.
  KvBudget(KVCacheConfig& kc, int32_t n_ctx, int64_t kv_memory, int32_t max_batch_tokens, int32_t max_seqs,
           int64_t available);

  // The KV cache of kc (as sized here). Throws ContextLengthError when its address space (about
  // the budget per pool) cannot be reserved.
  std::unique_ptr<KVCache> reserve(const KVCacheConfig& kc) const;

  int64_t bytes() const { return bytes_; }
  // The most pages (of positions) one sequence can hold within the budget: k full pages and
  // min(k, seq_window_pages) window pages.
  int64_t seq_pages_max() const { return seq_pages_max_; }
  // Window pages one sequence holds at most (its window + one batch; 0 without windows).
  int64_t seq_window_pages() const { return seq_window_pages_; }

 private:
  int64_t kv_memory_ = 0, bytes_ = 0, seq_pages_max_ = 0, seq_window_pages_ = 0;
};

}  // namespace edgellm
