#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace edgellm::unicode {
namespace {

// The BMP is where nearly all text lives: expand its runs into a flat table once.
struct BmpTable {
  std::vector<uint16_t> f;
  BmpTable() : f(0x10000) {
    for (size_t i = 0; i < kCpRunCount; ++i) {
      uint32_t lo = kCpRuns[i].first;
      if (lo >= 0x10000) break;
      uint32_t hi = i + 1 < kCpRunCount ? std::min<uint32_t>(kCpRuns[i + 1].first, 0x10000) : 0x10000;
      std::fill(f.begin() + lo, f.begin() + hi, kCpRuns[i].flags);
    }
  }
};
const BmpTable& bmp() {
  static const BmpTable t;
  return t;
}

struct ByteTables {
  std::array<std::string, 256> to_text;
  std::vector<int16_t> from_cp = std::vector<int16_t>(512, -1);
  ByteTables() {
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? uint32_t(b) : extra++;
      append_utf8(to_text[b], cp);
      from_cp[cp] = int16_t(b);
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint16_t flags(uint32_t cp) {
  if (cp < 0x10000) return bmp().f[cp];
  if (cp > 0x10FFFF) return 0;
  const CpRun* end = kCpRuns + kCpRunCount;
  const CpRun* it = std::upper_bound(kCpRuns, end, cp, [](uint32_t v, const CpRun& r) { return v < r.first; });
  return (it - 1)->flags;
}

// Returns the codepoint at s[i] and advances i; U+FFFD and one byte for malformed input.
static uint32_t next_cp(std::string_view s, size_t& i) {
  const uint8_t b0 = uint8_t(s[i]);
  if (b0 < 0x80) { ++i; return b0; }
  size_t len = utf8_len(b0);
  if (len == 1 || i + len > s.size()) { ++i; return kReplacement; }
  uint32_t cp = b0 & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) {
    uint8_t b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) { ++i; return kReplacement; }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += len;
  return cp;
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, i));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Only the last three bytes can start an unfinished sequence.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t b = uint8_t(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    size_t len = (b >= 0xC0 && b < 0xF8) ? utf8_len(b) : 1;
    if (len > back) {
      // Unfinished only if every byte after the lead is a continuation byte.
      for (size_t k = n - back + 1; k < n; ++k)
        if ((uint8_t(s[k]) & 0xC0) != 0x80) return n;
      return n - back;
    }
    return n;
  }
  return n;
}

const std::string& byte_to_unicode(uint8_t b) { return byte_tables().to_text[b]; }

int unicode_to_byte(uint32_t cp) {
  const auto& t = byte_tables().from_cp;
  return cp < t.size() ? t[cp] : -1;
}

}  // namespace edgellm::unicode
