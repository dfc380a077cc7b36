// Unigram (tokenizer.ggml.model = "t5": XLM-RoBERTa, multilingual-e5, bge-m3), ids identical to
// Hugging Face `tokenizers` with the pipeline the hub's XLM-R tokenizer.json files carry:
//   Precompiled  SentencePiece's charsmap (tokenizer.ggml.precompiled_charsmap: a XOR-compressed
//                double array over byte strings, then NUL-terminated replacements), applied as
//                `tokenizers` applies it: per extended grapheme cluster — a cluster under 6 bytes
//                is replaced whole by the replacement of the SHORTEST charsmap key it starts with
//                (so "Ａ\u0301" becomes "A": the mark is dropped); otherwise (or without a key)
//                each codepoint is replaced by its own key's replacement, or kept
//   Replace      runs of 2+ spaces -> one space
//   Metaspace    ' ' -> U+2581, U+2581 prepended when the text does not start with one, split
//                before every U+2581
//   Unigram      per piece, the Viterbi path of highest summed score over vocabulary pieces
//                (normal, user-defined at score 0, unused); a codepoint no piece starts with is
//                [UNK] at min score - 10, and consecutive [UNK]s fuse into one
// Each raw fragment between special tokens runs the whole pipeline (as `tokenizers` runs its
// normalizer and pre-tokenizer per split of the added-token pass). llama.cpp's UGM differs
// (longest charsmap match over codepoints, whitespace trimmed at both ends): `tokenizers` wins.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <optional>

#include "common/errors.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace edgellm {
namespace {

constexpr char kMeta[] = "\xE2\x96\x81";  // U+2581

// The charsmap's double array (llama.cpp's xcda_array_view; spm_precompiled's DoubleArray).
class Charsmap {
 public:
  explicit Charsmap(const std::string& blob) {
    if (blob.empty()) return;
    uint32_t n = 0;
    if (blob.size() < 4) throw ModelFormatError("tokenizer.ggml.precompiled_charsmap is shorter than its header");
    std::memcpy(&n, blob.data(), 4);
    if (n % 4 || size_t(n) + 4 > blob.size())
      throw ModelFormatError("tokenizer.ggml.precompiled_charsmap: double-array size " + std::to_string(n) +
                             " does not fit the " + std::to_string(blob.size()) + "-byte blob");
    units_.resize(n / 4);
    std::memcpy(units_.data(), blob.data() + 4, n);
    strings_ = blob.substr(4 + size_t(n));
  }
  bool empty() const { return units_.empty(); }

  // The replacement of the shortest key `chunk` starts with, as `tokenizers`' Precompiled takes it.
  std::optional<std::string_view> shortest(std::string_view chunk) const {
    if (units_.empty()) return std::nullopt;
    size_t node = offset(unit(0));
    for (unsigned char c : chunk) {
      if (c == 0) break;
      node ^= c;
      const uint32_t u = unit(node);
      if ((u & ((1u << 31) | 0xFFu)) != c) return std::nullopt;  // label
      node ^= offset(u);
      if ((u >> 8) & 1) {  // has a leaf: its value is the replacement's offset
        const size_t at = unit(node) & ((1u << 31) - 1);
        if (at >= strings_.size()) throw ModelFormatError("tokenizer.ggml.precompiled_charsmap: replacement offset out of range");
        const size_t end = strings_.find('\0', at);
        if (end == std::string::npos) throw ModelFormatError("tokenizer.ggml.precompiled_charsmap: unterminated replacement");
        return std::string_view(strings_).substr(at, end - at);
      }
    }
    return std::nullopt;
  }

