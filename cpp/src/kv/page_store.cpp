#include "kv/page_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/errors.h"

namespace edgellm {
namespace {

constexpr char kPageMagic[8] = {'E', 'K', 'V', 'P', 'A', 'G', 'E', '1'};
constexpr char kSlotMagic[8] = {'E', 'K', 'V', 'S', 'L', 'O', 'T', '1'};
constexpr uint32_t kVersion = 1;

constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t round64(uint64_t acc, uint64_t w) { return rotl(acc + w * P2, 31) * P1; }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Little writer / reader over a byte vector (the files are written and read on the same kind of
// machine: native byte order, checked by the magic + checksums).
struct Out {
  std::vector<uint8_t>& b;
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    const auto* q = static_cast<const uint8_t*>(p);
    b.insert(b.end(), q, q + n);
  }
};

struct In {
  const uint8_t* p;
  size_t n, at = 0;
  template <class T>
  bool get(T& v) {
    if (n - at < sizeof(T)) return false;
    std::memcpy(&v, p + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
};

// A file opened for reading the way untrusted cache and slot files must be: without blocking (a
// FIFO or a device in the file's place cannot hang the reader), and only when it is a regular
// file, whose size is known before a byte is read.
struct ReadOnlyFile {
  enum Status { Ok, Missing, NotRegular, Unreadable };
  int fd = -1;
  uint64_t size = 0;
  Status status = Missing;
  int err = 0;

  explicit ReadOnlyFile(const std::string& path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      err = errno;
      status = errno == ENOENT ? Missing : Unreadable;
      return;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      err = errno;
      status = Unreadable;
    } else if (!S_ISREG(st.st_mode)) {
      status = NotRegular;
    } else {
      size = static_cast<uint64_t>(st.st_size);
      status = Ok;
    }
  }
  ~ReadOnlyFile() {
    if (fd >= 0) ::close(fd);
  }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  // Reads n bytes at `offset` into out (resized); false when fewer are there (the file shrank).
  bool read(uint64_t offset, size_t n, std::vector<uint8_t>& out) const {
    out.resize(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
};

// Writes `data` to `path` through a temporary file `tmp` in the same directory and a rename.
// Returns 0, or the errno of the step that failed (the temporary file is removed).
int write_atomic(const std::string& path, const std::string& tmp, const std::vector<uint8_t>& data) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) return errno;
  int err = 0;
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) ::unlink(tmp.c_str());
  return err;
}

bool make_dirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    if (i < dir.size()) cur += dir[i];
  }
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t checksum64(const void* data, size_t n, uint64_t seed) {
  const auto* b = static_cast<const uint8_t*>(data);
  size_t i = 0;
  uint64_t h;
  if (n >= 32) {
    uint64_t a0 = seed + P1 + P2, a1 = seed + P2, a2 = seed, a3 = seed - P1;
    for (; i + 32 <= n; i += 32) {
      a0 = round64(a0, load64(b + i));
      a1 = round64(a1, load64(b + i + 8));
      a2 = round64(a2, load64(b + i + 16));
      a3 = round64(a3, load64(b + i + 24));
    }
    h = rotl(a0, 1) + rotl(a1, 7) + rotl(a2, 12) + rotl(a3, 18);
    for (uint64_t a : {a0, a1, a2, a3}) h = (h ^ round64(0, a)) * P1 + P4;
  } else {
    h = seed + P5;
  }
  h += static_cast<uint64_t>(n);
  for (; i + 8 <= n; i += 8) h = rotl(h ^ round64(0, load64(b + i)), 27) * P1 + P4;
  for (; i < n; ++i) h = rotl(h ^ (b[i] * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t PageLayout::hash() const {
  std::string s = description + "|P=" + std::to_string(page_size) + "|F=" + std::to_string(full_bytes) +
                  "|W=" + std::to_string(window_bytes);
  return checksum64(s.data(), s.size(), 0x6b76);
}

// Record: magic, version, page_size, layout hash, hash, parent, depth, flags, full bytes, window
// bytes, payload checksum, tokens, header checksum; then the payload (full, then window).
constexpr size_t kRecordFixedBytes = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 8;  // before the tokens

uint64_t record_bytes(const PageLayout& layout, bool with_window) {  // = encode_record(...).size()
  return kRecordFixedBytes + static_cast<uint64_t>(layout.page_size) * sizeof(int32_t) + 8 + layout.full_bytes +
         (with_window ? layout.window_bytes : 0);
}

std::vector<uint8_t> encode_record(const PageRecord& r, const PageLayout& layout) {
  std::vector<uint8_t> b;
  b.reserve(96 + r.tokens.size() * 4 + r.full.size() + r.window.size());
  Out o{b};
  o.bytes(kPageMagic, 8);
  o.put(kVersion);
  o.put(static_cast<uint32_t>(layout.page_size));
  o.put(layout.hash());
  o.put(r.hash);
  o.put(r.parent);
  o.put(r.depth);
  o.put(static_cast<uint32_t>(r.window.empty() ? 0 : 1));
  o.put(static_cast<uint64_t>(r.full.size()));
  o.put(static_cast<uint64_t>(r.window.size()));
  uint64_t pc = checksum64(r.full.data(), r.full.size(), 1);
  pc = checksum64(r.window.data(), r.window.size(), pc);
  o.put(pc);
  o.bytes(r.tokens.data(), r.tokens.size() * sizeof(int32_t));
  o.put(checksum64(b.data(), b.size(), 2));
  o.bytes(r.full.data(), r.full.size());
  o.bytes(r.window.data(), r.window.size());
  return b;
}

size_t decode_record(const uint8_t* data, size_t n, const PageLayout& layout, PageRecord& out) {
  In in{data, n};
  if (n < 8 || std::memcmp(data, kPageMagic, 8) != 0) return 0;
  in.at = 8;
  uint32_t version = 0, page_size = 0, flags = 0;
  uint64_t lhash = 0, full = 0, window = 0, pc = 0, hc = 0;
  PageRecord r;
  if (!in.get(version) || !in.get(page_size) || !in.get(lhash) || !in.get(r.hash) || !in.get(r.parent) ||
      !in.get(r.depth) || !in.get(flags) || !in.get(full) || !in.get(window) || !in.get(pc))
    return 0;
  if (version != kVersion || page_size != static_cast<uint32_t>(layout.page_size) || lhash != layout.hash()) return 0;
  if (full != layout.full_bytes || (window != 0 && window != layout.window_bytes) || (flags == 1) != (window != 0))
    return 0;
  if (r.depth < 0) return 0;
  const size_t tok_bytes = static_cast<size_t>(page_size) * sizeof(int32_t);
  if (n - in.at < tok_bytes + 8) return 0;
  r.tokens.resize(page_size);
  std::memcpy(r.tokens.data(), data + in.at, tok_bytes);
  in.at += tok_bytes;
  const size_t header_end = in.at;
  if (!in.get(hc) || hc != checksum64(data, header_end, 2)) return 0;
  if (n - in.at < full + window) return 0;
  uint64_t got = checksum64(data + in.at, full, 1);
  got = checksum64(data + in.at + full, window, got);
  if (got != pc) return 0;
  r.full.assign(data + in.at, data + in.at + full);
  r.window.assign(data + in.at + full, data + in.at + full + window);
  in.at += full + window;
  out = std::move(r);
  return in.at;
}

// ---- PageStore ----------------------------------------------------------------------------------

PageStore::PageStore(const std::string& dir, const std::string& key, const PageLayout& layout, int64_t max_bytes)
    : layout_(layout), max_bytes_(max_bytes) {
  if (dir.empty()) throw InvalidRequestError("cache_dir is empty");
  std::string k;
  for (char c : key)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') k += c;
  if (k.empty()) throw InvalidRequestError("cache key is empty");
  path_ = dir + "/" + k + "-" + hex16(layout.hash());
  if (!make_dirs(path_))
    throw InvalidRequestError("cache_dir '" + dir + "': cannot create '" + path_ + "' (" + std::strerror(errno) + ")");
  scan();
  writer_ = std::thread([this] { writer_loop(); });
}

PageStore::~PageStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string PageStore::file_of(uint64_t hash) const { return path_ + "/" + hex16(hash) + ".kvp"; }

void PageStore::scan() {
  DIR* d = ::opendir(path_.c_str());
  if (!d) return;
  const int64_t now = now_ns();
  std::lock_guard<std::mutex> lock(mu_);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    const std::string full = path_ + "/" + name;
    if (name.rfind(".tmp-", 0) == 0) {
      // another process's unfinished write, or one killed mid-write: gone after 10 minutes
      if (::stat(full.c_str(), &st) == 0 && now - static_cast<int64_t>(st.st_mtime) * 1000000000ll > 600ll * 1000000000ll)
        std::remove(full.c_str());
      continue;
    }
    if (name.size() != 20 || name.compare(16, 4, ".kvp") != 0) continue;
    const std::string digits = name.substr(0, 16);  // alive while `end` points into it
    char* end = nullptr;
    const uint64_t h = std::strtoull(digits.c_str(), &end, 16);
    if (!end || *end != '\0' || ::stat(full.c_str(), &st) != 0) continue;
    FileInfo fi;
    fi.bytes = st.st_size;
    fi.stamp = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
    index_[h] = fi;
    stats_.bytes += fi.bytes;
  }
  ::closedir(d);
  stats_.files = static_cast<int64_t>(index_.size());
  enforce_bound_locked();
}

bool PageStore::contains(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(hash)) return true;
  // Another process sharing the directory may have written it since the scan.
  struct stat st {};
  if (::stat(file_of(hash).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  index_[hash] = FileInfo{static_cast<int64_t>(st.st_size),
                          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec};
  stats_.bytes += st.st_size;
  stats_.files = static_cast<int64_t>(index_.size());
  return true;
}

bool PageStore::load(uint64_t hash, uint64_t parent, const int32_t* tokens, PageRecord& out) {
  const std::string file = file_of(hash);
  std::vector<uint8_t> data;
  const ReadOnlyFile f(file);
  if (f.status == ReadOnlyFile::Missing) {  // not there (or another process removed it)
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(hash);
    if (it != index_.end()) {
      stats_.bytes -= it->second.bytes;
      index_.erase(it);
      stats_.files = static_cast<int64_t>(index_.size());
    }
    return false;
  }
  // Only a regular file of one record's exact size is read (a FIFO, a directory or a sparse
  // giant in its place is corrupt: removed, never read).
  const bool sized = f.status == ReadOnlyFile::Ok &&
                     (f.size == record_bytes(layout_, false) || (layout_.window_bytes > 0 && f.size == record_bytes(layout_, true)));
  PageRecord r;
  const size_t used = sized && f.read(0, static_cast<size_t>(f.size), data) ? decode_record(data.data(), data.size(), layout_, r) : 0;
  const bool ok = used > 0 && used == data.size() && r.hash == hash && r.parent == parent &&
                  std::equal(r.tokens.begin(), r.tokens.end(), tokens);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(hash);
  if (!ok) {
    // Fails a check (torn, truncated, overwritten, another layout under this name): never
    // loaded, and removed so the next registration of this page writes it afresh.
    std::remove(file.c_str());
    if (it != index_.end()) {
      stats_.bytes -= it->second.bytes;
      index_.erase(it);
    }
    ++stats_.corrupt;
    stats_.files = static_cast<int64_t>(index_.size());
    return false;
  }
  const int64_t now = now_ns();
  if (it == index_.end()) {
    it = index_.emplace(hash, FileInfo{static_cast<int64_t>(data.size()), now}).first;
    stats_.bytes += it->second.bytes;
    stats_.files = static_cast<int64_t>(index_.size());
  }
  it->second.stamp = now;
  ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // LRU order survives restarts
  ++stats_.pages_read;
  out = std::move(r);
  return true;
}

void PageStore::put(PageRecord r) {
  const int64_t bytes = static_cast<int64_t>(r.full.size() + r.window.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || index_.count(r.hash)) return;
    if (queue_bytes_ + bytes > max_queue_bytes_ || bytes > max_bytes_) {
      ++stats_.write_dropped;
      return;
    }
    queue_bytes_ += bytes;
    queue_.push_back(std::move(r));
  }
  cv_.notify_one();
}

void PageStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

PageStoreStats PageStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PageStore::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) break;
      continue;
    }
    PageRecord r = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    write_one(r);
    lock.lock();
    queue_bytes_ -= static_cast<int64_t>(r.full.size() + r.window.size());
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void PageStore::write_one(const PageRecord& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(r.hash)) return;
    ++seq_;
  }
  const std::vector<uint8_t> data = encode_record(r, layout_);
  const std::string tmp = path_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(seq_);
  const bool ok = write_atomic(file_of(r.hash), tmp, data) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {  // disk full, directory gone: the page stays in memory only
    ++stats_.write_dropped;
    return;
  }
  auto [it, fresh] = index_.emplace(r.hash, FileInfo{static_cast<int64_t>(data.size()), now_ns()});
  if (fresh) stats_.bytes += it->second.bytes;
  ++stats_.pages_written;
  stats_.files = static_cast<int64_t>(index_.size());
  enforce_bound_locked();
}

