#include "engine/kv_budget.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <new>
#include <string>

#include "common/errors.h"

namespace edgellm {
namespace {
std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}
}  // namespace

KvBudget::KvBudget(KVCacheConfig& kc, int32_t n_ctx, int64_t kv_memory, int32_t max_batch_tokens, int32_t max_seqs,
                   int64_t available)
    : kv_memory_(kv_memory) {
  int32_t window = 0;
  for (int32_t w : kc.layer_window) window = std::max(window, w);
  seq_window_pages_ = KVCache::seq_window_pages(kc, n_ctx, max_batch_tokens);
  const int64_t full_bytes = static_cast<int64_t>(KVCache::page_bytes(kc, KvGroup::Full));
  const int64_t window_bytes = static_cast<int64_t>(KVCache::page_bytes(kc, KvGroup::Window));
  const double default_bytes = static_cast<double>(KVCache::default_budget(kc, n_ctx, max_batch_tokens, max_seqs));
  const double need = kv_memory > 0 ? static_cast<double>(kv_memory) : default_bytes;
  const int64_t smallest = full_bytes + (window > 0 ? window_bytes : 0);  // one page of each group
  if (need < static_cast<double>(smallest))
    throw InvalidRequestError("kv_memory " + std::to_string(kv_memory) + " bytes is too small for one KV page (" +
                              (window > 0 ? std::to_string(full_bytes) + " + " + std::to_string(window_bytes) +
                                                " bytes: one page of each layer group"
                                          : std::to_string(full_bytes) + " bytes") + ")");
  // Say what does not fit before reserving it, rather than failing with std::bad_alloc
  // (MemoryError) or leaving the OOM killer to decide. The budget is what the pools can commit:
  // their reservations are larger, but memory is committed only as pages are written, and
  // written pages are given back before the written bytes of both pools pass the budget.
  if (available >= 0 && need > static_cast<double>(available)) {
    const std::string have =
        std::to_string(available) + " bytes (" + gb(static_cast<double>(available)) + ") of memory are available";
    const std::string needs = std::to_string(static_cast<int64_t>(need)) + " bytes (" + gb(need) + ")";
    if (kv_memory > 0)
      throw ContextLengthError("kv_memory " + std::to_string(kv_memory) + " bytes: the KV cache needs " + needs +
                               " but only " + have + "; lower kv_memory");
    throw ContextLengthError("n_ctx " + std::to_string(n_ctx) + " is beyond what memory allows: the KV cache for two " +
                             "full contexts (about " + std::to_string(static_cast<int64_t>(default_bytes / (2.0 * n_ctx))) +
                             " bytes per token) needs " + needs + " but only " + have +
                             "; lower n_ctx, or set kv_memory to share less");
  }
  bytes_ = kc.budget_bytes = static_cast<int64_t>(need);
  kc.pages_full = full_bytes > 0 ? kc.budget_bytes / full_bytes : 0;
  kc.pages_window = window > 0 && window_bytes > 0 ? kc.budget_bytes / window_bytes : 0;
  const int64_t B = kc.budget_bytes;
  const int64_t both = full_bytes + window_bytes;
  if (window == 0) {
    seq_pages_max_ = B / full_bytes;
  } else if (B / both < seq_window_pages_) {
    seq_pages_max_ = B / both;
  } else {
    const int64_t rest = B - seq_window_pages_ * both;
    seq_pages_max_ = full_bytes > 0 ? seq_window_pages_ + rest / full_bytes : INT64_MAX / 2;
  }
}

std::unique_ptr<KVCache> KvBudget::reserve(const KVCacheConfig& kc) const {
  try {
    return std::make_unique<KVCache>(kc);
  } catch (const std::bad_alloc&) {  // the reservation (about the budget per pool) was refused
    throw ContextLengthError("the KV cache could not reserve address space for " + std::to_string(kc.budget_bytes) +
                             " bytes (" + gb(static_cast<double>(kc.budget_bytes)) + ") per layer group; " +
                             (kv_memory_ > 0 ? "lower kv_memory" : "lower n_ctx, or set kv_memory to share less"));
  }
}

}  // namespace edgellm
