#include "tokenizer/pretokenizer.h"

#include "common/errors.h"
#include "tokenizer/unicode.h"

namespace edgellm {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunct;
using unicode::kWhitespace;

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// One fragment [begin, end) of the codepoint array; helpers return 0 flags / kOutOfRange
// outside it, exactly like llama.cpp's _get_flags/_get_cpt.
struct Span {
  const std::vector<uint32_t>& cps;
  const std::vector<uint16_t>& fl;
  size_t begin, end;
  uint32_t cp(size_t i) const { return i >= begin && i < end ? cps[i] : kOutOfRange; }
  uint16_t f(size_t i) const { return i >= begin && i < end ? fl[i] : 0; }
};

inline bool is_ws(uint16_t f) { return f & kWhitespace; }
inline bool is_l(uint16_t f) { return f & kLetter; }
inline bool is_n(uint16_t f) { return f & kNumber; }
inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// The English contractions 's 't 're 've 'm 'll 'd at `pos` (which holds the apostrophe):
// their length in code points, 0 when none starts there. `any_case`: (?i:...) as llama3's.
size_t contraction_len(const Span& s, size_t pos, bool any_case) {
  auto at = [&](size_t i) { return any_case ? ascii_lower(s.cp(i)) : s.cp(i); };
  if (pos + 1 >= s.end) return 0;
  const uint32_t n1 = at(pos + 1);
  if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
  if (pos + 2 >= s.end) return 0;
  const uint32_t n2 = at(pos + 2);
  if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
  return 0;
}

// Which alternative a split tries first at each position: none, or the English contractions
// ('s|'t|'re|'ve|'m|'ll|'d) as written or (?i:...) as llama3's.
enum class Contractions { None, Cased, AnyCase };

// A split's step (the lambda it hands split_words) is always inlined into the loop, even where
// the split itself is inlined twice (llama3 and qwen2): an outlined step keeps `pos` in memory
// (measured: +0.7% instructions tokenizing 1 MB with Qwen2.5).
#define EDGELLM_STEP __attribute__((always_inline))

// One regex split over the fragment, alternatives tried in order at each position (the first that
// matches gives the next word): the contractions as `first` says, then
// `rest(pos, cp(pos), f(pos), add)`, which moves pos past what it matched and closes each word it
// ends there with add(end) (a run may make several words).
template <class Rest>
inline void split_words(const Span& s, Contractions first, std::vector<size_t>& out, Rest&& rest) {
  size_t pos = s.begin, prev = s.begin;
  auto add = [&](size_t end) { if (end > prev) out.push_back(end - prev); prev = end; };
  while (pos < s.end) {
    const uint32_t c = s.cp(pos);
    if (c == '\'' && first != Contractions::None) {
      const size_t n = contraction_len(s, pos, first == Contractions::AnyCase);
      if (n) { pos += n; add(pos); continue; }
    }
    rest(pos, c, s.f(pos), add);
  }
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Span& s, std::vector<size_t>& out) {
  split_words(s, Contractions::Cased, out, [&](size_t& pos, uint32_t c, uint16_t fc, const auto& add) EDGELLM_STEP {
    uint16_t f2 = c == ' ' ? s.f(pos + 1) : fc;
    if (is_l(f2)) {
      pos += (c == ' ');
      while (is_l(s.f(pos))) ++pos;
      add(pos);
      return;
    }
    if (is_n(f2)) {
      pos += (c == ' ');
      while (is_n(s.f(pos))) ++pos;
      add(pos);
      return;
    }
    if (!(is_ws(f2) || is_l(f2) || is_n(f2)) && f2) {
      pos += (c == ' ');
      while (true) {
        uint16_t g = s.f(pos);
        if ((is_ws(g) || is_l(g) || is_n(g)) || !g) break;
        ++pos;
      }
      add(pos);
      return;
    }
    size_t nws = 0;
    while (is_ws(s.f(pos + nws))) ++nws;
    if (nws > 1 && s.cp(pos + nws) != kOutOfRange) { pos += nws - 1; add(pos); return; }
    if (nws > 0) { pos += nws; add(pos); return; }
    add(++pos);
  });
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Span& s, size_t max_digits, std::vector<size_t>& out) {
  split_words(s, Contractions::AnyCase, out, [&](size_t& pos, uint32_t c, uint16_t fc, const auto& add) EDGELLM_STEP {
    if (!(c == '\r' || c == '\n' || is_n(fc))) {
      if (is_l(fc) || is_l(s.f(pos + 1))) {
        ++pos;
        while (is_l(s.f(pos))) ++pos;
        add(pos);
        return;
      }
    }
    if (is_n(fc)) {
      size_t ini = pos;
      while (is_n(s.f(pos))) {
        if (++pos - ini >= max_digits) { add(pos); ini = pos; }
      }
      add(pos);
      return;
    }
    uint16_t f2 = c == ' ' ? s.f(pos + 1) : fc;
    if (!(is_ws(f2) || is_l(f2) || is_n(f2)) && fc) {
      pos += (c == ' ');
      while (true) {
        uint16_t g = s.f(pos);
        if ((is_ws(g) || is_l(g) || is_n(g)) || !g) break;
        ++pos;
      }
      uint32_t c2 = s.cp(pos);
      while (c2 == '\r' || c2 == '\n') c2 = s.cp(++pos);
      add(pos);
      return;
    }
    size_t nws = 0, last_rn = 0;
    while (is_ws(s.f(pos + nws))) {
      uint32_t c2 = s.cp(pos + nws);
      if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
      ++nws;
    }
    if (last_rn > 0) { pos = last_rn; add(pos); return; }
    if (nws > 1 && s.cp(pos + nws) != kOutOfRange) { pos += nws - 1; add(pos); return; }
    if (nws > 0) { pos += nws; add(pos); return; }
    add(++pos);
  });
}

// The gpt-4o (o200k) split, as llama.cpp runs it: its std::regex over the "collapsed" text,
// where ASCII keeps ASCII meaning and any other character stands for its class only, so a
// non-ASCII letter is both "not a-z" and "not A-Z" (upper- and lower-case at once):
//   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|...)?
//  |[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|...)?
//  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Alternatives are tried in order (the first that matches wins); within one, greedy runs give
// back characters as a backtracking engine does.
void split_gpt4o(const Span& s, std::vector<size_t>& out) {
  auto in = [&](size_t i) { return i >= s.begin && i < s.end; };
  auto ws = [&](size_t i) {
    if (!in(i)) return false;
    const uint32_t c = s.cps[i];
    return c < 128 ? (c == ' ' || (c >= '\t' && c <= '\r')) : (s.fl[i] & kWhitespace) != 0;
  };
  auto letter = [&](size_t i) {
    if (!in(i)) return false;
    const uint32_t c = s.cps[i];
    return c < 128 ? ((c | 32) >= 'a' && (c | 32) <= 'z') : !ws(i) && (s.fl[i] & kLetter);
  };
  auto number = [&](size_t i) {
    if (!in(i)) return false;
    const uint32_t c = s.cps[i];
    return c < 128 ? (c >= '0' && c <= '9') : !ws(i) && (s.fl[i] & kNumber);
  };
  auto other = [&](size_t i) { return in(i) && !ws(i) && !letter(i) && !number(i); };
  auto upper = [&](size_t i) { return letter(i) && !(s.cps[i] >= 'a' && s.cps[i] <= 'z'); };
  auto lower = [&](size_t i) { return letter(i) && !(s.cps[i] >= 'A' && s.cps[i] <= 'Z'); };
  auto newline = [&](size_t i) { return in(i) && (s.cps[i] == '\r' || s.cps[i] == '\n'); };
  split_words(s, Contractions::None, out, [&](size_t& pos, uint32_t c, uint16_t, const auto& add) EDGELLM_STEP {
    // the two word alternatives: an optional prefix character, then letters
    const size_t q = (c == '\r' || c == '\n' || letter(pos) || number(pos)) ? pos : pos + 1;
    if (letter(q)) {
      size_t r = q;
      while (upper(r)) ++r;
      size_t end = 0;
      for (size_t k = r + 1; k-- > q;) {  // "upper"* gives back until "lower"+ matches
        size_t e = k;
        while (lower(e)) ++e;
        if (e > k) { end = e; break; }
      }
      if (end == 0) {  // second alternative: "upper"+ "lower"*
        end = r;
        while (lower(end)) ++end;
      }
      if (s.cp(end) == '\'') end += contraction_len(s, end, true);
      pos = end;
      add(pos);
      return;
    }
    if (number(pos)) {
      size_t n = 0;
      while (n < 3 && number(pos + n)) ++n;
      pos += n;
      add(pos);
      return;
    }
    const size_t p2 = (c == ' ' && other(pos + 1)) ? pos + 1 : pos;
    if (other(p2)) {
      pos = p2;
      while (other(pos)) ++pos;
      while (newline(pos) || s.cp(pos) == '/') ++pos;
      add(pos);
      return;
    }
    size_t nws = 0, last_rn = 0;
    while (ws(pos + nws)) {
      if (newline(pos + nws)) last_rn = pos + nws + 1;
      ++nws;
    }
    if (last_rn > 0) { pos = last_rn; add(pos); return; }
    if (nws > 1 && in(pos + nws)) { pos += nws - 1; add(pos); return; }
    if (nws > 0) { pos += nws; add(pos); return; }
    add(++pos);
  });
}

// Character classes as llama.cpp's std::regex path sees them: ASCII characters keep ASCII
// semantics (every printable non-alphanumeric ASCII character counts as \p{P}), others use
// their Unicode category.
inline bool collapsed_number(uint32_t c, uint16_t f) {
  if (c < 128) return c >= '0' && c <= '9';
  return !(f & kWhitespace) && (f & kNumber);
}
inline bool collapsed_punct(uint32_t c, uint16_t f) {
  if (c < 128) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                      (c >= 0x7B && c <= 0x7E);
  return !(f & kWhitespace) && (f & kPunct);
}

// A regex that matches maximal-or-bounded runs of one class: `\p{N}` (run 1), `\p{N}+`,
// `[\p{P}$+<=>^~|]+`, `[0-9][0-9][0-9]` (exactly 3). Unmatched gaps are kept as words.
template <class Pred>
void split_runs(const Span& s, Pred in_class, size_t min_len, size_t max_len, std::vector<size_t>& out) {
  size_t prev = s.begin, pos = s.begin;
  while (pos < s.end) {
    if (!in_class(s.cps[pos], s.fl[pos])) { ++pos; continue; }
    size_t run = 0;
    while (pos + run < s.end && run < max_len && in_class(s.cps[pos + run], s.fl[pos + run])) ++run;
    if (run < min_len) { ++pos; continue; }
    if (pos > prev) out.push_back(pos - prev);
    out.push_back(run);
    pos += run;
    prev = pos;
  }
  if (s.end > prev) out.push_back(s.end - prev);
}

enum class Rx { Gpt2, Llama3, Qwen2, Gpt4o, NumberEach, NumberRun, PunctRun, Digits3 };

void apply(Rx rx, const std::vector<uint32_t>& cps, const std::vector<uint16_t>& fl,
           std::vector<size_t>& offsets) {
  std::vector<size_t> out;
  out.reserve(offsets.size() * 2);
  size_t start = 0;
  for (size_t len : offsets) {
    Span s{cps, fl, start, start + len};
    switch (rx) {
      case Rx::Gpt2: split_gpt2(s, out); break;
      case Rx::Llama3: split_llama3(s, 3, out); break;
      case Rx::Qwen2: split_llama3(s, 1, out); break;
      case Rx::Gpt4o: split_gpt4o(s, out); break;
      case Rx::NumberEach: split_runs(s, collapsed_number, 1, 1, out); break;
      case Rx::NumberRun: split_runs(s, collapsed_number, 1, SIZE_MAX, out); break;
      case Rx::PunctRun: split_runs(s, collapsed_punct, 1, SIZE_MAX, out); break;
      case Rx::Digits3:
        split_runs(s, [](uint32_t c, uint16_t) { return c >= '0' && c <= '9'; }, 3, 3, out);
        break;
    }
    start += len;
  }
  offsets.swap(out);
}

}  // namespace