 private:
  uint32_t unit(size_t i) const {
    if (i >= units_.size()) throw ModelFormatError("tokenizer.ggml.precompiled_charsmap: double-array index out of range");
    return units_[i];
  }
  static size_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  std::vector<uint32_t> units_;
  std::string strings_;
};

// ---- extended grapheme clusters (UAX #29), as far as the < 6-byte rule can see them --------

bool is_extend(uint32_t cp) {
  return (unicode::flags(cp) & unicode::kMark) || cp == 0x200C || cp == 0x200D || (cp >= 0x1F3FB && cp <= 0x1F3FF) ||
         (cp >= 0xE0020 && cp <= 0xE007F) || cp == 0xFF9E || cp == 0xFF9F;
}
bool is_gb_control(uint32_t cp) {
  if (cp == '\r' || cp == '\n' || cp == 0x2028 || cp == 0x2029) return true;
  if (cp == 0x200C || cp == 0x200D) return false;
  if ((cp >= 0xE000 && cp <= 0xF8FF) || cp >= 0xF0000) return false;  // private use is "Any"
  return (unicode::flags(cp) & unicode::kControl) != 0;
}
enum Hangul { kNotHangul, kL, kV, kT, kLV, kLVT };
Hangul hangul(uint32_t cp) {
  if ((cp >= 0x1100 && cp <= 0x115F) || (cp >= 0xA960 && cp <= 0xA97C)) return kL;
  if ((cp >= 0x1160 && cp <= 0x11A7) || (cp >= 0xD7B0 && cp <= 0xD7C6)) return kV;
  if ((cp >= 0x11A8 && cp <= 0x11FF) || (cp >= 0xD7CB && cp <= 0xD7FB)) return kT;
  if (cp >= 0xAC00 && cp <= 0xD7A3) return (cp - 0xAC00) % 28 == 0 ? kLV : kLVT;
  return kNotHangul;
}
bool is_pictographic(uint32_t cp) { return (cp >= 0x1F000 && cp <= 0x1FAFF) || (cp >= 0x2600 && cp <= 0x27BF); }
bool is_regional(uint32_t cp) { return cp >= 0x1F1E6 && cp <= 0x1F1FF; }

// Does a cluster that ends with `prev` (and holds `ri` regional indicators, `pict` an
// Extended_Pictographic start) continue with `cp`?
bool joins(uint32_t prev, uint32_t cp, int ri, bool pict) {
  if (prev == '\r' && cp == '\n') return true;                  // GB3
  if (is_gb_control(prev) || is_gb_control(cp)) return false;   // GB4, GB5
  const Hangul a = hangul(prev), b = hangul(cp);                // GB6-8
  if (a == kL && (b == kL || b == kV || b == kLV || b == kLVT)) return true;
  if ((a == kLV || a == kV) && (b == kV || b == kT)) return true;
  if ((a == kLVT || a == kT) && b == kT) return true;
  if (is_extend(cp)) return true;                               // GB9, GB9a
  if (prev == 0x200D && pict && is_pictographic(cp)) return true;  // GB11
  if (is_regional(prev) && is_regional(cp)) return ri % 2 == 1;    // GB12-13
  return false;
}

class UnigramTokenizer final : public Tokenizer {
 public:
  explicit UnigramTokenizer(Vocab v) : Tokenizer(std::move(v)), charsmap_(vocab_.precompiled_charsmap) {
    double lo = DBL_MAX;
    for (int32_t id = 0; id < vocab_.n_tokens(); ++id) {
      const uint32_t a = vocab_.attrs[id];
      if (a & kAttrNormal) lo = std::min(lo, double(score(id)));
      if (a & (kAttrNormal | kAttrUserDefined | kAttrUnused))
        max_piece_ = std::max(max_piece_, vocab_.tokens[id].size());
    }
    unk_score_ = (lo == DBL_MAX ? 0.0 : lo) - 10.0;
    if (vocab_.unk == kNoToken) throw ModelFormatError("a unigram vocabulary needs an unknown token (tokenizer.ggml.unknown_token_id)");
  }

 protected:
  void encode_fragment(std::string_view raw, bool, std::vector<int32_t>& out) const override {
    const std::string text = metaspace(collapse_spaces(precompiled(raw)));
    // Split before every U+2581 (Metaspace's MergedWithNext), a Viterbi pass per piece.
    size_t begin = 0;
    for (size_t i = 3; i <= text.size(); ++i) {
      if (i == text.size() || text.compare(i, 3, kMeta) == 0) {
        viterbi(std::string_view(text).substr(begin, i - begin), out);
        begin = i;
      }
    }
  }

