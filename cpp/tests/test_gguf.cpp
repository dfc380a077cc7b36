// GgufFile's typed getters (llama.cpp strictness: a key of the wrong type is a format error
// naming the key and both types), lookups, and tensor views, on a file written byte by byte.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "test_util.h"

using namespace edgellm;

namespace {

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void key(const std::string& k, GgufType t) {
    str(k);
    put<uint32_t>(static_cast<uint32_t>(t));
  }
};

std::string write_temp(const std::vector<uint8_t>& data) {
  char name[] = "/tmp/edgellm_test_gguf_XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) std::abort();
  close(fd);
  return name;
}

// Runs f, which must throw ModelFormatError whose message contains `needle`.
template <class F>
bool throws_with(F f, const std::string& needle) {
  try {
    f();
  } catch (const ModelFormatError& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return true;
    std::fprintf(stderr, "message was: %s\n", e.what());
    return false;
  }
  return false;
}

}  // namespace

int main() {
  Bytes f;
  f.b = {'G', 'G', 'U', 'F'};
  f.put<uint32_t>(3);
  f.put<int64_t>(1);  // tensors
  f.put<int64_t>(9);  // pairs
  f.key("a.u32", GgufType::UINT32); f.put<uint32_t>(30);
  f.key("a.u8", GgufType::UINT8); f.put<uint8_t>(7);
  f.key("a.u64_small", GgufType::UINT64); f.put<uint64_t>(123);
  f.key("a.u64_big", GgufType::UINT64); f.put<uint64_t>(uint64_t(1) << 40);
  f.key("a.i32", GgufType::INT32); f.put<int32_t>(-4);
  f.key("a.f32", GgufType::FLOAT32); f.put<float>(1e-5f);
  f.key("a.bool", GgufType::BOOL); f.put<uint8_t>(1);
  f.key("a.name", GgufType::STRING); f.str("llama");
  f.key("a.tokens", GgufType::ARRAY); f.put<uint32_t>(uint32_t(GgufType::STRING)); f.put<uint64_t>(3);
  f.str("<s>"); f.str(""); f.str("hello");
  // tensor "w": F32, ne = {4, 2}, offset 0
  f.str("w"); f.put<uint32_t>(2); f.put<int64_t>(4); f.put<int64_t>(2); f.put<uint32_t>(0); f.put<uint64_t>(0);
  while (f.b.size() % 32) f.b.push_back(0);
  const size_t data_at = f.b.size();
  for (int i = 0; i < 8; ++i) f.put<float>(static_cast<float>(i));

  const std::string path = write_temp(f.b);
  auto g = GgufFile::open(path);
  CHECK(g->version() == 3);
  CHECK(g->alignment() == 32);
  CHECK(g->data_offset() == data_at);
  CHECK(g->metadata().size() == 9);

  CHECK(g->get_u32("a.u32") == 30);
  CHECK(g->get_u32("a.u8") == 7);           // any unsigned type that fits
  CHECK(g->get_u32("a.u64_small") == 123);
  CHECK(throws_with([&] { g->get_u32("a.u64_big"); }, "does not fit"));
  CHECK(throws_with([&] { g->get_u32("a.i32"); }, "key a.i32 has type INT32, expected UINT32"));
  CHECK(throws_with([&] { g->get_u32("a.name"); }, "key a.name has type STRING, expected UINT32"));
  CHECK(throws_with([&] { g->get_u32("a.missing"); }, "a.missing"));
  CHECK(!g->find_u32("a.missing").has_value());
  CHECK(g->get_f32("a.f32") == 1e-5f);
  CHECK(throws_with([&] { g->find_f32("a.u32"); }, "key a.u32 has type UINT32, expected FLOAT32"));
  CHECK(g->find_bool("a.bool") == std::optional<bool>(true));
  CHECK(throws_with([&] { g->find_bool("a.u8"); }, "expected BOOL"));
  CHECK(g->get_string("a.name") == "llama");
  CHECK(throws_with([&] { g->find_string("a.tokens"); }, "has type ARRAY of STRING, expected STRING"));
  const auto* toks = g->find_string_array("a.tokens");
  CHECK(toks && toks->size() == 3 && (*toks)[0] == "<s>" && (*toks)[1].empty() && (*toks)[2] == "hello");
  CHECK(throws_with([&] { g->find_string_array("a.name"); }, "expected ARRAY of STRING"));
  CHECK(g->find_string_array("a.none") == nullptr);

  const TensorInfo* w = g->find_tensor("w");
  CHECK(w != nullptr && g->find_tensor("v") == nullptr);
  CHECK(w->type == DType::F32 && w->n_dims == 2 && w->ne[0] == 4 && w->ne[1] == 2 && w->n_elements() == 8);
  CHECK(w->nbytes == 32 && w->data != nullptr);
  float v5;
  std::memcpy(&v5, w->data + 5 * sizeof(float), sizeof v5);
  CHECK(v5 == 5.0f);

  // The same file cut inside the tensor data: the error names the tensor and the file size.
  std::vector<uint8_t> cut(f.b.begin(), f.b.end() - 4);
  const std::string cut_path = write_temp(cut);
  CHECK(throws_with([&] { GgufFile::open(cut_path); }, "tensor 'w': data [offset 0, 32 bytes] extends past end of file"));
  unlink(cut_path.c_str());

  // The file under a loaded model (issue 39 defect 1, gguf/file_guard.h). Intact; renamed over:
  // "replaced", the mapping still reads the old file.
  CHECK(g->state() == FileState::Intact);
  const std::string other = write_temp(f.b);
  CHECK(rename(other.c_str(), path.c_str()) == 0);
  CHECK(g->state() == FileState::Replaced);
  std::memcpy(&v5, w->data + 5 * sizeof(float), sizeof v5);
  CHECK(v5 == 5.0f);
  g->check_unchanged();  // replaced is not changed: no throw
  // Truncated in place while mapped: a read of its data faults, and the guard turns that into
  // zeros instead of SIGBUS killing the process; the file reads as changed from then on.
  {
    auto h = GgufFile::open(path);
    const TensorInfo* hw = h->find_tensor("w");
    CHECK(truncate(path.c_str(), 0) == 0);
    CHECK(h->state() == FileState::Changed);
    float got = -1;
    std::memcpy(&got, hw->data + 5 * sizeof(float), sizeof got);  // before: SIGBUS
    CHECK(got == 0.0f);
    bool threw = false;
    try {
      h->check_unchanged();
    } catch (const ModelFileChangedError& e) {
      threw = std::string(e.what()).find(kModelFileChanged) != std::string::npos;
    }
    CHECK(threw);
  }
  // Rewritten in place with the same bytes (what `cp` over it does): changed too.
  {
    const int fd0 = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    CHECK(fd0 >= 0 && write(fd0, f.b.data(), f.b.size()) == static_cast<ssize_t>(f.b.size()));
    close(fd0);
    auto h = GgufFile::open(path);
    CHECK(h->state() == FileState::Intact);
    usleep(20000);  // past the file system's timestamp granularity
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, f.b.data(), f.b.size()) == static_cast<ssize_t>(f.b.size()));
    close(fd);
    CHECK(h->state() == FileState::Changed);
  }
  unlink(path.c_str());
  return test_util::report();
}
