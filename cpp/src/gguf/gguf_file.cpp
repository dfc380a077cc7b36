// GGUF parsing and validation. The file is untrusted input: every count, length, offset and
// size is checked against the bytes that remain BEFORE anything is allocated or read, and all
// size arithmetic is done on uint64 with explicit overflow checks. Layout facts: see
// docs/formats.md §1.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/file_guard.h"

namespace edgellm {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian fields with memcpy; big-endian hosts need byte swapping"
#endif

namespace {

constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 64;    // GGML_MAX_NAME: names must be shorter than this
constexpr uint64_t kDefaultAlignment = 32;

// Smallest encodings, used to bound counts by the bytes that remain before reserving memory.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;          // key len + 1-byte key + type + 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name len + name + n_dims + type + offset

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

// Size of one scalar of a GGUF value type; 0 for STRING/ARRAY (variable) and unknown ids.
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::FLOAT64); }

// ggml type names this engine does not read, so the error says what the file holds.
const char* ggml_type_name(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2 (removed)"; case 5: return "Q4_3 (removed)";
    case 16: return "IQ2_XXS"; case 17: return "IQ2_XS"; case 18: return "IQ3_XXS"; case 19: return "IQ1_S";
    case 21: return "IQ3_S"; case 22: return "IQ2_S";
    case 24: return "I8"; case 25: return "I16"; case 26: return "I32"; case 27: return "I64";
    case 28: return "F64"; case 29: return "IQ1_M"; case 34: return "TQ1_0"; case 35: return "TQ2_0";
    case 40: return "NVFP4"; case 41: return "Q1_0"; case 42: return "Q2_0";
    default: return nullptr;
  }
}

std::string quoted(std::string_view s) {
  // Names come from the file; keep messages printable and bounded.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 96; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
    else { char buf[8]; std::snprintf(buf, sizeof buf, "\\x%02x", c); out += buf; }
  }
  if (s.size() > 96) out += "...";
  return out + "'";
}

// A bounds-checked cursor over the mapping. `where` callables build the context of an error
// message only when one is thrown, so the hot path (262k token strings) stays cheap.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size) : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const { throw ModelFormatError(path_ + ": " + what); }

  template <class Where>
  void need(uint64_t n, const Where& where) const {
    if (n > remaining())
      fail(where() + ": needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) + " but only " +
           std::to_string(remaining()) + " remain (file size " + std::to_string(size_) + ")");
  }

  template <class T, class Where>
  T read(const Where& where) {
    need(sizeof(T), where);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }

  template <class Where>
  std::string_view read_string(const Where& where) {
    const uint64_t len = read<uint64_t>([&] { return where() + " length"; });
    need(len, [&] { return where() + " (string of " + std::to_string(len) + " bytes)"; });
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  const uint8_t* here() const { return base_ + pos_; }
  void skip(uint64_t n) { pos_ += n; }  // callers have called need(n)

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "UINT8"; case GgufType::INT8: return "INT8";
    case GgufType::UINT16: return "UINT16"; case GgufType::INT16: return "INT16";
    case GgufType::UINT32: return "UINT32"; case GgufType::INT32: return "INT32";
    case GgufType::FLOAT32: return "FLOAT32"; case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING"; case GgufType::ARRAY: return "ARRAY";
    case GgufType::UINT64: return "UINT64"; case GgufType::INT64: return "INT64";
    case GgufType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

double GgufValue::array_number(uint64_t i) const {
  switch (elem_type) {
    case GgufType::UINT8: return array_data[i];
    case GgufType::INT8: return static_cast<int8_t>(array_data[i]);
    case GgufType::BOOL: return array_data[i] != 0;
    case GgufType::UINT16: return load<uint16_t>(array_data + 2 * i);
    case GgufType::INT16: return load<int16_t>(array_data + 2 * i);
    case GgufType::UINT32: return load<uint32_t>(array_data + 4 * i);
    case GgufType::INT32: return load<int32_t>(array_data + 4 * i);
    case GgufType::FLOAT32: return load<float>(array_data + 4 * i);
    case GgufType::UINT64: return static_cast<double>(load<uint64_t>(array_data + 8 * i));
    case GgufType::INT64: return static_cast<double>(load<int64_t>(array_data + 8 * i));
    case GgufType::FLOAT64: return load<double>(array_data + 8 * i);
    default: return 0;
  }
}

// ---- opening and mapping ------------------------------------------------------------------

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> f = open_one(path);
  f->open_shards();
  return f;
}

