// The persistent prefix cache (kv/page_store.h): page files written by one PrefixCache and found
// by another over a fresh KVCache (a restart), byte for byte; corrupt files detected, deleted and
// never loaded; the directory bound (LRU); KV layouts kept apart; slot files round trip, and a
// damaged or foreign slot file is refused.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/page_store.h"
#include "kv/prefix_cache.h"
#include "fixtures.h"
#include "test_util.h"

using namespace edgellm;

namespace {

using fixtures::tokens;

const std::string kKeyA = "0123456789abcdef0123456789abcdef", kKeyB = "fedcba9876543210fedcba9876543210";

// The InvalidRequestError message f throws ("" when it throws none).
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const InvalidRequestError& e) {
    return e.what();
  }
  return "";
}

int entries_in(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
    closedir(d);
  }
  return n;
}

long max_rss_kb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Two full-attention layers, plus a window layer (layer 1) when window > 0; two KV heads.
KVCacheConfig config(int64_t pages, int32_t window, DType dt = DType::F16) {
  return fixtures::kv_config(window ? 3 : 2, 2, pages, window, dt);
}

std::string temp_dir() {
  char tmpl[] = "/tmp/edgellm-page-store-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// Computes "KV" for positions [0, n) of seq: every page filled with bytes from (seed, page index
// in the sequence), as a forward pass would write them.
void fill(KVCache& kv, int seq, int32_t n, uint32_t seed) {
  for (KvGroup g : kKvGroups) {
    if (g == KvGroup::Window && !kv.has_window_group()) continue;
    int layer = 0;
    while (kv.group_of(layer) != g) ++layer;
    const auto& table = kv.page_table(layer, seq);
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i] < 0) continue;
      std::mt19937 rng(seed * 1000 + static_cast<uint32_t>(i) * 10 + kv_group_index(g));
      std::vector<uint8_t> bytes(kv.group_page_bytes(g));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      kv.write_page(g, table[i], bytes.data());
    }
  }
  kv.set_n_positions(seq, n);
}

std::vector<uint8_t> page_bytes(KVCache& kv, KvGroup g, int32_t page) {
  std::vector<uint8_t> b(kv.group_page_bytes(g));
  kv.read_page(g, page, b.data());
  return b;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::string cmd = "ls '" + dir + "'/*/*.kvp 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  char line[4096];
  while (p && fgets(line, sizeof line, p)) {
    std::string s = line;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  if (p) pclose(p);
  return out;
}

void test_checksum_and_record() {
  std::vector<uint8_t> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 31);
  const uint64_t h = checksum64(a.data(), a.size());
  CHECK(h == checksum64(a.data(), a.size()));
  for (size_t pos : {0u, 1u, 31u, 32u, 500u, 999u}) {  // every single-bit flip changes it
    a[pos] ^= 4;
    CHECK(checksum64(a.data(), a.size()) != h);
    a[pos] ^= 4;
  }
  PageLayout l;
  l.page_size = 4;
  l.full_bytes = 8;
  l.window_bytes = 0;
  l.description = "x";
  PageRecord r;
  r.hash = 7;
  r.parent = 3;
  r.depth = 1;
  r.tokens = {1, 2, 3, 4};
  r.full = {1, 2, 3, 4, 5, 6, 7, 8};
  auto enc = encode_record(r, l);
  PageRecord back;
  CHECK(decode_record(enc.data(), enc.size(), l, back) == enc.size());
  CHECK(back.tokens == r.tokens && back.full == r.full && back.hash == 7 && back.parent == 3);
  for (size_t pos = 0; pos < enc.size(); ++pos) {  // any flipped byte: refused
    enc[pos] ^= 0x10;
    PageRecord x;
    CHECK(decode_record(enc.data(), enc.size(), l, x) == 0);
    enc[pos] ^= 0x10;
  }
  CHECK(decode_record(enc.data(), enc.size() - 1, l, back) == 0);  // truncated
  PageLayout other = l;
  other.description = "y";
  CHECK(decode_record(enc.data(), enc.size(), other, back) == 0);  // another layout
}