void PageStore::enforce_bound_locked() {
  if (stats_.bytes <= max_bytes_) return;
  // Down to 90 % of the bound, oldest first, so that eviction runs once per many writes.
  std::vector<std::pair<int64_t, uint64_t>> order;
  order.reserve(index_.size());
  for (const auto& [h, fi] : index_) order.emplace_back(fi.stamp, h);
  std::sort(order.begin(), order.end());
  const int64_t target = max_bytes_ - max_bytes_ / 10;
  for (const auto& [stamp, h] : order) {
    if (stats_.bytes <= target) break;
    auto it = index_.find(h);
    std::remove(file_of(h).c_str());
    stats_.bytes -= it->second.bytes;
    index_.erase(it);
    ++stats_.evicted;
  }
  stats_.files = static_cast<int64_t>(index_.size());
}

// ---- slot files ---------------------------------------------------------------------------------
// magic, version, page_size, layout hash, model key (kSlotKeyBytes, NUL padded), n_tokens,
// n_records, tokens, header checksum; records.

namespace {
constexpr uint32_t kSlotVersion = 2;  // 1 had no model key
constexpr size_t kSlotKeyBytes = 32;
constexpr size_t kSlotFixedBytes = 8 + 4 + 4 + 8 + kSlotKeyBytes + 8 + 8;  // before the tokens

std::string slot_key_field(const std::string& model_key) {
  std::string k = model_key.substr(0, kSlotKeyBytes);
  k.resize(kSlotKeyBytes, '\0');
  return k;
}

std::string printable_key(const std::string& field) {
  std::string out;
  for (char c : field)
    if (std::isxdigit(static_cast<unsigned char>(c))) out += c;
  return out.empty() ? "none" : out;
}

// A temporary name for `file` in its directory, short whatever the file's name (a 255-byte name
// plus a suffix would pass NAME_MAX), unique per process and call.
std::string slot_temp_name(const std::string& file) {
  static std::atomic<uint64_t> seq{0};
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : file.substr(0, slash);
  return dir + "/.tmp-slot-" + std::to_string(::getpid()) + "-" + std::to_string(++seq);
}
}  // namespace

