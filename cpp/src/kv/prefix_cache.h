// Prefix cache over full KV pages. A full page of a sequence is identified by a hash chain over
// token ids: hash(page i) = H(hash(page i-1), tokens of page i), so equal hashes mean equal
// prefixes (the tokens are also stored and compared, so a hash collision cannot alias pages).
// The cache holds one reference on each page it knows; a new sequence attaches the longest
// cached prefix (refcount++) and computes only the rest. Pages referenced by nobody but the
// cache are evicted least-recently-used when a pool runs short.
//
// Sliding-window models (Gemma 3): each entry also keeps the window-group page of the same
// positions while it exists. A prefix of k pages is reused only if every window-group page a
// later query can still see (those not wholly before k*P - window) is present; otherwise the
// match is shortened until it is. Window pages trimmed from a sequence before it registered
// them are simply absent, which shortens matches — never wrong, at worst recomputed.
//
// Persistence (set_store): every page registered is also queued for the PageStore (written as a
// file on its thread), and a lookup that runs out of pages in memory goes on with the store's
// files, each read, verified and copied into a freshly allocated page that then is an ordinary
// entry. Slots (llama.cpp's /slots save / restore / erase) export, import and drop the chain of
// one token sequence with the same records.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/page_store.h"

namespace edgellm {

class PrefixCache {
 public:
  explicit PrefixCache(KVCache& kv);
  ~PrefixCache();

  // What a page's bytes mean for this KV cache (dtype, page size, layers, heads, dims, windows).
  static PageLayout layout_of(const KVCache& kv);
  // Persist pages to / find them in `store` (owned by the caller; null: memory only).
  void set_store(PageStore* store) { store_ = store; }
  PageStore* store() const { return store_; }

  // Attaches the longest usable cached prefix of tokens[0, n) (whole pages only) to the empty
  // sequence `seq` and returns its length in tokens (0 on a miss). Counts a query, and a hit
  // when the result is > 0. `root`: the chain's root hash (a sequence's LoRA mix, model/lora.h:
  // 0 for the base), so different adapters never share pages; registration starts its Cursor there.
  int32_t attach_prefix(int seq, const int32_t* tokens, int32_t n, uint64_t root = 0);

  // Per-sequence registration state: pages of the sequence already registered and the hash of
  // the last one, so each step hashes only new pages.
  struct Cursor {
    int32_t pages = 0;
    uint64_t hash = 0;
  };
  // Registers the full pages among the first n_computed positions of `seq`.
  void register_pages(int seq, const int32_t* tokens, int32_t n_computed, Cursor& cursor);

  // Frees one page of `group` held only by the cache: least recently used, leaves of the chain
  // before the pages they extend (so cached chains stay reachable).
  // Returns false when there is none.
  // Entries used at or after tick `protect` are kept (a lookup in progress pins its chain).
  bool evict_one(KvGroup group, uint64_t protect = UINT64_MAX);
  // Drops every entry (pages still used by sequences stay with them).
  void clear();

  // Slots: the cached full pages of tokens[0, n), from the first page on while they are cached
  // (copied out); the records' pages put back as entries (verified against `tokens`: each
  // record's hash must be its chain hash over them), returning the tokens covered, which is
  // fewer when the KV budget runs out; the chain's entries dropped, returning the tokens they held.
  std::vector<PageRecord> export_chain(const int32_t* tokens, int32_t n);
  int32_t import_chain(const int32_t* tokens, int32_t n, const std::vector<PageRecord>& records);
  int32_t erase_chain(const int32_t* tokens, int32_t n);
  // Tokens found in the store (pages read from files) by attach_prefix.
  int64_t store_hit_tokens() const { return store_hit_tokens_; }

  int64_t queries() const { return queries_; }
  int64_t hits() const { return hits_; }
  int64_t hit_tokens() const { return hit_tokens_; }
  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  // Pages of `group` that only the cache holds (reclaimable on demand).
  int64_t reclaimable_pages(KvGroup group) const;

  static uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int32_t n);

 private:
  struct Entry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    int32_t page_full = -1;
    int32_t page_window = -1;
    int32_t depth = 0;
    int32_t children = 0;  // cached pages that extend this one
    uint64_t last_used = 0;
    int32_t page(KvGroup g) const { return g == KvGroup::Full ? page_full : page_window; }
  };
  const Entry* find(uint64_t hash, uint64_t parent, const int32_t* tokens) const;
  // A page of `group` for an entry being loaded: free, else by evicting unpinned entries.
  int32_t alloc_pinned(KvGroup group, uint64_t protect);
  // Makes `r` an entry (its pages allocated and written); false when no page could be had.
  bool insert_record(const PageRecord& r, bool with_window, uint64_t protect);
  // Extends the in-memory match `hashes` of tokens[0, n) with pages from the store.
  void load_from_store(const int32_t* tokens, int32_t n, std::vector<uint64_t>& hashes, uint64_t protect,
                       uint64_t root);
  PageRecord record_of(uint64_t hash, const Entry& e);
  // Drops an entry: its pages unreferenced, its parent's child count decremented.
  void erase_entry(std::unordered_map<uint64_t, Entry>::iterator it);

  KVCache& kv_;
  int32_t max_window_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t tick_ = 0;
  int64_t queries_ = 0, hits_ = 0, hit_tokens_ = 0, store_hit_tokens_ = 0;
  PageStore* store_ = nullptr;
};

}  // namespace edgellm