 private:
  float score(int32_t id) const { return size_t(id) < vocab_.scores.size() ? vocab_.scores[id] : 0.0f; }

  std::string precompiled(std::string_view raw) const {
    const std::vector<uint32_t> cps = unicode::decode_utf8(raw);
    if (charsmap_.empty()) return unicode::encode_utf8(cps, 0, cps.size());
    std::string out;
    out.reserve(raw.size() + 8);
    std::string cluster, part;
    for (size_t i = 0; i < cps.size();) {
      size_t j = i + 1;
      int ri = is_regional(cps[i]) ? 1 : 0;
      const bool pict = is_pictographic(cps[i]);
      while (j < cps.size() && joins(cps[j - 1], cps[j], ri, pict)) ri += is_regional(cps[j++]) ? 1 : 0;
      cluster = unicode::encode_utf8(cps, i, j);
      std::optional<std::string_view> whole;
      if (cluster.size() < 6) whole = charsmap_.shortest(cluster);
      if (whole) {
        out.append(*whole);
      } else {
        for (size_t k = i; k < j; ++k) {
          part = unicode::encode_utf8(cps, k, k + 1);
          if (auto r = charsmap_.shortest(part)) out.append(*r);
          else out.append(part);
        }
      }
      i = j;
    }
    return out;
  }

  static std::string collapse_spaces(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i)
      if (!(s[i] == ' ' && i > 0 && s[i - 1] == ' ')) out += s[i];
    return out;
  }

  static std::string metaspace(const std::string& s) {
    std::string out;
    if (s.empty()) return out;
    out.reserve(s.size() + 16);
    if (s.rfind(kMeta, 0) != 0 && s[0] != ' ') out += kMeta;
    for (char c : s) {
      if (c == ' ') out += kMeta;
      else out += c;
    }
    return out;
  }

  void viterbi(std::string_view s, std::vector<int32_t>& out) const {
    if (s.empty()) return;
    struct Best {
      int32_t id = kNoToken;
      size_t from = 0;
      double score = 0;
    };
    std::vector<Best> best(s.size() + 1);
    best[0].id = vocab_.unk;  // the start: reached, score 0
    std::string key;
    for (size_t at = 0; at < s.size();) {
      const size_t len1 = std::min(unicode::utf8_len(uint8_t(s[at])), s.size() - at);
      const double here = best[at].score;
      bool single = false;
      for (size_t n = len1; n <= max_piece_ && at + n <= s.size(); ++n) {
        if (at + n < s.size() && (uint8_t(s[at + n]) & 0xC0) == 0x80) continue;  // mid-character
        key.assign(s.data() + at, n);
        const int32_t id = vocab_.find(key);
        if (id == kNoToken || !(vocab_.attrs[id] & (kAttrNormal | kAttrUserDefined | kAttrUnused))) continue;
        const double cand = here + ((vocab_.attrs[id] & kAttrUserDefined) ? 0.0 : double(score(id)));
        Best& b = best[at + n];
        if (b.id == kNoToken || cand > b.score) b = {id, at, cand};
        if (n == len1) single = true;
      }
      if (!single) {
        const double cand = here + unk_score_;
        Best& b = best[at + len1];
        if (b.id == kNoToken || cand > b.score) b = {vocab_.unk, at, cand};
      }
      at += len1;
    }
    const size_t first = out.size();
    for (size_t at = s.size(); at > 0; at = best[at].from) {
      const int32_t id = best[at].id;
      if (!(id == vocab_.unk && out.size() > first && out.back() == vocab_.unk)) out.push_back(id);
    }
    std::reverse(out.begin() + long(first), out.end());
  }

  Charsmap charsmap_;
  size_t max_piece_ = 0;
  double unk_score_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_unigram_tokenizer(Vocab vocab) {
  return std::make_unique<UnigramTokenizer>(std::move(vocab));
}

}  // namespace edgellm
