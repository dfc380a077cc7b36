#include "kv/prefix_cache.h"

#include <algorithm>
#include <string>

#include "common/errors.h"

namespace edgellm {
namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

PrefixCache::PrefixCache(KVCache& kv) : kv_(kv) {
  for (int32_t w : kv.config().layer_window) max_window_ = std::max(max_window_, w);
}

PrefixCache::~PrefixCache() = default;

uint64_t PrefixCache::chain_hash(uint64_t parent, const int32_t* tokens, int32_t n) {
  uint64_t h = mix(parent ^ 0x243F6A8885A308D3ull);
  for (int32_t i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

const PrefixCache::Entry* PrefixCache::find(uint64_t hash, uint64_t parent, const int32_t* tokens) const {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens)) return nullptr;
  return &e;
}

int32_t PrefixCache::attach_prefix(int seq, const int32_t* tokens, int32_t n, uint64_t root) {
  ++queries_;
  const int32_t P = kv_.page_size();
  std::vector<uint64_t> hashes;
  uint64_t h = root;
  for (int32_t i = 0; (i + 1) * P <= n; ++i) {
    const uint64_t next = chain_hash(h, tokens + i * P, P);
    if (!find(next, h, tokens + i * P)) break;
    hashes.push_back(next);
    h = next;
  }
  if (store_ && static_cast<int64_t>(hashes.size() + 1) * P <= n) {
    const uint64_t protect = ++tick_;  // the chain matched so far is not evicted to make room
    for (uint64_t hh : hashes) entries_.at(hh).last_used = protect;
    const size_t before = hashes.size();
    load_from_store(tokens, n, hashes, protect, root);
    store_hit_tokens_ += static_cast<int64_t>(hashes.size() - before) * P;
  }
  int32_t k = static_cast<int32_t>(hashes.size());
  if (kv_.has_window_group()) {
    // Shorten until the window pages that later queries can see are all present.
    for (; k > 0; --k) {
      bool ok = true;
      for (int32_t i = k; i-- > 0;) {
        if (static_cast<int64_t>(i + 1) * P <= static_cast<int64_t>(k) * P - max_window_) break;
        if (entries_.at(hashes[i]).page_window < 0) {
          ok = false;
          break;
        }
      }
      if (ok) break;
    }
  }
  if (k == 0) return 0;
  ++tick_;
  for (int32_t i = 0; i < k; ++i) {
    Entry& e = entries_.at(hashes[i]);
    e.last_used = tick_;
    kv_.ref_page(KvGroup::Full, e.page_full);
    kv_.attach_page(seq, KvGroup::Full, i, e.page_full);
    if (kv_.has_window_group()) {
      const bool visible = static_cast<int64_t>(i + 1) * P > static_cast<int64_t>(k) * P - max_window_;
      if (visible) {
        kv_.ref_page(KvGroup::Window, e.page_window);
        kv_.attach_page(seq, KvGroup::Window, i, e.page_window);
      } else {
        kv_.attach_page(seq, KvGroup::Window, i, -1);
      }
    }
  }
  kv_.set_n_positions(seq, k * P);
  ++hits_;
  hit_tokens_ += static_cast<int64_t>(k) * P;
  return k * P;
}

void PrefixCache::register_pages(int seq, const int32_t* tokens, int32_t n_computed, Cursor& cursor) {
  const int32_t P = kv_.page_size();
  const std::vector<int32_t>* window = nullptr;
  if (kv_.has_window_group()) {
    for (int l = 0; l < kv_.config().n_layers; ++l)
      if (kv_.group_of(l) == KvGroup::Window) {
        window = &kv_.page_table(l, seq);
        break;
      }
  }
  int layer0 = 0;
  while (layer0 < kv_.config().n_layers && kv_.group_of(layer0) != KvGroup::Full) ++layer0;
  if (layer0 == kv_.config().n_layers) return;  // no full-attention layers: nothing to share
  const auto& table = kv_.page_table(layer0, seq);
  for (; (cursor.pages + 1) * P <= n_computed; ++cursor.pages) {
    const int32_t i = cursor.pages;
    const int32_t* t = tokens + i * P;
    const uint64_t h = chain_hash(cursor.hash, t, P);
    auto it = entries_.find(h);
    if (it == entries_.end()) {
      Entry e;
      e.parent = cursor.hash;
      e.tokens.assign(t, t + P);
      e.page_full = table[i];
      kv_.ref_page(KvGroup::Full, e.page_full);
      if (window && i < static_cast<int32_t>(window->size()) && (*window)[i] >= 0) {
        e.page_window = (*window)[i];
        kv_.ref_page(KvGroup::Window, e.page_window);
      }
      e.depth = i;
      e.last_used = ++tick_;
      if (i > 0) {
        auto parent = entries_.find(cursor.hash);
        if (parent != entries_.end()) ++parent->second.children;
      }
      if (store_ && !store_->contains(h)) store_->put(record_of(h, e));
      entries_.emplace(h, std::move(e));
    } else {
      it->second.last_used = ++tick_;
    }
    cursor.hash = h;
  }
}

bool PrefixCache::evict_one(KvGroup group, uint64_t protect) {
  auto victim = entries_.end();
  auto better = [&](const Entry& e, const Entry& v) {
    const bool e_leaf = e.children == 0, v_leaf = v.children == 0;
    if (e_leaf != v_leaf) return e_leaf;
    if (e.last_used != v.last_used) return e.last_used < v.last_used;
    return e.depth > v.depth;
  };
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Entry& e = it->second;
    const int32_t page = e.page(group);
    if (page < 0 || kv_.refcount(group, page) != 1 || e.last_used >= protect) continue;
    if (victim == entries_.end() || better(e, victim->second)) victim = it;
  }
  if (victim == entries_.end()) return false;
  Entry& e = victim->second;
  if (group == KvGroup::Window) {
    kv_.unref_page(KvGroup::Window, e.page_window);
    e.page_window = -1;
    return true;
  }
  erase_entry(victim);
  return true;
}

