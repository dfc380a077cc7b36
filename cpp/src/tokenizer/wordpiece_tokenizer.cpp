// WordPiece (tokenizer.ggml.model = "bert"), ids identical to Hugging Face `tokenizers` with
// BertNormalizer + BertPreTokenizer + WordPiece on the same vocabulary:
//   normalize  clean_text (drop NUL, U+FFFD and category C* except \t\n\r; whitespace -> ' '),
//              handle_chinese_chars (' ' around each CJK ideograph), strip_accents (NFD, then
//              drop nonspacing marks; on when lowercasing unless the file says otherwise),
//              lowercase (full Unicode lowercase mapping)
//   split      on whitespace (dropped) and punctuation (each its own word: ASCII punctuation
//              and category P*)
//   wordpiece  a word of more than 100 characters is [UNK]; else greedy longest match from the
//              left, continuation pieces "##x"; a word with an unmatched rest is [UNK] whole.
// Where llama.cpp's WPM differs (Hangul syllables decomposed to jamo, combining marks, long
// words), this follows `tokenizers`. The vocabulary is llama.cpp's "phantom space" layout: a
// word-initial piece is stored as "\u2581piece", a continuation as "piece" (without "##"),
// control tokens unchanged.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece_tables.h"

namespace edgellm {
namespace wordpiece {
namespace {

uint8_t kind_of(uint32_t cp) {
  size_t lo = 0, hi = kKindRunCount;  // last run with first <= cp
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    (kKindRuns[mid].first <= cp ? lo : hi) = mid;
  }
  return cp > 0x10FFFF ? kOther : kKindRuns[lo].kind;
}

const CpMap* find_map(const CpMap* table, size_t n, uint32_t cp) {
  const CpMap* end = table + n;
  const CpMap* it = std::lower_bound(table, end, cp, [](const CpMap& m, uint32_t c) { return m.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

bool is_space(uint32_t cp) { return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || (kind_of(cp) & kSpace); }
bool is_punct(uint32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
    return true;
  return kind_of(cp) & kPunct;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7, kTCount = 28,
                     kNCount = 588, kSCount = 11172;
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V (T)
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const CpMap* m = find_map(kDecomp, kDecompCount, cp)) {
    out.insert(out.end(), kDecompPool + m->offset, kDecompPool + m->offset + m->length);
    return;
  }
  out.push_back(cp);
}

}  // namespace

std::vector<uint32_t> normalize(std::string_view text, bool lowercase, bool strip_accents) {
  std::vector<uint32_t> out, tmp;
  out.reserve(text.size() + 8);
  for (uint32_t cp : unicode::decode_utf8(text)) {
    const uint8_t k = kind_of(cp);
    if (cp == 0 || cp == unicode::kReplacement) continue;
    if (is_space(cp)) {
      out.push_back(' ');
      continue;
    }
    if (k & kOther) continue;
    if (k & kCjk) {
      out.insert(out.end(), {' ', cp, ' '});
      continue;
    }
    tmp.clear();
    if (strip_accents) {
      decompose(cp, tmp);
      tmp.erase(std::remove_if(tmp.begin(), tmp.end(), [](uint32_t c) { return kind_of(c) & kMn; }), tmp.end());
    } else {
      tmp.push_back(cp);
    }
    for (uint32_t c : tmp) {
      const CpMap* m = lowercase ? find_map(kLower, kLowerCount, c) : nullptr;
      if (m) out.insert(out.end(), kLowerPool + m->offset, kLowerPool + m->offset + m->length);
      else out.push_back(c);
    }
  }
  return out;
}

}  // namespace wordpiece

namespace {

constexpr size_t kMaxWordChars = 100;  // tokenizers' WordPiece max_input_chars_per_word

class WordPieceTokenizer final : public Tokenizer {
 public:
  explicit WordPieceTokenizer(Vocab v) : Tokenizer(std::move(v)) {}

 protected:
  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    const std::vector<uint32_t> cps = wordpiece::normalize(text, vocab_.wpm_lowercase, vocab_.wpm_strip_accents);
    std::vector<uint32_t> word;
    auto flush = [&] {
      if (!word.empty()) encode_word(word, out);
      word.clear();
    };
    for (uint32_t cp : cps) {
      if (wordpiece::is_space(cp)) {
        flush();
      } else if (wordpiece::is_punct(cp)) {
        flush();
        word.push_back(cp);
        flush();
      } else {
        word.push_back(cp);
      }
    }
    flush();
  }

 private:
  void encode_word(const std::vector<uint32_t>& w, std::vector<int32_t>& out) const {
    if (w.size() > kMaxWordChars) {
      out.push_back(vocab_.unk);
      return;
    }
    const size_t first = out.size();
    std::string piece;
    for (size_t start = 0; start < w.size();) {
      int32_t id = kNoToken;
      size_t end = w.size();
      for (; end > start; --end) {
        piece = start == 0 ? "\xE2\x96\x81" : "";
        for (size_t i = start; i < end; ++i) unicode::append_utf8(piece, w[i]);
        id = vocab_.find(piece);
        if (id != kNoToken) break;
      }
      if (id == kNoToken) {
        out.resize(first);
        out.push_back(vocab_.unk);
        return;
      }
      out.push_back(id);
      start = end;
    }
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab) {
  return std::unique_ptr<Tokenizer>(new WordPieceTokenizer(std::move(vocab)));
}

}  // namespace edgellm
