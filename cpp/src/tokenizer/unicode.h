// Unicode facts the tokenizers need: UTF-8 decoding that never fails (invalid bytes become
// U+FFFD, as llama.cpp does), codepoint category flags from generated tables, and GPT-2's
// byte <-> printable-codepoint mapping used by byte-level BPE vocabularies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::unicode {

// Category bits (one of the first eight is set per codepoint) plus the White_Space property.
enum CpFlags : uint16_t {
  kUndefined = 1, kNumber = 2, kLetter = 4, kSeparator = 8, kMark = 16, kPunct = 32,
  kSymbol = 64, kControl = 128, kWhitespace = 256,
};

struct CpRun {
  uint32_t first;
  uint16_t flags;
};
extern const CpRun kCpRuns[];
extern const size_t kCpRunCount;

// Flags of a codepoint (0 for values above U+10FFFF).
uint16_t flags(uint32_t cp);

constexpr uint32_t kReplacement = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes).
inline size_t utf8_len(uint8_t lead) {
  static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[lead >> 4];
}

// Decodes the whole string; malformed sequences yield one U+FFFD per offending byte.
std::vector<uint32_t> decode_utf8(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end);

// Number of leading bytes of `s` that form complete UTF-8 characters (valid or not: an
// invalid byte counts as complete). A truncated but so-far-valid trailing sequence is excluded.
size_t complete_utf8_prefix(std::string_view s);

// GPT-2 byte-level mapping: every byte to a printable codepoint, UTF-8 encoded.
const std::string& byte_to_unicode(uint8_t b);
// Inverse; returns -1 for codepoints that are not in the table.
int unicode_to_byte(uint32_t cp);

}  // namespace edgellm::unicode
