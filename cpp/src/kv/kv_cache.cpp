#include "kv/kv_cache.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "common/errors.h"

namespace edgellm {
namespace {
constexpr size_t kAlign = 64;

int32_t entries_for(int32_t n_positions, int page_size) { return (n_positions + page_size - 1) / page_size; }
}  // namespace

size_t KVCache::page_bytes(const KVCacheConfig& cfg, bool window_group) {
  int layers = 0;
  for (int32_t w : cfg.layer_window) layers += ((w > 0) == window_group);
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
  layer_index_.resize(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) layer_index_[l] = n_layers_in_group_[group_of(l)]++;
  const int64_t pages[2] = {n_layers_in_group_[0] ? cfg.pages_full : 0, n_layers_in_group_[1] ? cfg.pages_window : 0};
  storage_.assign(2, nullptr);
  refs_.resize(2);
  free_.resize(2);
  tables_.assign(2, std::vector<std::vector<int32_t>>(cfg.max_seqs));
  n_pos_.assign(cfg.max_seqs, 0);
  for (int g = 0; g < 2; ++g) {
    if (pages[g] <= 0) continue;
    const size_t bytes = layer_page_bytes() * static_cast<size_t>(pages[g]) * n_layers_in_group_[g];
    void* p = nullptr;
    if (posix_memalign(&p, kAlign, bytes ? bytes : kAlign) != 0) throw std::bad_alloc();
    storage_[g] = static_cast<uint8_t*>(p);
    refs_[g].assign(pages[g], 0);
    free_[g].reserve(pages[g]);
    for (int64_t i = pages[g] - 1; i >= 0; --i) free_[g].push_back(static_cast<int32_t>(i));
  }
}

KVCache::~KVCache() {
  for (uint8_t* p : storage_) std::free(p);
}

size_t KVCache::layer_page_bytes() const {
  return static_cast<size_t>(cfg_.n_kv_heads) * cfg_.page_size * (k_row_bytes() + v_row_bytes());
}

uint8_t* KVCache::k_page(int layer, int32_t page) {
  const int g = group_of(layer);
  const size_t idx = static_cast<size_t>(layer_index_[layer]) * refs_[g].size() + page;
  return storage_[g] + idx * layer_page_bytes();
}

uint8_t* KVCache::v_page(int layer, int32_t page) {
  return k_page(layer, page) + static_cast<size_t>(cfg_.n_kv_heads) * cfg_.page_size * k_row_bytes();
}

int64_t KVCache::pages_needed(int seq, int32_t n, int group) const {
  if (n_layers_in_group_[group] == 0) return 0;
  const auto& t = tables_[group][seq];
  const int32_t want = entries_for(n, cfg_.page_size);
  int64_t need = want > static_cast<int32_t>(t.size()) ? want - static_cast<int64_t>(t.size()) : 0;
  // copy on write of the page the next token lands in
  const int32_t next = n_pos_[seq] / cfg_.page_size;
  if (n > n_pos_[seq] && next < static_cast<int32_t>(t.size()) && t[next] >= 0 && refs_[group][t[next]] > 1) ++need;
  return need;
}

bool KVCache::reserve(int seq, int32_t n) {
  for (int g = 0; g < 2; ++g)
    if (pages_needed(seq, n, g) > pages_free(g)) return false;
  for (int g = 0; g < 2; ++g) {
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
  if (n_layers_in_group_[1] == 0) return;
  int32_t window = 0;
  for (int32_t w : cfg_.layer_window) window = w > window ? w : window;
  auto& t = tables_[1][seq];
  // A future query at q >= pos sees keys >= q - window + 1; page i ends at (i+1)*P - 1.
  for (size_t i = 0; i < t.size(); ++i) {
    if (static_cast<int64_t>(i + 1) * cfg_.page_size > static_cast<int64_t>(pos) - window) break;
    if (t[i] >= 0) {
      unref_page(1, t[i]);
      t[i] = -1;
    }
  }
}

void KVCache::release(int seq) { truncate(seq, 0); }

void KVCache::truncate(int seq, int32_t n) {
  if (n >= n_pos_[seq] && n > 0) return;
  const int32_t keep = entries_for(n, cfg_.page_size);
  for (int g = 0; g < 2; ++g) {
    auto& t = tables_[g][seq];
    while (static_cast<int32_t>(t.size()) > keep) {
      if (t.back() >= 0) unref_page(g, t.back());
      t.pop_back();
    }
  }
  n_pos_[seq] = n;
}

bool KVCache::fork(int src, int dst, int32_t n) {
  if (!tables_[0][dst].empty() || !tables_[1][dst].empty())
    throw std::logic_error("KVCache::fork: destination sequence is not empty");
  if (n > n_pos_[src]) n = n_pos_[src];
  const int32_t full = n / cfg_.page_size;
  const bool partial = n % cfg_.page_size != 0;
  for (int g = 0; g < 2; ++g)
    if (n_layers_in_group_[g] && partial && pages_free(g) < 1) return false;
  for (int g = 0; g < 2; ++g) {
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

int32_t KVCache::alloc_page(int group) {
  auto& f = free_[group];
  if (f.empty()) return -1;
  const int32_t p = f.back();
  f.pop_back();
  refs_[group][p] = 1;
  return p;
}

void KVCache::ref_page(int group, int32_t page) { ++refs_[group][page]; }

void KVCache::unref_page(int group, int32_t page) {
  if (--refs_[group][page] == 0) free_[group].push_back(page);
}

void KVCache::attach_page(int seq, int group, int32_t index, int32_t page) {
  auto& t = tables_[group][seq];
  if (static_cast<int32_t>(t.size()) <= index) t.resize(index + 1, -1);
  t[index] = page;
}

void KVCache::copy_page(int group, int32_t src, int32_t dst) {
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (group_of(l) != group) continue;
    std::memcpy(k_page(l, dst), k_page(l, src), layer_page_bytes());
  }
  if (copy_page_hook) copy_page_hook(group, src, dst);
}

}  // namespace edgellm