void PrefixCache::erase_entry(std::unordered_map<uint64_t, Entry>::iterator it) {
  Entry& e = it->second;
  kv_.unref_page(KvGroup::Full, e.page_full);
  if (e.page_window >= 0) kv_.unref_page(KvGroup::Window, e.page_window);
  if (e.depth > 0) {
    auto parent = entries_.find(e.parent);
    if (parent != entries_.end() && parent->second.children > 0) --parent->second.children;
  }
  entries_.erase(it);
}

void PrefixCache::clear() {
  for (auto& kv : entries_) {
    kv_.unref_page(KvGroup::Full, kv.second.page_full);
    if (kv.second.page_window >= 0) kv_.unref_page(KvGroup::Window, kv.second.page_window);
  }
  entries_.clear();
}

int64_t PrefixCache::reclaimable_pages(KvGroup group) const {
  int64_t n = 0;
  for (const auto& kv : entries_) {
    const int32_t page = kv.second.page(group);
    if (page >= 0 && kv_.refcount(group, page) == 1) ++n;
  }
  return n;
}

// ---- persistence and slots ---------------------------------------------------------------------

PageLayout PrefixCache::layout_of(const KVCache& kv) {
  const KVCacheConfig& c = kv.config();
  PageLayout l;
  l.page_size = c.page_size;
  l.full_bytes = kv.group_page_bytes(KvGroup::Full);
  l.window_bytes = kv.has_window_group() ? kv.group_page_bytes(KvGroup::Window) : 0;
  std::string d = "dtype=" + std::to_string(static_cast<int>(c.dtype)) + ",layers=" + std::to_string(c.n_layers) +
                  ",kv_heads=" + std::to_string(c.n_kv_heads) + ",dk=" + std::to_string(c.head_dim_k) +
                  ",dv=" + std::to_string(c.head_dim_v) + ",windows=";
  for (int32_t w : c.layer_window) d += std::to_string(w) + ";";
  l.description = d;
  return l;
}

PageRecord PrefixCache::record_of(uint64_t hash, const Entry& e) {
  PageRecord r;
  r.hash = hash;
  r.parent = e.parent;
  r.depth = e.depth;
  r.tokens = e.tokens;
  r.full.resize(kv_.group_page_bytes(KvGroup::Full));
  kv_.read_page(KvGroup::Full, e.page_full, r.full.data());
  if (e.page_window >= 0) {
    r.window.resize(kv_.group_page_bytes(KvGroup::Window));
    kv_.read_page(KvGroup::Window, e.page_window, r.window.data());
  }
  return r;
}

int32_t PrefixCache::alloc_pinned(KvGroup group, uint64_t protect) {
  int32_t p = kv_.alloc_page(group);
  // the budget is shared: a cached page of either group makes room
  while (p < 0 && (evict_one(group, protect) || evict_one(other_group(group), protect))) p = kv_.alloc_page(group);
  return p;
}