int64_t PageStore::write_slot(const std::string& file, const PageLayout& layout, const std::string& model_key,
                              const std::vector<int32_t>& tokens, const std::vector<PageRecord>& records) {
  std::vector<uint8_t> b;
  Out o{b};
  o.bytes(kSlotMagic, 8);
  o.put(kSlotVersion);
  o.put(static_cast<uint32_t>(layout.page_size));
  o.put(layout.hash());
  const std::string key = slot_key_field(model_key);
  o.bytes(key.data(), key.size());
  o.put(static_cast<uint64_t>(tokens.size()));
  o.put(static_cast<uint64_t>(records.size()));
  o.bytes(tokens.data(), tokens.size() * sizeof(int32_t));
  o.put(checksum64(b.data(), b.size(), 3));
  for (const auto& r : records) {
    const auto rec = encode_record(r, layout);
    o.bytes(rec.data(), rec.size());
  }
  const int err = write_atomic(file, slot_temp_name(file), b);
  if (err == EISDIR || err == ENOTDIR || err == ENAMETOOLONG)  // what the name asks for cannot be
    throw InvalidRequestError("cannot write slot file '" + file + "': " + std::strerror(err));
  if (err != 0)  // the server's disk: full, read-only, failing
    throw StorageError(err, "cannot write slot file '" + file + "': " + std::strerror(err));
  return static_cast<int64_t>(b.size());
}