std::shared_ptr<GgufFile> GgufFile::open_one(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO cannot block the open
  if (f->fd_ < 0) throw ModelFormatError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(f->fd_, &st) != 0) throw ModelFormatError(path + ": cannot stat: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw ModelFormatError(path + ": is a directory, not a GGUF file");
  if (!S_ISREG(st.st_mode)) throw ModelFormatError(path + ": is not a regular file");
  if (st.st_size == 0) throw ModelFormatError(path + ": file is empty (0 bytes), not a GGUF file");
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->dev_ = static_cast<uint64_t>(st.st_dev);
  f->ino_ = static_cast<uint64_t>(st.st_ino);
  f->mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
  void* p = ::mmap(nullptr, static_cast<size_t>(f->size_), PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (p == MAP_FAILED) throw ModelFormatError(path + ": cannot map " + std::to_string(f->size_) + " bytes: " + std::strerror(errno));
  f->base_ = static_cast<const uint8_t*>(p);
  // A truncation of the file while it is parsed or served faults into zero pages, not a crash.
  f->guard_ = file_guard::add(f->base_, static_cast<size_t>(f->size_));
  f->parse();
  f->check_unchanged();  // changed while parsed: what was read is not the file
  return f;
}

// ---- split models -------------------------------------------------------------------------

namespace {

// llama.cpp's split naming (llama_split_path / llama_split_prefix): PREFIX-%05d-of-%05d.gguf.
std::string split_suffix(uint32_t no1, uint32_t count) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "-%05u-of-%05u.gguf", no1, count);
  return buf;
}

}  // namespace

