// GGUF reader: memory-maps the file, parses and validates the header, metadata and tensor
// table, and hands out zero-copy views of tensor data. The mapping is guarded against the file
// changing under it (gguf/file_guard.h, state()). Every count, length, offset and size is
// checked against the file size; nothing is ever read outside the mapping. Malformed input
// throws ModelFormatError naming the key or tensor at fault.
//
// Split models (llama.cpp's gguf-split and convert_hf_to_gguf.py --split-max-*: files
// NAME-00001-of-0000N.gguf with keys split.no / split.count / split.tensors.count) open from
// their first shard, as llama.cpp takes them: open() finds the other shards by the same naming,
// maps each, and presents one file whose tensor table is the union of theirs (each tensor's
// `data` in its own shard's mapping). Metadata is the first shard's. A missing, unreadable or
// mismatched shard throws ModelShardError naming it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"

namespace edgellm {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars live in the fields below; arrays of numbers are zero-copy views
// into the mapping (`array_data`, `array_len` elements of `elem_type`); arrays of strings are
// decoded into `strings`.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // for ARRAY
  uint64_t u64 = 0;                      // unsigned integers and bool
  int64_t i64 = 0;                       // signed integers
  double f64 = 0;                        // floats
  std::string str;                       // STRING
  const uint8_t* array_data = nullptr;   // numeric ARRAY payload
  uint64_t array_len = 0;                // ARRAY element count (strings too)
  std::vector<std::string> strings;      // ARRAY of STRING

  bool is_array() const { return type == GgufType::ARRAY; }
  // Numeric array element i converted (bounds-checked by the caller: i < array_len).
  double array_number(uint64_t i) const;
};

// A split model's shard that is missing or does not belong (wrong split.no / split.count,
// a tensor twice, a tensor count that disagrees with split.tensors.count), or a shard other
// than the first given to open(). Python: edgellm.ModelShardError (a ModelFormatError).
struct ModelShardError : ModelFormatError {
  ModelShardError(const std::string& shard_path, const std::string& what) : ModelFormatError(what), shard(shard_path) {}
  std::string shard;  // the shard at fault
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

struct TensorInfo {
  std::string name;
  DType type;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is the contiguous dimension
  uint64_t offset = 0;           // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // inside the mapping, alignment-checked
  uint32_t shard = 0;             // which shard of a split model holds it (0: the first / only file)
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Whether a mapped file is still what was loaded (GgufFile::state). Intact: the path names the
// mapped file, unchanged. Replaced: the path now names another file or none (renamed over,
// deleted); the mapping still reads the old one, intact, but a reload would load something else.
// Changed: the mapped file itself was truncated or rewritten in place (its size or mtime
// differ, or a read of it faulted: gguf/file_guard.h): what is read from it is not the model.
enum class FileState { Intact, Replaced, Changed };
const char* file_state_name(FileState s);

class GgufFile {
 public:
  // Maps and validates `path`, and the other shards when it is the first of a split model.
  // Throws ModelFormatError (or std::system_error-free: I/O failures are ModelFormatError too,
  // naming the path); ModelShardError for a shard missing or mismatched.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  // A split model's shards, the first included (1 for a plain file), and their bytes together.
  uint32_t shard_count() const { return 1 + static_cast<uint32_t>(shards_.size()); }
  std::vector<std::string> shard_paths() const;
  uint64_t total_size() const;          // every shard's file size
  uint64_t total_header_bytes() const;  // every shard's header (bytes before its data section)

  const std::vector<GgufKV>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed access with llama.cpp's strictness: a key of the wrong GGUF type throws
  // ModelFormatError("key X has type T, expected U"). get_* throw when the key is missing;
  // find_* return nullopt. Unsigned getters accept any unsigned integer type that fits.
  std::optional<uint32_t> find_u32(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  float get_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  const std::vector<std::string>* find_string_array(std::string_view key) const;

  // The mapped file's state now (one fstat and one stat a shard; safe from any thread): the
  // worst of the shards'.
  FileState state() const;
  // Throws ModelFileChangedError (naming the path) when state() is Changed (one fstat).
  void check_unchanged() const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent

 private:
  GgufFile() = default;
  static std::shared_ptr<GgufFile> open_one(const std::string& path);
  void open_shards();
  void parse();
  bool changed() const;

  std::string path_;
  int fd_ = -1;         // kept open: fstat tells an in-place change of the mapped file
  int guard_ = -1;      // the mapping's file_guard registration
  uint64_t dev_ = 0, ino_ = 0;
  int64_t mtime_ns_ = 0;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kv_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> kv_index_;      // key -> index in kv_
  std::unordered_map<std::string, size_t> tensor_index_;  // name -> index in tensors_
  std::vector<std::shared_ptr<GgufFile>> shards_;         // a split model's shards 2..N
};

}  // namespace edgellm