int64_t PageStore::read_slot(const std::string& file, const PageLayout& layout, const std::string& model_key,
                             int64_t max_tokens, std::vector<int32_t>& tokens, std::vector<PageRecord>& records) {
  const std::string bad = "slot file '" + file + "' ";
  const ReadOnlyFile f(file);
  if (f.status == ReadOnlyFile::Missing) throw InvalidRequestError(bad + "not found");
  if (f.status == ReadOnlyFile::NotRegular) throw InvalidRequestError(bad + "is not a regular file");
  if (f.status != ReadOnlyFile::Ok) throw InvalidRequestError(bad + "cannot be read: " + std::strerror(f.err));
  // The fixed header first: everything after it is sized by it, and checked against the file's
  // size before it is read (a sparse giant is refused at once, not read).
  std::vector<uint8_t> data;
  if (f.size < 8 || !f.read(0, 8, data) || std::memcmp(data.data(), kSlotMagic, 8) != 0)
    throw InvalidRequestError(bad + "is not an edgellm slot file");
  if (f.size < kSlotFixedBytes || !f.read(0, kSlotFixedBytes, data)) {
    uint32_t version = 0;
    if (f.size >= 12 && f.read(0, 12, data)) std::memcpy(&version, data.data() + 8, 4);
    if (version == 1) throw InvalidRequestError(bad + "has version 1 (saved without the model's identity): save it again");
    throw InvalidRequestError(bad + "is truncated");
  }
  In in{data.data(), data.size()};
  in.at = 8;
  uint32_t version = 0, page_size = 0;
  uint64_t lhash = 0, n_tokens = 0, n_records = 0, hc = 0;
  in.get(version);
  if (version == 1) throw InvalidRequestError(bad + "has version 1 (saved without the model's identity): save it again");
  if (version != kSlotVersion) throw InvalidRequestError(bad + "has version " + std::to_string(version));
  in.get(page_size);
  in.get(lhash);
  const std::string key(reinterpret_cast<const char*>(data.data() + in.at), kSlotKeyBytes);
  in.at += kSlotKeyBytes;
  in.get(n_tokens);
  in.get(n_records);
  if (page_size != static_cast<uint32_t>(layout.page_size) || lhash != layout.hash())
    throw InvalidRequestError(bad + "was saved from another model or KV layout (" +
                              "page size " + std::to_string(page_size) + ")");
  if (key != slot_key_field(model_key))
    throw InvalidRequestError(bad + "was saved from another model (content hash " + printable_key(key) +
                              ", this model's " + printable_key(slot_key_field(model_key)) + ")");
  if (n_tokens > static_cast<uint64_t>(std::max<int64_t>(0, max_tokens)))
    throw InvalidRequestError(bad + "holds " + std::to_string(n_tokens) + " tokens, more than the context of " +
                              std::to_string(max_tokens));
  if (n_records > n_tokens / std::max<uint32_t>(1, page_size)) throw InvalidRequestError(bad + "is corrupt");
  // n_tokens and n_records are bounded now: no product below overflows.
  const uint64_t head = kSlotFixedBytes + n_tokens * sizeof(int32_t) + 8;
  const uint64_t least = head + n_records * record_bytes(layout, false);
  const uint64_t most = head + n_records * record_bytes(layout, layout.window_bytes > 0);
  if (f.size < least || f.size > most)
    throw InvalidRequestError(bad + "is truncated or corrupt (" + std::to_string(f.size) + " bytes; its header says " +
                              (least == most ? std::to_string(least) : std::to_string(least) + ".." + std::to_string(most)) +
                              ")");
  if (!f.read(0, static_cast<size_t>(f.size), data)) throw InvalidRequestError(bad + "is truncated");
  in = In{data.data(), data.size()};
  in.at = kSlotFixedBytes;
  tokens.resize(n_tokens);
  std::memcpy(tokens.data(), data.data() + in.at, n_tokens * sizeof(int32_t));
  in.at += n_tokens * sizeof(int32_t);
  const size_t header_end = in.at;
  if (!in.get(hc) || hc != checksum64(data.data(), header_end, 3))
    throw InvalidRequestError(bad + "is corrupt (header checksum)");
  records.clear();
  for (uint64_t i = 0; i < n_records; ++i) {
    PageRecord r;
    const size_t used = decode_record(data.data() + in.at, data.size() - in.at, layout, r);
    if (used == 0) throw InvalidRequestError(bad + "is corrupt (page " + std::to_string(i) + ")");
    in.at += used;
    records.push_back(std::move(r));
  }
  if (in.at != data.size()) throw InvalidRequestError(bad + "has trailing bytes");
  return static_cast<int64_t>(data.size());
}

}  // namespace edgellm
