// PrefixCache on a bare KVCache: hash-chain matches, refcounts, LRU eviction of pages nobody
// else holds, and window-group pages required for reuse on sliding-window models.
#include <vector>

#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "fixtures.h"
#include "test_util.h"

using namespace edgellm;

namespace {

using fixtures::tokens;

// One full-attention layer, plus a window layer when window > 0; one KV head, F32.
KVCacheConfig config(int64_t pages, int32_t window) {
  return fixtures::kv_config(window ? 2 : 1, 1, pages, window, DType::F32);
}

void test_match_and_refcounts() {
  KVCache kv(config(16, 0));
  PrefixCache cache(kv);
  const auto t = tokens(50, 1);
  CHECK(kv.reserve(0, 50));
  kv.set_n_positions(0, 50);
  PrefixCache::Cursor cur;
  cache.register_pages(0, t.data(), 50, cur);
  CHECK(cur.pages == 3);
  CHECK(cache.entries() == 3);
  const int32_t p0 = kv.page_table(0, 0)[0];
  CHECK(kv.refcount(KvGroup::Full, p0) == 2);
  kv.release(0);
  CHECK(kv.refcount(KvGroup::Full, p0) == 1);
  CHECK(cache.reclaimable_pages(KvGroup::Full) == 3);
  // Same tokens: 3 pages, capped by n.
  CHECK(cache.attach_prefix(1, t.data(), 49) == 48);
  CHECK(kv.page_table(0, 1)[0] == p0 && kv.refcount(KvGroup::Full, p0) == 2);
  CHECK(kv.n_positions(1) == 48);
  kv.release(1);
  CHECK(cache.attach_prefix(1, t.data(), 47) == 32);
  kv.release(1);
  // Diverging in page 1: only page 0 matches; a different first token: nothing.
  auto u = t;
  u[20] += 1;
  CHECK(cache.attach_prefix(2, u.data(), 50) == 16);
  kv.release(2);
  u[0] += 1;
  CHECK(cache.attach_prefix(2, u.data(), 50) == 0);
  CHECK(cache.queries() == 4 && cache.hits() == 3);
  CHECK(kv.pages_used() == 3);
}

void test_eviction_lru() {
  KVCache kv(config(4, 0));
  PrefixCache cache(kv);
  const auto a = tokens(32, 1), b = tokens(32, 2);
  PrefixCache::Cursor ca, cb;
  CHECK(kv.reserve(0, 32));
  kv.set_n_positions(0, 32);
  cache.register_pages(0, a.data(), 32, ca);
  kv.release(0);
  CHECK(kv.reserve(0, 32));
  kv.set_n_positions(0, 32);
  cache.register_pages(0, b.data(), 32, cb);
  kv.release(0);
  CHECK(kv.pages_free(KvGroup::Full) == 0);
  // Touch a: b becomes least recently used, and its deeper page goes first.
  CHECK(cache.attach_prefix(1, a.data(), 32) == 32);
  CHECK(cache.evict_one(KvGroup::Full));
  CHECK(cache.attach_prefix(2, b.data(), 32) == 16);
  kv.release(2);
  // a's pages are held by seq 1: not evictable.
  CHECK(cache.evict_one(KvGroup::Full));   // b's first page
  CHECK(!cache.evict_one(KvGroup::Full));
  kv.release(1);
  CHECK(cache.evict_one(KvGroup::Full) && cache.evict_one(KvGroup::Full));
  CHECK(kv.pages_used() == 0 && cache.entries() == 0);
}

void test_window_pages() {
  // window 20, page 16: a prefix of k pages needs the window pages not wholly before 16k - 20.
  KVCache kv(config(16, 20));
  PrefixCache cache(kv);
  const auto t = tokens(64, 3);
  CHECK(kv.reserve(0, 64));
  kv.set_n_positions(0, 64);
  PrefixCache::Cursor cur;
  cache.register_pages(0, t.data(), 64, cur);
  kv.trim_window(0, 64);
  kv.release(0);
  CHECK(cache.attach_prefix(1, t.data(), 64) == 64);
  const auto& win = kv.page_table(1, 1);
  CHECK(win.size() == 4 && win[0] == -1 && win[1] == -1 && win[2] >= 0 && win[3] >= 0);
  kv.release(1);
  // Evicting window pages (oldest, deepest first) shortens later matches instead of breaking them.
  CHECK(cache.evict_one(KvGroup::Window));  // page 3's window page
  CHECK(cache.attach_prefix(1, t.data(), 64) == 48);
  kv.release(1);
  // Pages registered after the window moved on carry no window page: not reusable as the end
  // of a prefix.
  KVCache kv2(config(16, 20));
  PrefixCache cache2(kv2);
  CHECK(kv2.reserve(0, 64));
  kv2.set_n_positions(0, 48);
  kv2.trim_window(0, 48);  // drops window page 0 (positions 0..15 < 48 - 20)
  PrefixCache::Cursor c2;
  cache2.register_pages(0, t.data(), 48, c2);
  kv2.release(0);
  CHECK(cache2.attach_prefix(1, t.data(), 64) == 48);
  kv2.release(1);
  CHECK(kv2.pages_used() == cache2.entries() + 2);  // 3 full pages + window pages 1, 2
}

}  // namespace

int main() {
  test_match_and_refcounts();
  test_eviction_lru();
  test_window_pages();
  return test_util::report();
}
