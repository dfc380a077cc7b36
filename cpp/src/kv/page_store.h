// The persistent side of the prefix cache: full KV pages as files, read back in a new process.
//
// A page is named by its prefix-cache chain hash (kv/prefix_cache.h: hash(page i) =
// H(hash(page i-1), tokens of page i)), so a file holds the KV of one whole-page prefix step and
// is shared by every conversation with that prefix. Files live in
//
//   <cache_dir>/<key>/<chain hash, 16 hex digits>.kvp
//
// where <key> names the model file's contents (a hash the caller computes) and the KV layout
// (dtype, page size, layers, heads, head dims, windows): KV from another model, another
// quantization of it, or another KV type is never found. Each file carries a header (magic,
// version, layout hash, chain hash and parent, the page's tokens, payload sizes, a checksum of
// the header) and a checksum of its payload; a file that fails any check is deleted and counted
// as corrupt, never loaded. Writes go through a temporary file renamed into place (atomic: a
// reader sees the whole file or none), on a writer thread fed by a bounded queue (a page is
// copied out of the KV pool when it is registered; the engine thread never waits on the disk for
// a write). The directory is bounded: past max_bytes the least recently used files (by their
// mtime, which a hit refreshes) are removed.
//
// Slot files (llama.cpp's /slots save/restore) use the same page records: a header (with the
// model's content key: a slot file restores into the model it was saved from only), the slot's
// tokens, then one record per cached full page of them. Page and slot files are opened without
// blocking, read only when regular files, and sized from their headers before they are read.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace edgellm {

// One full page of a prefix: what a page file or a slot file holds per page.
struct PageRecord {
  uint64_t hash = 0, parent = 0;
  int32_t depth = 0;              // page index in its sequence
  std::vector<int32_t> tokens;    // page_size ids
  std::vector<uint8_t> full;      // the full-attention group's page (all its layers, K then V)
  std::vector<uint8_t> window;    // the sliding-window group's page, empty when absent
};

// What a page's bytes mean: two caches exchange pages only when these agree.
struct PageLayout {
  int32_t page_size = 0;
  uint64_t full_bytes = 0, window_bytes = 0;  // one page of each group
  std::string description;                    // dtype, dims, windows: hashed into the layout hash
  uint64_t hash() const;
};

// 64-bit checksum (not cryptographic) used for file payloads and headers.
uint64_t checksum64(const void* data, size_t n, uint64_t seed = 0);

// Serialises one record (header + payload) / parses and verifies one at `data` (returns the bytes
// consumed, 0 when the record is malformed or its checksums fail).
std::vector<uint8_t> encode_record(const PageRecord& r, const PageLayout& layout);
// Bytes of one encoded record, with or without the window group's page.
uint64_t record_bytes(const PageLayout& layout, bool with_window);
size_t decode_record(const uint8_t* data, size_t n, const PageLayout& layout, PageRecord& out);

struct PageStoreStats {
  int64_t pages_read = 0, pages_written = 0, corrupt = 0, write_dropped = 0, evicted = 0;
  int64_t files = 0, bytes = 0;  // in the directory now (this process's view)
};

class PageStore {
 public:
  // dir: the cache directory (created); key: the model's content key (hex); max_bytes: bound on
  // this key's files. Throws InvalidRequestError when the directory cannot be created.
  PageStore(const std::string& dir, const std::string& key, const PageLayout& layout, int64_t max_bytes);
  ~PageStore();  // writes what is queued, then stops the writer
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;

  const PageLayout& layout() const { return layout_; }
  const std::string& path() const { return path_; }

  // Whether a file for `hash` is there: known (written, or found at start), else one stat (a
  // process sharing the directory may have written it since).
  bool contains(uint64_t hash);
  // Reads and verifies the file of `hash`: true and `out` filled when it exists, passes every
  // check and holds exactly (parent, tokens). A file that fails a check is deleted (corrupt).
  bool load(uint64_t hash, uint64_t parent, const int32_t* tokens, PageRecord& out);
  // Queues a record for writing (dropped, and counted, when the queue is full).
  void put(PageRecord r);
  // Blocks until every queued record is on disk.
  void flush();
  PageStoreStats stats() const;

  // Slot files: the model's content key (the hex hash the persistent cache is keyed by), tokens,
  // records. write_slot returns the bytes written; throws StorageError when the disk refuses
  // (full, read-only) and InvalidRequestError when the name cannot be a file. read_slot opens
  // without blocking, reads regular files only and checks the header (magic, version, layout,
  // model key, at most max_tokens tokens) and the file's size against it before reading the rest;
  // throws InvalidRequestError naming what is wrong (missing, not a file, another model or
  // layout, truncated, corrupt).
  static int64_t write_slot(const std::string& file, const PageLayout& layout, const std::string& model_key,
                            const std::vector<int32_t>& tokens, const std::vector<PageRecord>& records);
  static int64_t read_slot(const std::string& file, const PageLayout& layout, const std::string& model_key,
                           int64_t max_tokens, std::vector<int32_t>& tokens, std::vector<PageRecord>& records);

 private:
  struct FileInfo {
    int64_t bytes = 0;
    int64_t stamp = 0;  // last use, ns (mtime at start)
  };
  std::string file_of(uint64_t hash) const;
  void scan();
  void writer_loop();
  void write_one(const PageRecord& r);
  void enforce_bound_locked();

  PageLayout layout_;
  std::string path_;
  int64_t max_bytes_ = 0;
  int64_t max_queue_bytes_ = 256ll << 20;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::unordered_map<uint64_t, FileInfo> index_;
  std::deque<PageRecord> queue_;
  int64_t queue_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  PageStoreStats stats_;
  int64_t seq_ = 0;
  std::thread writer_;
};

}  // namespace edgellm