void GgufFile::open_shards() {
  if (!find("split.count")) return;
  const uint32_t count = get_u32("split.count");
  const uint32_t no = find("split.no") ? get_u32("split.no") : 0;
  if (count == 0) throw ModelShardError(path_, path_ + ": key split.count = 0 is invalid");
  if (no >= count)
    throw ModelShardError(path_, path_ + ": key split.no = " + std::to_string(no) + " is not below split.count = " +
                                     std::to_string(count));
  const std::string suffix = split_suffix(no + 1, count);
  const bool named =
      path_.size() > suffix.size() && path_.compare(path_.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string prefix = named ? path_.substr(0, path_.size() - suffix.size()) : std::string();
  if (no != 0)
    throw ModelShardError(path_, path_ + ": is shard " + std::to_string(no + 1) + " of " + std::to_string(count) +
                                     " of a split model; load the first shard" +
                                     (named ? " (" + prefix + split_suffix(1, count) + ")" : std::string()));
  if (count == 1) return;
  if (!named)
    throw ModelShardError(path_, path_ + ": is the first of " + std::to_string(count) +
                                     " shards of a split model but is not named PREFIX" + suffix +
                                     " (llama.cpp's naming), so its other shards cannot be found");
  uint64_t total = tensors_.size();
  for (uint32_t i = 1; i < count; ++i) {
    const std::string sp = prefix + split_suffix(i + 1, count);
    const std::string which = "shard " + std::to_string(i + 1) + " of " + std::to_string(count) + " (" + sp + ")";
    struct stat st;
    if (::stat(sp.c_str(), &st) != 0)
      throw ModelShardError(sp, path_ + ": split model " + which + " is missing: " + std::strerror(errno));
    std::shared_ptr<GgufFile> sh;
    try {
      sh = open_one(sp);
    } catch (const ModelFormatError& e) {
      throw ModelShardError(sp, path_ + ": split model " + which + " is not a valid GGUF file: " + e.what());
    }
    const std::optional<uint32_t> sno = sh->find("split.no") ? sh->find_u32("split.no") : std::nullopt;
    const std::optional<uint32_t> scount = sh->find("split.count") ? sh->find_u32("split.count") : std::nullopt;
    if (!sno || !scount || *sno != i || *scount != count)
      throw ModelShardError(sp, path_ + ": split model " + which + " does not belong: its split.no / split.count are " +
                                    (sno ? std::to_string(*sno) : std::string("absent")) + " / " +
                                    (scount ? std::to_string(*scount) : std::string("absent")) + ", expected " +
                                    std::to_string(i) + " / " + std::to_string(count));
    for (TensorInfo t : sh->tensors_) {
      if (tensor_index_.count(t.name))
        throw ModelShardError(sp, path_ + ": split model " + which + ": tensor " + quoted(t.name) +
                                      " is also in an earlier shard");
      t.shard = i;
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }
    total += sh->tensors_.size();
    shards_.push_back(std::move(sh));
  }
  if (const GgufValue* tc = find("split.tensors.count")) {
    const int64_t want = tc->type == GgufType::INT32 || tc->type == GgufType::INT64 || tc->type == GgufType::INT16
                             ? tc->i64
                             : static_cast<int64_t>(tc->u64);
    if (want != static_cast<int64_t>(total))
      throw ModelShardError(path_, path_ + ": split model: split.tensors.count = " + std::to_string(want) +
                                       " but its " + std::to_string(count) + " shards hold " + std::to_string(total) +
                                       " tensors");
  }
}

std::vector<std::string> GgufFile::shard_paths() const {
  std::vector<std::string> out{path_};
  for (const auto& s : shards_) out.push_back(s->path_);
  return out;
}

uint64_t GgufFile::total_size() const {
  uint64_t n = size_;
  for (const auto& s : shards_) n += s->size_;
  return n;
}

uint64_t GgufFile::total_header_bytes() const {
  uint64_t n = data_offset_;
  for (const auto& s : shards_) n += s->data_offset_;
  return n;
}

GgufFile::~GgufFile() {
  file_guard::remove(guard_);
  if (base_) ::munmap(const_cast<uint8_t*>(base_), static_cast<size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
}

const char* file_state_name(FileState s) {
  switch (s) {
    case FileState::Intact: return "intact";
    case FileState::Replaced: return "replaced";
    case FileState::Changed: return "changed";
  }
  return "changed";
}

bool GgufFile::changed() const {
  if (file_guard::faulted(guard_)) return true;
  struct stat st;
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return false;
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
  return static_cast<uint64_t>(st.st_size) != size_ || mtime != mtime_ns_;
}

FileState GgufFile::state() const {
  FileState worst = FileState::Intact;
  for (const auto& s : shards_) {
    const FileState st = s->state();
    if (st == FileState::Changed) return st;
    if (st == FileState::Replaced) worst = st;
  }
  if (changed()) return FileState::Changed;
  if (worst != FileState::Intact) return worst;
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_dev) != dev_ ||
      static_cast<uint64_t>(st.st_ino) != ino_)
    return FileState::Replaced;
  return FileState::Intact;
}

void GgufFile::check_unchanged() const {
  for (const auto& s : shards_) s->check_unchanged();
  if (!changed()) return;
  throw ModelFileChangedError(path_ + ": " + kModelFileChanged +
                              " (truncated or rewritten in place); replace a served model by writing a new file "
                              "and renaming it over the old one");
}

// ---- parsing ------------------------------------------------------------------------------

