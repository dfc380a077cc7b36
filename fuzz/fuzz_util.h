// Shared bits of the libFuzzer harnesses (fuzz/README.md).
//
// Convention: a harness catches only the typed errors the code under test is documented to
// throw for bad input (ModelFormatError, InvalidRequestError). Anything else -- another
// exception type, a crash, a sanitizer report, a broken invariant (FUZZ_CHECK) -- aborts, and
// libFuzzer saves the input as a finding.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace fuzz {

// Reads the input front to back; running out yields zeros / empty strings.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  size_t remaining() const { return n_; }
  uint8_t byte() {
    if (!n_) return 0;
    --n_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(byte()) << (8 * i);
    return v;
  }
  // Bytes up to (not including) the first `sep`, which is consumed; all the rest if absent.
  std::string_view until(uint8_t sep) {
    const void* hit = n_ ? std::memchr(p_, sep, n_) : nullptr;
    const size_t len = hit ? size_t(static_cast<const uint8_t*>(hit) - p_) : n_;
    std::string_view s(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    n_ -= len;
    if (hit) byte();
    return s;
  }
  std::string_view rest() {
    std::string_view s(reinterpret_cast<const char*>(p_), n_);
    p_ += n_;
    n_ = 0;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// A tokenizer from a vocabulary-only GGUF that scripts/fuzz.sh extracts from a real model
// (fuzz/make_vocab.py) into $EDGELLM_FUZZ_VOCAB_DIR (default: fuzz/vocab beside the build).
inline std::unique_ptr<edgellm::Tokenizer> load_tokenizer(const char* name) {
  const char* dir = std::getenv("EDGELLM_FUZZ_VOCAB_DIR");
  std::string path = std::string(dir && *dir ? dir : "build/fuzz/vocab") + "/" + name + ".gguf";
  try {
    return edgellm::Tokenizer::from_gguf(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot load the fuzz vocabulary %s: %s\n(run fuzz/make_vocab.py, or scripts/fuzz.sh)\n",
                 path.c_str(), e.what());
    std::exit(2);
  }
}

}  // namespace fuzz
