// Unicode facts of Hugging Face's BertNormalizer / BertPreTokenizer (generated tables:
// scripts/gen_wordpiece_tables.py -> wordpiece_tables.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace edgellm::wordpiece {

enum Kind : uint8_t {
  kOther = 1,   // general category C* (clean_text drops it unless it is whitespace)
  kSpace = 2,   // White_Space (Rust's char::is_whitespace)
  kPunct = 4,   // general category P* (ASCII punctuation is added by the tokenizer)
  kMn = 8,      // nonspacing mark (strip_accents drops it after NFD)
  kCjk = 16,    // handle_chinese_chars' ideograph ranges
};

struct KindRun {
  uint32_t first;
  uint8_t kind;
};
struct CpMap {
  uint32_t cp;
  uint32_t offset, length;  // into the table's pool
};

extern const KindRun kKindRuns[];
extern const size_t kKindRunCount;
extern const uint32_t kDecompPool[];
extern const CpMap kDecomp[];  // canonical decompositions (full, NFD), sorted; Hangul not listed
extern const size_t kDecompCount;
extern const uint32_t kLowerPool[];
extern const CpMap kLower[];  // full lowercase mappings, sorted
extern const size_t kLowerCount;

}  // namespace edgellm::wordpiece
