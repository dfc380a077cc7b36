#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "common/errors.h"

namespace edgellm {
namespace {
int32_t entries_for(int32_t n_positions, int page_size) { return (n_positions + page_size - 1) / page_size; }
}  // namespace

size_t KVCache::page_bytes(const KVCacheConfig& cfg, KvGroup group) {
  int layers = 0;
  for (int32_t w : cfg.layer_window) layers += ((w > 0) == (group == KvGroup::Window));
  const size_t per_layer = static_cast<size_t>(cfg.n_kv_heads) * cfg.page_size *
                           (row_bytes(cfg.dtype, cfg.head_dim_k) + row_bytes(cfg.dtype, cfg.head_dim_v));
  return per_layer * layers;
}

KVCache::KVCache(const KVCacheConfig& cfg) : cfg_(cfg) {
  if (cfg.dtype != DType::F32 && cfg.dtype != DType::F16 && cfg.dtype != DType::Q8_0)
    throw InvalidRequestError(std::string("KV cache type ") + dtype_name(cfg.dtype) + " is not supported (use F32, F16 or Q8_0)");
  if (cfg.dtype == DType::Q8_0 && (cfg.head_dim_k % 32 || cfg.head_dim_v % 32))
    throw InvalidRequestError("a Q8_0 KV cache needs head dimensions divisible by 32");
  if (static_cast<int>(cfg.layer_window.size()) != cfg.n_layers)
    throw std::invalid_argument("KVCacheConfig.layer_window must have one entry per layer");
  if (cfg.page_size <= 0 || cfg.max_seqs <= 0) throw std::invalid_argument("KVCacheConfig: bad page_size/max_seqs");
  if (cfg.budget_bytes < 0) throw std::invalid_argument("KVCacheConfig: negative budget_bytes");
  layer_index_.resize(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) layer_index_[l] = n_layers_in_group_[group_of(l)]++;
  PerKvGroup<int64_t> pages;
  pages[KvGroup::Full] = n_layers_in_group_[KvGroup::Full] ? cfg.pages_full : 0;
  pages[KvGroup::Window] = n_layers_in_group_[KvGroup::Window] ? cfg.pages_window : 0;
  for (KvGroup g : kKvGroups) tables_[g].assign(cfg.max_seqs, {});
  n_pos_.assign(cfg.max_seqs, 0);
  int64_t capacity_bytes = 0;
  for (KvGroup g : kKvGroups) {
    page_bytes_[g] = layer_page_bytes() * n_layers_in_group_[g];
    if (pages[g] <= 0) continue;
    if (pages[g] > INT32_MAX)
      throw InvalidRequestError("a KV pool of " + std::to_string(pages[g]) + " pages is beyond the " +
                                std::to_string(INT32_MAX) + " page ids a pool has");
    storage_[g] = std::make_unique<ReservedMemory>(page_bytes_[g] * static_cast<size_t>(pages[g]));
    base_[g] = storage_[g]->data();
    refs_[g].assign(pages[g], 0);
    warm_[g].reserve(pages[g]);
    cold_[g].reserve(pages[g]);
    for (int64_t i = pages[g] - 1; i >= 0; --i) cold_[g].push_back(static_cast<int32_t>(i));
    capacity_bytes += static_cast<int64_t>(page_bytes_[g]) * pages[g];
  }
  budget_ = cfg.budget_bytes > 0 ? std::min<int64_t>(cfg.budget_bytes, capacity_bytes) : capacity_bytes;
}

KVCache::~KVCache() = default;

int64_t KVCache::seq_window_pages(const KVCacheConfig& cfg, int32_t n_ctx, int32_t max_batch_tokens) {
  int32_t window = 0;
  for (int32_t w : cfg.layer_window) window = std::max(window, w);
  if (window == 0) return 0;
  const int64_t ctx_pages = (static_cast<int64_t>(n_ctx) + cfg.page_size - 1) / cfg.page_size;
  const int64_t w = (static_cast<int64_t>(window) + max_batch_tokens + cfg.page_size - 1) / cfg.page_size + 1;
  return std::min<int64_t>(ctx_pages, w);
}

int64_t KVCache::default_budget(const KVCacheConfig& cfg, int32_t n_ctx, int32_t max_batch_tokens, int32_t max_seqs) {
  const int64_t ctx_pages = (static_cast<int64_t>(n_ctx) + cfg.page_size - 1) / cfg.page_size;
  const int64_t seq_w = seq_window_pages(cfg, n_ctx, max_batch_tokens);
  const int64_t window_pages = std::min<int64_t>(2 * ctx_pages, std::max(2, max_seqs) * seq_w);
  const double bytes = static_cast<double>(page_bytes(cfg, KvGroup::Full)) * 2.0 * static_cast<double>(ctx_pages) +
                       static_cast<double>(page_bytes(cfg, KvGroup::Window)) * static_cast<double>(window_pages);
  return bytes > 9.0e18 ? static_cast<int64_t>(9.0e18) : static_cast<int64_t>(bytes);
}

size_t KVCache::layer_page_bytes() const {
  return static_cast<size_t>(cfg_.n_kv_heads) * cfg_.page_size * (k_row_bytes() + v_row_bytes());
}

uint8_t* KVCache::k_page(int layer, int32_t page) {
  const KvGroup g = group_of(layer);
  const size_t idx = static_cast<size_t>(layer_index_[layer]) * refs_[g].size() + page;
  return base_[g] + idx * layer_page_bytes();
}

uint8_t* KVCache::v_page(int layer, int32_t page) {
  return k_page(layer, page) + static_cast<size_t>(cfg_.n_kv_heads) * cfg_.page_size * k_row_bytes();
}

int64_t KVCache::pages_needed(int seq, int32_t n, KvGroup group) const {
  if (n_layers_in_group_[group] == 0) return 0;
  const auto& t = tables_[group][seq];
  const int32_t want = entries_for(n, cfg_.page_size);
  int64_t need = want > static_cast<int32_t>(t.size()) ? want - static_cast<int64_t>(t.size()) : 0;
  // copy on write of the page the next token lands in
  const int32_t next = n_pos_[seq] / cfg_.page_size;
  if (n > n_pos_[seq] && next < static_cast<int32_t>(t.size()) && t[next] >= 0 && refs_[group][t[next]] > 1) ++need;
  return need;
}

int64_t KVCache::pages_free(KvGroup group) const {
  const int64_t listed = static_cast<int64_t>(warm_[group].size() + cold_[group].size());
  if (page_bytes_[group] == 0 || listed == 0) return 0;
  return std::min<int64_t>(listed, (budget_ - used_bytes_) / static_cast<int64_t>(page_bytes_[group]));
}

bool KVCache::can_allocate(int64_t n_full, int64_t n_window) const {
  PerKvGroup<int64_t> n;
  n[KvGroup::Full] = n_full;
  n[KvGroup::Window] = n_window;
  int64_t bytes = 0;
  for (KvGroup g : kKvGroups) {
    if (n[g] <= 0) continue;
    if (n[g] > static_cast<int64_t>(warm_[g].size() + cold_[g].size())) return false;
    bytes += n[g] * static_cast<int64_t>(page_bytes_[g]);
  }
  return used_bytes_ + bytes <= budget_;
}

bool KVCache::reserve(int seq, int32_t n) {
  if (!can_allocate(pages_needed(seq, n, KvGroup::Full), pages_needed(seq, n, KvGroup::Window))) return false;
  for (KvGroup g : kKvGroups) {
    if (n_layers_in_group_[g] == 0) continue;
    auto& t = tables_[g][seq];
    const int32_t next = n_pos_[seq] / cfg_.page_size;
    if (n > n_pos_[seq] && next < static_cast<int32_t>(t.size()) && t[next] >= 0 && refs_[g][t[next]] > 1) {
      const int32_t fresh = alloc_page(g);
      copy_page(g, t[next], fresh);
      unref_page(g, t[next]);
      t[next] = fresh;
    }
    const int32_t want = entries_for(n, cfg_.page_size);
    while (static_cast<int32_t>(t.size()) < want) t.push_back(alloc_page(g));
  }
  return true;
}

void KVCache::trim_window(int seq, int32_t pos) {
  if (n_layers_in_group_[KvGroup::Window] == 0) return;
  int32_t window = 0;
  for (int32_t w : cfg_.layer_window) window = w > window ? w : window;
  auto& t = tables_[KvGroup::Window][seq];
  // A future query at q >= pos sees keys >= q - window + 1; page i ends at (i+1)*P - 1.
  for (size_t i = 0; i < t.size(); ++i) {
    if (static_cast<int64_t>(i + 1) * cfg_.page_size > static_cast<int64_t>(pos) - window) break;
    if (t[i] >= 0) {
      unref_page(KvGroup::Window, t[i]);
      t[i] = -1;
    }
  }
}

void KVCache::release(int seq) { truncate(seq, 0); }

void KVCache::truncate(int seq, int32_t n) {
  if (n >= n_pos_[seq] && n > 0) return;
  const int32_t keep = entries_for(n, cfg_.page_size);
  for (KvGroup g : kKvGroups) {
    auto& t = tables_[g][seq];
    while (static_cast<int32_t>(t.size()) > keep) {
      if (t.back() >= 0) unref_page(g, t.back());
      t.pop_back();
    }
  }
  n_pos_[seq] = n;
}

bool KVCache::fork(int src, int dst, int32_t n) {
  if (!tables_[KvGroup::Full][dst].empty() || !tables_[KvGroup::Window][dst].empty())
    throw std::logic_error("KVCache::fork: destination sequence is not empty");
  if (n > n_pos_[src]) n = n_pos_[src];
  const int32_t full = n / cfg_.page_size;
  const bool partial = n % cfg_.page_size != 0;
  if (partial && !can_allocate(n_layers_in_group_[KvGroup::Full] ? 1 : 0, n_layers_in_group_[KvGroup::Window] ? 1 : 0))
    return false;
  for (KvGroup g : kKvGroups) {
    if (n_layers_in_group_[g] == 0) continue;
    const auto& s = tables_[g][src];
    auto& d = tables_[g][dst];
    for (int32_t i = 0; i < full; ++i) {
      if (s[i] >= 0) ref_page(g, s[i]);
      d.push_back(s[i]);
    }
    if (partial) {
      const int32_t fresh = alloc_page(g);
      if (s[full] >= 0) copy_page(g, s[full], fresh);
      d.push_back(fresh);
    }
  }
  n_pos_[dst] = n;
  return true;
}

int32_t KVCache::alloc_page(KvGroup group) {
  const int64_t pb = static_cast<int64_t>(page_bytes_[group]);
  if (warm_[group].empty() && cold_[group].empty()) return -1;
  if (used_bytes_ + pb > budget_) return -1;
  int32_t p;
  if (!warm_[group].empty()) {  // written before: costs no new memory
    p = warm_[group].back();
    warm_[group].pop_back();
  } else {
    if (touched_bytes_ + pb > budget_) decommit_until(other_group(group), touched_bytes_ + pb - budget_);
    p = cold_[group].back();
    cold_[group].pop_back();
    touched_bytes_ += pb;
  }
  refs_[group][p] = 1;
  ++n_alloc_[group];
  used_bytes_ += pb;
  return p;
}

void KVCache::decommit_until(KvGroup group, int64_t bytes) {
  // Only the other pool can have warm free pages here (this one's warm list was empty), and
  // its warm pages alone cover the excess: touched = used + warm(other) and used + one page
  // fits the budget.
  const int64_t pb = static_cast<int64_t>(page_bytes_[group]);
  auto& warm = warm_[group];
  while (bytes > 0 && !warm.empty()) {
    const int32_t p = warm.back();
    warm.pop_back();
    for (int l = 0; l < cfg_.n_layers; ++l)
      if (group_of(l) == group) storage_[group]->decommit(k_page(l, p), layer_page_bytes());
    cold_[group].push_back(p);
    touched_bytes_ -= pb;
    bytes -= pb;
    ++decommitted_;
  }
}

int64_t KVCache::resident_bytes(KvGroup group) const {
  if (!storage_[group]) return 0;
  return ReservedMemory::resident_bytes(storage_[group]->data(), storage_[group]->size());
}

void KVCache::ref_page(KvGroup group, int32_t page) { ++refs_[group][page]; }

void KVCache::unref_page(KvGroup group, int32_t page) {
  if (--refs_[group][page] == 0) {
    warm_[group].push_back(page);
    --n_alloc_[group];
    used_bytes_ -= static_cast<int64_t>(page_bytes_[group]);
  }
}

void KVCache::attach_page(int seq, KvGroup group, int32_t index, int32_t page) {
  auto& t = tables_[group][seq];
  if (static_cast<int32_t>(t.size()) <= index) t.resize(index + 1, -1);
  t[index] = page;
}

void KVCache::copy_page(KvGroup group, int32_t src, int32_t dst) {
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (group_of(l) != group) continue;
    std::memcpy(k_page(l, dst), k_page(l, src), layer_page_bytes());
  }
  if (copy_page_hook) copy_page_hook(group, src, dst);
}

void KVCache::read_page(KvGroup group, int32_t page, uint8_t* dst) {
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (group_of(l) != group) continue;
    std::memcpy(dst, k_page(l, page), layer_page_bytes());
    dst += layer_page_bytes();
  }
}

void KVCache::write_page(KvGroup group, int32_t page, const uint8_t* src) {
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (group_of(l) != group) continue;
    std::memcpy(k_page(l, page), src, layer_page_bytes());
    src += layer_page_bytes();
  }
}

}  // namespace edgellm