bool PrefixCache::insert_record(const PageRecord& r, bool with_window, uint64_t protect) {
  const int32_t full = alloc_pinned(KvGroup::Full, protect);
  if (full < 0) return false;
  int32_t window = -1;
  if (with_window && !r.window.empty() && kv_.has_window_group()) {
    window = alloc_pinned(KvGroup::Window, protect);
    if (window < 0) {
      kv_.unref_page(KvGroup::Full, full);
      return false;
    }
    kv_.write_page(KvGroup::Window, window, r.window.data());
  }
  kv_.write_page(KvGroup::Full, full, r.full.data());
  Entry e;
  e.parent = r.parent;
  e.tokens = r.tokens;
  e.page_full = full;
  e.page_window = window;
  e.depth = r.depth;
  e.last_used = protect;
  if (r.depth > 0) {
    auto parent = entries_.find(r.parent);
    if (parent != entries_.end()) ++parent->second.children;
  }
  entries_.emplace(r.hash, std::move(e));
  return true;
}

void PrefixCache::load_from_store(const int32_t* tokens, int32_t n, std::vector<uint64_t>& hashes, uint64_t protect,
                                  uint64_t root) {
  const int32_t P = kv_.page_size();
  const int32_t first = static_cast<int32_t>(hashes.size());
  // How far the files reach (no reads yet): window pages are loaded only where a query at the
  // end of that reach can see them.
  std::vector<uint64_t> chain;
  uint64_t h = hashes.empty() ? root : hashes.back();
  for (int32_t j = first; static_cast<int64_t>(j + 1) * P <= n; ++j) {
    const uint64_t next = chain_hash(h, tokens + static_cast<int64_t>(j) * P, P);
    if (entries_.count(next) || !store_->contains(next)) break;  // a colliding entry: stop here
    chain.push_back(next);
    h = next;
  }
  const int64_t reach = static_cast<int64_t>(first + chain.size()) * P;
  h = hashes.empty() ? root : hashes.back();
  for (size_t c = 0; c < chain.size(); ++c) {
    const int32_t j = first + static_cast<int32_t>(c);
    PageRecord r;
    if (!store_->load(chain[c], h, tokens + static_cast<int64_t>(j) * P, r) || r.depth != j) break;
    const bool visible = static_cast<int64_t>(j + 1) * P > reach - max_window_;
    if (!insert_record(r, visible, protect)) break;
    hashes.push_back(chain[c]);
    h = chain[c];
  }
}

std::vector<PageRecord> PrefixCache::export_chain(const int32_t* tokens, int32_t n) {
  const int32_t P = kv_.page_size();
  std::vector<PageRecord> out;
  uint64_t h = 0;
  for (int32_t i = 0; static_cast<int64_t>(i + 1) * P <= n; ++i) {
    const int32_t* t = tokens + static_cast<int64_t>(i) * P;
    const uint64_t next = chain_hash(h, t, P);
    const Entry* e = find(next, h, t);
    if (!e) break;
    out.push_back(record_of(next, *e));
    h = next;
  }
  return out;
}

int32_t PrefixCache::import_chain(const int32_t* tokens, int32_t n, const std::vector<PageRecord>& records) {
  const int32_t P = kv_.page_size();
  const uint64_t protect = ++tick_;
  const int64_t reach = std::min<int64_t>(static_cast<int64_t>(records.size()) * P, n);
  uint64_t h = 0;
  int32_t i = 0;
  for (const PageRecord& r : records) {
    if (static_cast<int64_t>(i + 1) * P > n) break;
    const int32_t* t = tokens + static_cast<int64_t>(i) * P;
    const uint64_t next = chain_hash(h, t, P);
    if (r.hash != next || r.parent != h || r.depth != i || r.tokens.size() != static_cast<size_t>(P) ||
        !std::equal(r.tokens.begin(), r.tokens.end(), t))
      throw InvalidRequestError("slot file page " + std::to_string(i) + " does not belong to its tokens");
    auto it = entries_.find(next);
    if (it != entries_.end()) {
      if (it->second.parent != h || !std::equal(it->second.tokens.begin(), it->second.tokens.end(), t)) break;
      it->second.last_used = protect;
    } else {
      const bool visible = static_cast<int64_t>(i + 1) * P > reach - max_window_;
      if (!insert_record(r, visible, protect)) break;
    }
    h = next;
    ++i;
  }
  return i * P;
}

int32_t PrefixCache::erase_chain(const int32_t* tokens, int32_t n) {
  const int32_t P = kv_.page_size();
  std::vector<uint64_t> chain;
  uint64_t h = 0;
  for (int32_t i = 0; static_cast<int64_t>(i + 1) * P <= n; ++i) {
    const int32_t* t = tokens + static_cast<int64_t>(i) * P;
    const uint64_t next = chain_hash(h, t, P);
    if (!find(next, h, t)) break;
    chain.push_back(next);
    h = next;
  }
  for (size_t c = chain.size(); c-- > 0;) erase_entry(entries_.find(chain[c]));  // leaves first
  return static_cast<int32_t>(chain.size()) * P;
}

}  // namespace edgellm