std::vector<std::string> pretokenize(std::string_view text, const std::string& pre) {
  std::vector<uint32_t> cps = unicode::decode_utf8(text);
  std::vector<uint16_t> fl(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) fl[i] = unicode::flags(cps[i]);
  std::vector<size_t> offsets;
  if (!cps.empty()) offsets.push_back(cps.size());

  if (pre == "smollm") {
    apply(Rx::NumberEach, cps, fl, offsets);
    apply(Rx::Gpt2, cps, fl, offsets);
  } else if (pre == "llama3") {
    apply(Rx::Llama3, cps, fl, offsets);
  } else if (pre == "qwen2") {
    apply(Rx::Qwen2, cps, fl, offsets);
  } else if (pre == "gpt4o") {
    apply(Rx::Gpt4o, cps, fl, offsets);
  } else if (pre == "gpt2") {
    apply(Rx::Gpt2, cps, fl, offsets);
  } else if (pre == "default") {
    apply(Rx::PunctRun, cps, fl, offsets);
    apply(Rx::Gpt2, cps, fl, offsets);
    apply(Rx::NumberRun, cps, fl, offsets);
    apply(Rx::Digits3, cps, fl, offsets);
  } else {
    throw InvalidRequestError("pre-tokenizer '" + pre + "' is not implemented");
  }

  std::vector<std::string> words;
  words.reserve(offsets.size());
  size_t start = 0;
  for (size_t len : offsets) {
    words.push_back(unicode::encode_utf8(cps, start, start + len));
    start += len;
  }
  return words;
}

}  // namespace edgellm
