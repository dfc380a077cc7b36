// Paged KV cache. Keys and values live in fixed-size pages (page_size tokens) drawn from pools;
// each sequence slot has a page table per layer group mapping position / page_size to a page.
//
// Layers are grouped by attention span: full-attention layers share one pool and page table,
// sliding-window layers (Gemma 3's local layers) another, so pages that fall out of the window
// can be returned without touching the global layers' history.
//
// Storage of one page for one layer: K as [n_kv_heads][page_size][head_dim_k] elements of
// `dtype` (F32, F16 or Q8_0 — Q8_0 blocks run along head_dim), V likewise with head_dim_v.
// A token at position p of a sequence sits in page table[p / page_size], slot p % page_size.
//
// Pages are reference counted so several sequences can share a prefix (prefix caching, n > 1
// completions); a page is written only while its refcount is 1.
//
// One byte budget for both groups (`budget_bytes`): a page of either pool can be taken while the
// bytes of the pages out of the free lists, both pools together, stay within it, so the split
// between full-attention and window pages follows what runs (many short sequences need as many
// window pages as full ones; one long sequence mostly full ones). Each pool's storage is an
// address-space reservation (ReservedMemory) that can hold the whole budget alone and is
// committed only where written. Resident memory stays within the budget too: a free page that
// was written before ("warm") is reused first, and when taking a never-written ("cold") page
// would put the written bytes of both pools past the budget, warm free pages of the other pool
// are given back to the system first (their page-aligned interiors, one range per layer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "kv/kv_group.h"
#include "kv/reserved_memory.h"

namespace edgellm {

struct KVCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  std::vector<int32_t> layer_window;  // per layer: 0 = full attention, w > 0 = sliding window of w tokens
  int page_size = 32;
  DType dtype = DType::F16;           // F32, F16 or Q8_0
  int max_seqs = 1;                   // sequence slots
  int64_t pages_full = 0;             // pages in the full-attention pool (its capacity)
  int64_t pages_window = 0;           // pages in the sliding-window pool (0 if no such layers)
  // Bytes of pages out of the free lists, both pools together, at most; 0 = no shared budget
  // (each pool bounded by its own page count only).
  int64_t budget_bytes = 0;
};

class KVCache {
 public:
  explicit KVCache(const KVCacheConfig& cfg);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  // Pages needed to hold n tokens per pool for a config, and the bytes of one page (all layers
  // of its group, K and V): the engine sizes pools from a memory budget with these.
  static size_t page_bytes(const KVCacheConfig& cfg, KvGroup group);
  // Window-group pages one sequence holds at most: its window plus one batch of new tokens (and
  // a page of slack), never more than a full context (0 without window layers).
  static int64_t seq_window_pages(const KVCacheConfig& cfg, int32_t n_ctx, int32_t max_batch_tokens);
  // The default byte budget (kv_memory 0): two full contexts' worth of tokens, as full-attention
  // pages, plus the window pages those tokens need at most however they are split among
  // `max_seqs` sequences -- each holds min(its length, seq_window_pages) -- so 16 short
  // sequences fit as well as two long ones: min(2 ctx, max(2, max_seqs) x seq_window) pages.
  // The engine and the memory plan (model/memory_plan.cpp) both size from this.
  static int64_t default_budget(const KVCacheConfig& cfg, int32_t n_ctx, int32_t max_batch_tokens, int32_t max_seqs);

  const KVCacheConfig& config() const { return cfg_; }
  int page_size() const { return cfg_.page_size; }
  DType dtype() const { return cfg_.dtype; }
  int window(int layer) const { return cfg_.layer_window[layer]; }
  KvGroup group_of(int layer) const { return cfg_.layer_window[layer] > 0 ? KvGroup::Window : KvGroup::Full; }
  size_t k_row_bytes() const { return row_bytes(cfg_.dtype, cfg_.head_dim_k); }
  size_t v_row_bytes() const { return row_bytes(cfg_.dtype, cfg_.head_dim_v); }

  // ---- model side ----
  uint8_t* k_page(int layer, int32_t page);
  uint8_t* v_page(int layer, int32_t page);
  // K/V of one head inside a page: page_size rows, row stride k_row_bytes()/v_row_bytes().
  uint8_t* k_head(int layer, int32_t page, int head) { return k_page(layer, page) + head * cfg_.page_size * k_row_bytes(); }
  uint8_t* v_head(int layer, int32_t page, int head) { return v_page(layer, page) + head * cfg_.page_size * v_row_bytes(); }
  // Page table of `seq` for `layer`'s group: entry i holds positions [i*P, (i+1)*P), -1 where the
  // page was dropped (outside the sliding window).
  const std::vector<int32_t>& page_table(int layer, int seq) const { return tables_[group_of(layer)][seq]; }
  int32_t n_positions(int seq) const { return n_pos_[seq]; }