void GgufFile::parse() {
  Cursor in(path_, base_, size_);

  // Header: magic, version, counts.
  if (size_ < 4) in.fail("file of " + std::to_string(size_) + " bytes is too small for the GGUF magic");
  if (std::memcmp(base_, "GGUF", 4) != 0)
    in.fail("bad magic " + quoted(std::string_view(reinterpret_cast<const char*>(base_), 4)) +
            " (expected 'GGUF'): not a GGUF file");
  in.skip(4);
  version_ = in.read<uint32_t>([] { return std::string("header: version"); });
  if ((version_ & 0xFFFFu) == 0 && version_ != 0)
    in.fail("header: version " + std::to_string(version_) + " (0x" + [&] {
      char b[16]; std::snprintf(b, sizeof b, "%08x", version_); return std::string(b);
    }() + ") looks byte-swapped: big-endian GGUF files are not supported");
  if (version_ == 0) in.fail("header: version 0 is invalid");
  if (version_ == 1) in.fail("header: GGUF version 1 is no longer supported (convert the file to v3)");
  if (version_ > 3) in.fail("header: GGUF version " + std::to_string(version_) + " is newer than supported (2, 3)");

  const int64_t n_tensors = in.read<int64_t>([] { return std::string("header: n_tensors"); });
  const int64_t n_kv = in.read<int64_t>([] { return std::string("header: n_kv"); });
  if (n_tensors < 0) in.fail("header: n_tensors = " + std::to_string(n_tensors) + " is negative");
  if (n_kv < 0) in.fail("header: n_kv = " + std::to_string(n_kv) + " is negative");
  // Bound the counts by what the rest of the file could possibly hold before reserving.
  if (static_cast<uint64_t>(n_kv) > in.remaining() / kMinKvBytes)
    in.fail("header: n_kv = " + std::to_string(n_kv) + " key/value pairs cannot fit in the " +
            std::to_string(in.remaining()) + " bytes after the header");
  if (static_cast<uint64_t>(n_tensors) > in.remaining() / kMinTensorInfoBytes)
    in.fail("header: n_tensors = " + std::to_string(n_tensors) + " tensor infos cannot fit in the " +
            std::to_string(in.remaining()) + " bytes after the header");

  // Metadata.
  kv_.reserve(static_cast<size_t>(n_kv));
  std::unordered_set<std::string_view> seen_keys;
  for (int64_t i = 0; i < n_kv; ++i) {
    const std::string_view key =
        in.read_string([&] { return "metadata pair #" + std::to_string(i) + ": key"; });
    if (key.empty()) in.fail("metadata pair #" + std::to_string(i) + ": empty key");
    // Keys are views into the mapping, which outlives this set.
    if (!seen_keys.insert(key).second) in.fail("metadata key " + quoted(key) + ": duplicate key");
    const auto where = [&] { return "metadata key " + quoted(key); };

    GgufKV kv;
    kv.key.assign(key);
    GgufValue& v = kv.value;
    const uint32_t type_id = in.read<uint32_t>([&] { return where() + ": value type"; });
    if (!valid_value_type(type_id))
      in.fail(where() + ": unknown value type id " + std::to_string(type_id));
    v.type = static_cast<GgufType>(type_id);

    auto read_scalar = [&](GgufType t) {
      const uint64_t n = scalar_size(t);
      in.need(n, where);
      const uint8_t* p = in.here();
      switch (t) {
        case GgufType::UINT8: v.u64 = p[0]; break;
        case GgufType::BOOL: v.u64 = p[0] != 0; break;
        case GgufType::INT8: v.i64 = static_cast<int8_t>(p[0]); break;
        case GgufType::UINT16: v.u64 = load<uint16_t>(p); break;
        case GgufType::INT16: v.i64 = load<int16_t>(p); break;
        case GgufType::UINT32: v.u64 = load<uint32_t>(p); break;
        case GgufType::INT32: v.i64 = load<int32_t>(p); break;
        case GgufType::FLOAT32: v.f64 = load<float>(p); break;
        case GgufType::UINT64: v.u64 = load<uint64_t>(p); break;
        case GgufType::INT64: v.i64 = load<int64_t>(p); break;
        case GgufType::FLOAT64: v.f64 = load<double>(p); break;
        default: break;
      }
      in.skip(n);
    };

    if (v.type == GgufType::STRING) {
      v.str.assign(in.read_string(where));
    } else if (v.type == GgufType::ARRAY) {
      const uint32_t elem_id = in.read<uint32_t>([&] { return where() + ": array element type"; });
      if (!valid_value_type(elem_id))
        in.fail(where() + ": unknown array element type id " + std::to_string(elem_id));
      v.elem_type = static_cast<GgufType>(elem_id);
      if (v.elem_type == GgufType::ARRAY) in.fail(where() + ": nested arrays are not supported");
      v.array_len = in.read<uint64_t>([&] { return where() + ": array length"; });
      if (v.elem_type == GgufType::STRING) {
        // Each string takes at least its 8-byte length: bound the count before reserving.
        if (v.array_len > in.remaining() / 8)
          in.fail(where() + ": array of " + std::to_string(v.array_len) + " strings cannot fit in the " +
                  std::to_string(in.remaining()) + " bytes that remain");
        // Reserve at most 1M up front: a count that is merely plausible must not commit memory.
        v.strings.reserve(static_cast<size_t>(std::min<uint64_t>(v.array_len, uint64_t(1) << 20)));
        for (uint64_t j = 0; j < v.array_len; ++j)
          v.strings.emplace_back(in.read_string([&] { return where() + ": string [" + std::to_string(j) + "]"; }));
      } else {
        uint64_t bytes = 0;
        if (!checked_mul(v.array_len, scalar_size(v.elem_type), &bytes) || bytes > in.remaining())
          in.fail(where() + ": array of " + std::to_string(v.array_len) + " " + gguf_type_name(v.elem_type) +
                  " extends past end of file (" + std::to_string(in.remaining()) + " bytes remain at offset " +
                  std::to_string(in.pos()) + ")");
        v.array_data = in.here();
        in.skip(bytes);
      }
    } else {
      read_scalar(v.type);
    }
    kv_.push_back(std::move(kv));
  }
  for (size_t i = 0; i < kv_.size(); ++i) kv_index_.emplace(kv_[i].key, i);

  // general.alignment: UINT32, a non-zero power of two.
  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::UINT32)
      in.fail(std::string("metadata key 'general.alignment' has type ") + gguf_type_name(a->type) +
              ", expected UINT32");
    if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0)
      in.fail("metadata key 'general.alignment' = " + std::to_string(a->u64) + " is not a non-zero power of two");
    alignment_ = a->u64;
  }

  // Tensor infos.
  tensors_.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string_view> seen_names;
  for (int64_t i = 0; i < n_tensors; ++i) {
    const std::string_view name =
        in.read_string([&] { return "tensor info #" + std::to_string(i) + ": name"; });
    const auto where = [&] { return "tensor " + quoted(name); };
    if (name.empty()) in.fail("tensor info #" + std::to_string(i) + ": empty name");
    if (name.size() >= kMaxNameBytes)
      in.fail(where() + ": name of " + std::to_string(name.size()) + " bytes is too long (limit " +
              std::to_string(kMaxNameBytes - 1) + ")");
    if (!seen_names.insert(name).second) in.fail(where() + ": duplicate tensor name");

    TensorInfo t;
    t.name.assign(name);
    t.n_dims = in.read<uint32_t>([&] { return where() + ": n_dims"; });
    if (t.n_dims > kMaxDims)
      in.fail(where() + ": n_dims = " + std::to_string(t.n_dims) + " exceeds the maximum of " + std::to_string(kMaxDims));
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = in.read<int64_t>([&] { return where() + ": ne[" + std::to_string(d) + "]"; });
      if (t.ne[d] < 0) in.fail(where() + ": ne[" + std::to_string(d) + "] = " + std::to_string(t.ne[d]) + " is negative");
    }
    const uint32_t type_id = in.read<uint32_t>([&] { return where() + ": type"; });
    const DTypeInfo* info = type_id < static_cast<uint32_t>(kDTypeIdLimit) ? dtype_info(type_id) : nullptr;
    if (!info) {
      const char* known = ggml_type_name(type_id);
      in.fail(where() + ": type id " + std::to_string(type_id) +
              (known ? std::string(" (") + known + ") is not supported" : std::string(" is not a known ggml type")));
    }
    t.type = info->type;
    t.offset = in.read<uint64_t>([&] { return where() + ": data offset"; });

    if (t.ne[0] % info->block_elems != 0)
      in.fail(where() + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " + info->name +
              " block size " + std::to_string(info->block_elems));
    // Element count and byte size, overflow-checked (ne are non-negative here).
    uint64_t elems = 1, row_blocks = static_cast<uint64_t>(t.ne[0]) / info->block_elems, nbytes = 0;
    bool ok = checked_mul(row_blocks, static_cast<uint64_t>(info->block_bytes), &nbytes);
    for (int d = 0; d < 4 && ok; ++d) ok = checked_mul(elems, static_cast<uint64_t>(t.ne[d]), &elems);
    for (int d = 1; d < 4 && ok; ++d) ok = checked_mul(nbytes, static_cast<uint64_t>(t.ne[d]), &nbytes);
    if (!ok || elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      in.fail(where() + ": shape [" + std::to_string(t.ne[0]) + ", " + std::to_string(t.ne[1]) + ", " +
              std::to_string(t.ne[2]) + ", " + std::to_string(t.ne[3]) + "] overflows 64-bit sizes");
    t.nbytes = nbytes;
    if (t.offset % alignment_ != 0)
      in.fail(where() + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
              std::to_string(alignment_));
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);

  // Data section: padded to the alignment, measured from the file start.
  const uint64_t end_of_infos = in.pos();
  uint64_t padded = 0;
  if (!checked_add(end_of_infos, alignment_ - 1, &padded))
    in.fail("data section offset overflows with alignment " + std::to_string(alignment_));
  data_offset_ = padded / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_)
    in.fail("data section starts at offset " + std::to_string(data_offset_) + ", past end of file (size " +
            std::to_string(size_) + ")");
  for (TensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (!checked_add(data_offset_, t.offset, &begin) || !checked_add(begin, t.nbytes, &end) || end > size_)
      in.fail("tensor " + quoted(t.name) + ": data [offset " + std::to_string(t.offset) + ", " +
              std::to_string(t.nbytes) + " bytes] extends past end of file (size " + std::to_string(size_) +
              ", data section at " + std::to_string(data_offset_) + ")");
    t.data = base_ + begin;
  }
}