// Registers tokens[0, n) in a fresh cache over `dir`, then "restarts" (new KVCache, PrefixCache,
// PageStore) and checks the lookup finds every full page from disk with identical bytes.
void test_restart(int32_t window) {
  const std::string dir = temp_dir();
  const auto t = tokens(100, 3);  // 6 full pages of 16
  std::vector<std::vector<uint8_t>> full_before, window_before;
  {
    KVCache kv(config(32, window));
    PrefixCache cache(kv);
    PageStore store(dir, "modelA", PrefixCache::layout_of(kv), 1 << 30);
    cache.set_store(&store);
    CHECK(kv.reserve(0, 100));
    fill(kv, 0, 100, 11);
    PrefixCache::Cursor cur;
    cache.register_pages(0, t.data(), 100, cur);
    for (int i = 0; i < 6; ++i) {
      full_before.push_back(page_bytes(kv, KvGroup::Full, kv.page_table(0, 0)[i]));
      if (window) window_before.push_back(page_bytes(kv, KvGroup::Window, kv.page_table(1, 0)[i]));
    }
    store.flush();
    CHECK(store.stats().pages_written == 6);
    kv.release(0);
    cache.clear();
  }
  CHECK(files_in(dir).size() == 6);
  {
    KVCache kv(config(32, window));
    PrefixCache cache(kv);
    PageStore store(dir, "modelA", PrefixCache::layout_of(kv), 1 << 30);
    CHECK(store.stats().files == 6);
    cache.set_store(&store);
    CHECK(cache.attach_prefix(0, t.data(), 99) == 96);
    CHECK(store.stats().pages_read == 6);
    CHECK(cache.store_hit_tokens() == 96);
    for (int i = 0; i < 6; ++i) {
      CHECK(page_bytes(kv, KvGroup::Full, kv.page_table(0, 0)[i]) == full_before[i]);
      if (window) {
        const int32_t wp = kv.page_table(1, 0)[i];
        // only the pages a query at 96.. can see are loaded
        const bool visible = (i + 1) * 16 > 96 - window;
        CHECK((wp >= 0) == visible);
        if (wp >= 0) CHECK(page_bytes(kv, KvGroup::Window, wp) == window_before[i]);
      }
    }
    kv.release(0);
    // now in memory: a second lookup reads no file
    CHECK(cache.attach_prefix(1, t.data(), 99) == 96);
    CHECK(store.stats().pages_read == 6);
    kv.release(1);
    // a diverging prompt shares the first 2 pages only (with windows: their window pages were
    // not loaded, being invisible from 96, so nothing is reused -- recomputed, never wrong)
    auto u = t;
    u[40] += 1;
    CHECK(cache.attach_prefix(2, u.data(), 99) == (window ? 0 : 32));
    kv.release(2);
    cache.clear();
  }
  {  // another model key, or another KV type: nothing found
    KVCache kv(config(32, window));
    PrefixCache cache(kv);
    PageStore store(dir, "modelB", PrefixCache::layout_of(kv), 1 << 30);
    cache.set_store(&store);
    CHECK(cache.attach_prefix(0, t.data(), 99) == 0);
    kv.release(0);
    KVCache kv8(config(32, window, DType::Q8_0));
    PrefixCache cache8(kv8);
    PageStore store8(dir, "modelA", PrefixCache::layout_of(kv8), 1 << 30);
    cache8.set_store(&store8);
    CHECK(cache8.attach_prefix(0, t.data(), 99) == 0);
    kv8.release(0);
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

void test_corrupt_file_ignored() {
  const std::string dir = temp_dir();
  const auto t = tokens(64, 5);  // 4 pages
  {
    KVCache kv(config(16, 0));
    PrefixCache cache(kv);
    PageStore store(dir, "m", PrefixCache::layout_of(kv), 1 << 30);
    cache.set_store(&store);
    CHECK(kv.reserve(0, 64));
    fill(kv, 0, 64, 2);
    PrefixCache::Cursor cur;
    cache.register_pages(0, t.data(), 64, cur);
    kv.release(0);
    cache.clear();
  }
  // Flip one payload byte of page 2's file: pages 0, 1 load, page 2 is refused and deleted.
  KVCache kv(config(16, 0));
  PrefixCache probe(kv);
  const uint64_t h0 = PrefixCache::chain_hash(0, t.data(), 16);
  const uint64_t h1 = PrefixCache::chain_hash(h0, t.data() + 16, 16);
  const uint64_t h2 = PrefixCache::chain_hash(h1, t.data() + 32, 16);
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvp", static_cast<unsigned long long>(h2));
  std::string victim;
  for (const auto& f : files_in(dir))
    if (f.size() >= 20 && f.compare(f.size() - 20, 20, name) == 0) victim = f;
  CHECK(!victim.empty());
  {
    FILE* f = std::fopen(victim.c_str(), "r+b");
    std::fseek(f, -100, SEEK_END);
    int c = std::fgetc(f);
    std::fseek(f, -100, SEEK_END);
    std::fputc(c ^ 0x55, f);
    std::fclose(f);
  }
  PageStore store(dir, "m", PrefixCache::layout_of(kv), 1 << 30);
  probe.set_store(&store);
  CHECK(probe.attach_prefix(0, t.data(), 63) == 32);
  CHECK(store.stats().corrupt == 1);
  CHECK(access(victim.c_str(), F_OK) != 0);  // removed
  kv.release(0);
  // A truncated file: the same.
  probe.clear();
  {
    const uint64_t hh = h1;
    std::snprintf(name, sizeof name, "%016llx.kvp", static_cast<unsigned long long>(hh));
    for (const auto& f : files_in(dir))
      if (f.size() >= 20 && f.compare(f.size() - 20, 20, name) == 0) CHECK(truncate(f.c_str(), 50) == 0);
  }
  CHECK(probe.attach_prefix(0, t.data(), 63) == 16);
  CHECK(store.stats().corrupt == 2);
  kv.release(0);
  probe.clear();
  std::system(("rm -rf '" + dir + "'").c_str());
}

void test_bound_lru() {
  const std::string dir = temp_dir();
  KVCache kv(config(64, 0));
  const PageLayout l = PrefixCache::layout_of(kv);
  const int64_t file_bytes = static_cast<int64_t>(encode_record(PageRecord{0, 0, 0, std::vector<int32_t>(16),
                                                                           std::vector<uint8_t>(l.full_bytes), {}},
                                                                l)
                                                      .size());
  PageStore store(dir, "m", l, file_bytes * 10);
  for (int i = 0; i < 25; ++i) {
    PageRecord r;
    r.hash = 1000 + i;
    r.tokens.assign(16, i);
    r.full.assign(l.full_bytes, static_cast<uint8_t>(i));
    store.put(std::move(r));
    store.flush();
  }
  const auto st = store.stats();
  CHECK(st.bytes <= file_bytes * 10);
  CHECK(st.files == static_cast<int64_t>(files_in(dir).size()));
  CHECK(st.evicted == 25 - st.files);
  CHECK(store.contains(1024) && !store.contains(1000));  // the newest kept, the oldest gone
  std::system(("rm -rf '" + dir + "'").c_str());
}

void test_slot_files(int32_t window) {
  const std::string dir = temp_dir();
  const std::string file = dir + "/slot.bin";
  const auto t = tokens(70, 9);  // 4 full pages + 6 tokens
  std::vector<uint8_t> p0;
  {
    KVCache kv(config(32, window));
    PrefixCache cache(kv);
    CHECK(kv.reserve(0, 70));
    fill(kv, 0, 70, 4);
    PrefixCache::Cursor cur;
    cache.register_pages(0, t.data(), 70, cur);
    p0 = page_bytes(kv, KvGroup::Full, kv.page_table(0, 0)[0]);
    kv.release(0);
    auto recs = cache.export_chain(t.data(), 70);
    CHECK(recs.size() == 4);
    const int64_t n = PageStore::write_slot(file, PrefixCache::layout_of(kv), kKeyA, t, recs);
    CHECK(n > 4 * static_cast<int64_t>(kv.group_page_bytes(KvGroup::Full)));
    CHECK(cache.erase_chain(t.data(), 70) == 64);
    CHECK(cache.entries() == 0 && kv.pages_used() == 0);
  }
  KVCache kv(config(32, window));
  PrefixCache cache(kv);
  std::vector<int32_t> back;
  std::vector<PageRecord> recs;
  PageStore::read_slot(file, PrefixCache::layout_of(kv), kKeyA, 4096, back, recs);
  CHECK(back == t && recs.size() == 4);
  // another model with the same KV layout (issue 39 defect 4): refused by its content key, naming it
  const std::string foreign = message_of([&] { PageStore::read_slot(file, PrefixCache::layout_of(kv), kKeyB, 4096, back, recs); });
  CHECK(foreign.find("another model") != std::string::npos && foreign.find(kKeyB) != std::string::npos);
  // more tokens than the context: refused before the rest is read
  CHECK(test_util::throws_invalid([&] { PageStore::read_slot(file, PrefixCache::layout_of(kv), kKeyA, 69, back, recs); }));
  CHECK(cache.import_chain(back.data(), static_cast<int32_t>(back.size()), recs) == 64);
  CHECK(cache.attach_prefix(0, t.data(), 69) == 64);
  CHECK(page_bytes(kv, KvGroup::Full, kv.page_table(0, 0)[0]) == p0);
  kv.release(0);
  // records that do not belong to the tokens: refused
  auto wrong = back;
  wrong[3] += 1;
  CHECK(test_util::throws_invalid([&] { cache.import_chain(wrong.data(), 70, recs); }));
  // another layout, a flipped byte, a truncated file, a missing file: InvalidRequestError
  KVCache other(config(32, window, DType::F32));
  CHECK(test_util::throws_invalid([&] { PageStore::read_slot(file, PrefixCache::layout_of(other), kKeyA, 4096, back, recs); }));
  {
    FILE* f = std::fopen(file.c_str(), "r+b");
    std::fseek(f, 200, SEEK_SET);
    int c = std::fgetc(f);
    std::fseek(f, 200, SEEK_SET);
    std::fputc(c ^ 1, f);
    std::fclose(f);
  }
  CHECK(test_util::throws_invalid([&] { PageStore::read_slot(file, PrefixCache::layout_of(kv), kKeyA, 4096, back, recs); }));
  CHECK(truncate(file.c_str(), 20) == 0);
  CHECK(test_util::throws_invalid([&] { PageStore::read_slot(file, PrefixCache::layout_of(kv), kKeyA, 4096, back, recs); }));
  CHECK(test_util::throws_invalid([&] { PageStore::read_slot(dir + "/nope", PrefixCache::layout_of(kv), kKeyA, 4096, back, recs); }));
  cache.clear();
  std::system(("rm -rf '" + dir + "'").c_str());
}

// Slot and page files are untrusted (issue 39 defects 6, 11): a FIFO in a file's place is refused
// without blocking, a sparse giant is refused from its header and size without being read, a
// 255-byte name saves (its temporary name is short), and a page file that is not a regular file
// of one record's size is corrupt, never read.
void test_hostile_files() {
  const std::string dir = temp_dir();
  KVCache kv(config(32, 0));
  const PageLayout layout = PrefixCache::layout_of(kv);
  std::vector<int32_t> back;
  std::vector<PageRecord> recs;
  // A FIFO named like a slot file: before, the read blocked for ever.
  const std::string fifo = dir + "/fifo.bin";
  CHECK(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(message_of([&] { PageStore::read_slot(fifo, layout, kKeyA, 4096, back, recs); }).find("not a regular file") !=
        std::string::npos);
  // A valid header over a sparse 3 GiB file: refused by its size, with no read of the rest.
  const std::string file = dir + "/slot.bin";
  const auto t = tokens(40, 2);
  PageStore::write_slot(file, layout, kKeyA, t, {});
  PageStore::read_slot(file, layout, kKeyA, 4096, back, recs);
  CHECK(back == t);
  CHECK(truncate(file.c_str(), 3ll << 30) == 0);
  const long rss0 = max_rss_kb();
  const std::string big = message_of([&] { PageStore::read_slot(file, layout, kKeyA, 4096, back, recs); });
  CHECK(big.find("truncated or corrupt") != std::string::npos);
  CHECK(max_rss_kb() - rss0 < 64 * 1024);  // before: the whole 3 GiB read into memory
  // 255 bytes of name (NAME_MAX): saves and restores (before: its ".tmp-PID" name was too long)
  const std::string longest = dir + "/" + std::string(255, 'n');
  PageStore::write_slot(longest, layout, kKeyA, t, {});
  PageStore::read_slot(longest, layout, kKeyA, 4096, back, recs);
  CHECK(back == t);
  CHECK(entries_in(dir) == 3);  // fifo, slot.bin, the long one: no temporary left
  // A name that cannot be a file (a directory there): InvalidRequestError
  CHECK(test_util::throws_invalid([&] { PageStore::write_slot(dir, layout, kKeyA, t, {}); }));
  // Page files: a FIFO in place of a .kvp page is corrupt (removed), the lookup does not block.
  {
    PageStore store(dir + "/cache", "m", layout, 1 << 30);
    const uint64_t h0 = PrefixCache::chain_hash(0, t.data(), 16);
    char name[32];
    std::snprintf(name, sizeof name, "/%016llx.kvp", static_cast<unsigned long long>(h0));
    const std::string page = store.path() + name;
    CHECK(mkfifo(page.c_str(), 0600) == 0);
    CHECK(store.contains(h0) == false);  // not a regular file: not there
    PageRecord out;
    CHECK(!store.load(h0, 0, t.data(), out));
    CHECK(store.stats().corrupt == 1 && access(page.c_str(), F_OK) != 0);
    // a sparse giant under a page's name: corrupt by its size, never read
    FILE* f = std::fopen(page.c_str(), "wb");
    std::fclose(f);
    CHECK(truncate(page.c_str(), 3ll << 30) == 0);
    const long rss1 = max_rss_kb();
    CHECK(!store.load(h0, 0, t.data(), out));
    CHECK(max_rss_kb() - rss1 < 64 * 1024);
    CHECK(store.stats().corrupt == 2);
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

// A lookup that must load from disk while the pool is full of other cached pages evicts those,
// never the chain it is extending.
void test_load_evicts_unpinned() {
  const std::string dir = temp_dir();
  const auto t = tokens(64, 1);
  {
    KVCache kv(config(8, 0));
    PrefixCache cache(kv);
    PageStore store(dir, "m", PrefixCache::layout_of(kv), 1 << 30);
    cache.set_store(&store);
    CHECK(kv.reserve(0, 64));
    fill(kv, 0, 64, 1);
    PrefixCache::Cursor cur;
    cache.register_pages(0, t.data(), 64, cur);
    kv.release(0);
    cache.clear();
  }
  KVCache kv(config(8, 0));
  PrefixCache cache(kv);
  PageStore store(dir, "m", PrefixCache::layout_of(kv), 1 << 30);
  cache.set_store(&store);
  // fill the pool: 8 pages of another prompt, cached (no store: they are not written)
  cache.set_store(nullptr);
  const auto u = tokens(128, 50);
  CHECK(kv.reserve(0, 128));
  fill(kv, 0, 128, 7);
  PrefixCache::Cursor cur;
  cache.register_pages(0, u.data(), 128, cur);
  kv.release(0);
  CHECK(kv.pages_free(KvGroup::Full) == 0);
  // t is on disk only: loading its 3 pages (63 tokens) evicts 3 of u's cached pages
  cache.set_store(&store);
  CHECK(cache.attach_prefix(1, t.data(), 63) == 48);
  kv.release(1);
  cache.clear();
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace

int main() {
  test_checksum_and_record();
  test_restart(0);
  test_restart(40);
  test_corrupt_file_ignored();
  test_bound_lru();
  test_slot_files(0);
  test_slot_files(20);
  test_hostile_files();
  test_load_evicts_unpinned();
  return test_util::report();
}