  // ---- engine side ----
  // Make room for positions [0, n) of `seq` in every group: allocates missing pages, and copies
  // the page that the next write lands in if it is shared (copy on write). Returns false,
  // allocating nothing, when a pool has too few free pages or the pages would not fit the budget.
  bool reserve(int seq, int32_t n);
  // Pages reserve() would allocate in `group` for `seq` to reach n positions.
  int64_t pages_needed(int seq, int32_t n, KvGroup group) const;
  // After the tokens up to position `pos` (exclusive) were computed: return window-group pages of
  // `seq` that no future query can see (wholly before pos - window).
  void trim_window(int seq, int32_t pos);
  // Drop every page of `seq` (refcounts decremented) and reset it to empty.
  void release(int seq);
  // Shrink `seq` to its first n positions (pages past them released).
  void truncate(int seq, int32_t n);
  // Share `src`'s first n positions with `dst` (dst must be empty): full pages are shared by
  // reference; a partially filled last page is copied so dst can write into it.
  bool fork(int src, int dst, int32_t n);

  // Page-level access for prefix caching.
  int32_t alloc_page(KvGroup group);   // -1 when the pool is empty
  void ref_page(KvGroup group, int32_t page);
  void unref_page(KvGroup group, int32_t page);  // returns the page to the free list at refcount 0
  int32_t refcount(KvGroup group, int32_t page) const { return refs_[group][page]; }
  // Put page `page` (already referenced by the caller) at table index `index` of `seq`.
  void attach_page(int seq, KvGroup group, int32_t index, int32_t page);
  void set_n_positions(int seq, int32_t n) { n_pos_[seq] = n; }
  void copy_page(KvGroup group, int32_t src, int32_t dst);
  // A page's bytes, all layers of its group in layer order (K then V each): group_page_bytes(g)
  // bytes. The persistent prefix cache (kv/page_store.h) copies pages out and back with these.
  void read_page(KvGroup group, int32_t page, uint8_t* dst);
  void write_page(KvGroup group, int32_t page, const uint8_t* src);
  // Called after every copy_page: a GPU layer executor mirrors the copy in device memory.
  std::function<void(KvGroup group, int32_t src, int32_t dst)> copy_page_hook;

  // Capacity of a pool: its page ids are [0, pages_total).
  int64_t pages_total(KvGroup group) const { return static_cast<int64_t>(refs_[group].size()); }
  // Pages of `group` that could be taken now (free list and budget), if the other pool takes none.
  int64_t pages_free(KvGroup group) const;
  // Whether n_full Full pages and n_window Window pages could be taken now, together.
  bool can_allocate(int64_t n_full, int64_t n_window) const;
  int64_t pages_used() const { return n_alloc_[KvGroup::Full] + n_alloc_[KvGroup::Window]; }  // out of the free lists
  int64_t pages_used(KvGroup group) const { return n_alloc_[group]; }
  bool has_window_group() const { return !refs_[KvGroup::Window].empty(); }

  // Bytes: the budget, the pages out of the free lists, the pages written since they were last
  // given back (an upper bound of the storage's resident memory, up to partial OS pages at range
  // edges; never above the budget), and how many pages were given back so far.
  int64_t bytes_budget() const { return budget_; }
  int64_t bytes_used() const { return used_bytes_; }
  int64_t bytes_touched() const { return touched_bytes_; }
  int64_t pages_decommitted() const { return decommitted_; }
  size_t group_page_bytes(KvGroup group) const { return page_bytes_[group]; }
  // Resident bytes of a pool's storage now (mincore; -1 if unknown). Walks the whole reservation.
  int64_t resident_bytes(KvGroup group) const;

 private:
  size_t layer_page_bytes() const;
  // Gives free warm pages of `group` back to the system until `bytes` more fit under the budget.
  void decommit_until(KvGroup group, int64_t bytes);
  KVCacheConfig cfg_;
  std::vector<int> layer_index_;          // index of a layer within its group
  PerKvGroup<int> n_layers_in_group_;
  PerKvGroup<std::unique_ptr<ReservedMemory>> storage_;  // [layer in group][page][K then V]
  PerKvGroup<uint8_t*> base_;                        // storage_[g]->data() (or null)
  PerKvGroup<std::vector<int32_t>> refs_;            // refcount per page
  PerKvGroup<std::vector<int32_t>> warm_;            // free pages written before (stack)
  PerKvGroup<std::vector<int32_t>> cold_;            // free pages never written / given back (stack)
  PerKvGroup<int64_t> n_alloc_;
  PerKvGroup<size_t> page_bytes_;                    // one page of a group, all its layers
  int64_t budget_ = 0, used_bytes_ = 0, touched_bytes_ = 0, decommitted_ = 0;
  PerKvGroup<std::vector<std::vector<int32_t>>> tables_;  // [group][seq] -> pages
  std::vector<int32_t> n_pos_;            // positions held per seq
};

}  // namespace edgellm