// ---- lookups --------------------------------------------------------------------------------

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v, const char* expected) {
  std::string actual = gguf_type_name(v.type);
  if (v.is_array()) actual += std::string(" of ") + gguf_type_name(v.elem_type);
  throw ModelFormatError(path + ": key " + std::string(key) + " has type " + actual + ", expected " + expected);
}
[[noreturn]] void missing(const std::string& path, std::string_view key) {
  throw ModelFormatError(path + ": required key " + std::string(key) + " is missing");
}
}  // namespace

std::optional<uint32_t> GgufFile::find_u32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  switch (v->type) {
    case GgufType::UINT8: case GgufType::UINT16: case GgufType::UINT32: return static_cast<uint32_t>(v->u64);
    case GgufType::UINT64:
      if (v->u64 <= std::numeric_limits<uint32_t>::max()) return static_cast<uint32_t>(v->u64);
      throw ModelFormatError(path_ + ": key " + std::string(key) + " = " + std::to_string(v->u64) +
                             " does not fit in UINT32");
    default: wrong_type(path_, key, *v, "UINT32");
  }
}

uint32_t GgufFile::get_u32(std::string_view key) const {
  if (auto v = find_u32(key)) return *v;
  missing(path_, key);
}

std::optional<float> GgufFile::find_f32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::FLOAT32) wrong_type(path_, key, *v, "FLOAT32");
  return static_cast<float>(v->f64);
}

float GgufFile::get_f32(std::string_view key) const {
  if (auto v = find_f32(key)) return *v;
  missing(path_, key);
}

std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) wrong_type(path_, key, *v, "BOOL");
  return v->u64 != 0;
}

std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) wrong_type(path_, key, *v, "STRING");
  return v->str;
}

std::string GgufFile::get_string(std::string_view key) const {
  if (auto v = find_string(key)) return *v;
  missing(path_, key);
}

const std::vector<std::string>* GgufFile::find_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (!v->is_array() || v->elem_type != GgufType::STRING) wrong_type(path_, key, *v, "ARRAY of STRING");
  return &v->strings;
}

}  // namespace edgellm
