// GGUF reader: the input is a whole file. It is written to a memfd and opened through
// /proc/self/fd, so the real path-based, mmap-backed GgufFile::open is what runs. On success
// every metadata value and every byte of every tensor's data range is read (ASan catches a
// range that leaves the mapping), the typed getters are tried on every key, and the vocabulary
// loader and tokenizer construction run on whatever tokenizer.* keys the file has.
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "gguf/gguf_file.h"
#include "tokenizer/vocab.h"

using namespace edgellm;

namespace {

int memfd() {
  static int fd = [] {
    int f = ::memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (f < 0) { std::perror("memfd_create"); std::abort(); }
    return f;
  }();
  return fd;
}

volatile uint64_t g_sink;

void touch_value(const GgufValue& v) {
  uint64_t acc = v.u64 ^ uint64_t(v.i64) ^ v.str.size();
  if (v.is_array()) {
    if (v.elem_type == GgufType::STRING) {
      FUZZ_CHECK(v.strings.size() == v.array_len);
      for (const auto& s : v.strings) acc += s.size() + (s.empty() ? 0 : uint8_t(s.back()));
    } else {
      for (uint64_t i = 0; i < v.array_len; ++i) acc += uint64_t(v.array_number(i) != 0);
    }
  }
  g_sink = g_sink + acc;
}

template <class F>
void typed(F f) {
  try {
    f();
  } catch (const ModelFormatError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd();
  if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, off_t(size)) != 0) std::abort();
  if (size && ::pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);

  std::shared_ptr<GgufFile> f;
  try {
    f = GgufFile::open(path);
  } catch (const ModelFormatError&) {
    return 0;
  }
  FUZZ_CHECK(f->file_size() == size);
  FUZZ_CHECK(f->data_offset() <= size || f->tensors().empty());  // no tensors: no data section needed
  for (const auto& kv : f->metadata()) {
    touch_value(kv.value);
    FUZZ_CHECK(f->find(kv.key) != nullptr);
    typed([&] { (void)f->find_u32(kv.key); });
    typed([&] { (void)f->find_f32(kv.key); });
    typed([&] { (void)f->find_bool(kv.key); });
    typed([&] { (void)f->find_string(kv.key); });
    typed([&] { (void)f->find_string_array(kv.key); });
  }
  const uint8_t* lo = nullptr;
  for (const auto& t : f->tensors()) {
    FUZZ_CHECK(f->find_tensor(t.name) != nullptr);
    FUZZ_CHECK(t.n_dims <= 4);
    FUZZ_CHECK(t.data != nullptr || t.nbytes == 0);
    if (!lo) lo = t.data;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < t.nbytes; i += 61) acc += t.data[i];  // every page, and ...
    if (t.nbytes) acc += t.data[t.nbytes - 1];                     // ... the last byte
    g_sink = g_sink + acc + uint64_t(t.n_elements());
  }
  // The vocabulary loader and tokenizer construction read tokenizer.* from whatever parsed.
  try {
    Vocab v = load_vocab(*f);
    auto tok = Tokenizer::create(std::move(v));
    auto ids = tok->encode("Hello <s> world\n", true, true);
    (void)tok->decode(ids);
  } catch (const ModelFormatError&) {
  } catch (const InvalidRequestError&) {
  }
  return 0;
}
