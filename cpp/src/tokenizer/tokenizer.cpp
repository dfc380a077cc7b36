#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <iterator>

#include "common/errors.h"
#include "gguf/gguf_file.h"
#include "tokenizer/unicode.h"

namespace edgellm {

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) { build_special_trie(); }

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  if (vocab.type == VocabType::Spm) return make_spm_tokenizer(std::move(vocab));
  if (vocab.type == VocabType::Wpm) return make_wordpiece_tokenizer(std::move(vocab));
  if (vocab.type == VocabType::Ugm) return make_unigram_tokenizer(std::move(vocab));
  return make_bpe_tokenizer(std::move(vocab));
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const std::string& path) {
  auto file = GgufFile::open(path);
  return create(load_vocab(*file));
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw InvalidRequestError("token id " + std::to_string(id) + " is out of range (vocabulary has " +
                              std::to_string(n_vocab()) + " tokens)");
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.tokens[id];
}

void Tokenizer::build_special_trie() {
  trie_.next.assign(1, {});
  trie_.rank.assign(1, -1);
  const auto& cands = vocab_.special_candidates;
  for (size_t c = 0; c < cands.size(); ++c) {
    const std::string& t = vocab_.tokens[cands[c]];
    int32_t node = 0;
    for (unsigned char ch : t) {
      auto& kids = trie_.next[node];
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(ch, int32_t(-1)));
      if (it != kids.end() && it->first == ch) {
        node = it->second;
      } else {
        int32_t fresh = int32_t(trie_.next.size());
        kids.insert(it, {ch, fresh});
        trie_.next.emplace_back();
        trie_.rank.push_back(-1);
        node = fresh;
      }
    }
    if (trie_.rank[node] < 0) trie_.rank[node] = int32_t(c);
  }
}

template <class F>
void Tokenizer::match_specials_at(std::string_view text, size_t i, F&& on_match) const {
  int32_t node = 0;
  for (size_t j = i; j < text.size(); ++j) {
    const auto& kids = trie_.next[node];
    const unsigned char ch = uint8_t(text[j]);
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(ch, int32_t(-1)));
    if (it == kids.end() || it->first != ch) return;
    node = it->second;
    if (trie_.rank[node] >= 0) on_match(j + 1, trie_.rank[node]);
  }
}

// Candidates (in partition order) that occur anywhere in `text`. A candidate absent from the
// whole text cannot occur in any fragment of it, so skipping it leaves the result unchanged.
std::vector<int32_t> Tokenizer::present_specials(std::string_view text, bool parse_special) const {
  std::vector<uint8_t> seen(vocab_.special_candidates.size(), 0);
  for (size_t i = 0; i < text.size(); ++i)
    match_specials_at(text, i, [&](size_t, int32_t rank) { seen[rank] = 1; });
  std::vector<int32_t> out;
  for (size_t c = 0; c < seen.size(); ++c) {
    if (!seen[c]) continue;
    int32_t id = vocab_.special_candidates[c];
    if (!parse_special && (vocab_.attrs[id] & (kAttrControl | kAttrUnknown))) continue;
    out.push_back(id);
  }
  return out;
}

namespace {
struct Fragment {
  int32_t token;  // kNoToken for raw text
  size_t offset, length;
};
}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode(text, add_special, parse_special, PlainRanges{});
}

Tokenizer::PlainRanges Tokenizer::find_control_tokens(std::string_view text) const {
  PlainRanges out;
  for (size_t i = 0; i < text.size();) {
    size_t best = 0;
    match_specials_at(text, i, [&](size_t end, int32_t rank) {
      if (vocab_.attrs[vocab_.special_candidates[rank]] & (kAttrControl | kAttrUnknown | kAttrMarkup)) best = end - i;
    });
    if (best) {
      out.push_back({i, i + best});
      i += best;
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       const PlainRanges& plain_in) const {
  // Plain ranges sorted, merged and clipped, so an overlap test is one binary search.
  PlainRanges plain;
  for (auto [b, e] : plain_in) {
    e = std::min(e, text.size());
    if (b < e) plain.push_back({b, e});
  }
  std::sort(plain.begin(), plain.end());
  {
    size_t w = 0;
    for (size_t r = 0; r < plain.size(); ++r) {
      if (w && plain[r].first <= plain[w - 1].second) plain[w - 1].second = std::max(plain[w - 1].second, plain[r].second);
      else plain[w++] = plain[r];
    }
    plain.resize(w);
  }
  // Does [b, e) overlap a plain range?
  auto in_plain = [&](size_t b, size_t e) {
    auto it = std::upper_bound(plain.begin(), plain.end(), std::make_pair(b, SIZE_MAX));
    if (it != plain.begin() && std::prev(it)->second > b) return true;
    return it != plain.end() && it->first < e;
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({kNoToken, 0, text.size()});

  // llama.cpp's tokenizer_st_partition: for each candidate, longest first, split every raw
  // fragment at each occurrence (left to right), honouring LSTRIP/RSTRIP.
  for (int32_t id : present_specials(text, parse_special)) {
    const std::string& st = vocab_.tokens[id];
    const uint32_t attr = vocab_.attrs[id];
    const bool guarded = !plain.empty() && (attr & (kAttrControl | kAttrUnknown | kAttrMarkup));
    std::vector<Fragment> next;
    next.reserve(frags.size() + 4);
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) { next.push_back(f); continue; }
      size_t base = f.offset, len = f.length;
      size_t from = base;  // where the search resumes: past matches that fall in plain text
      while (true) {
        size_t match = text.substr(0, base + len).find(st, from);
        if (match == std::string_view::npos) {
          if (len > 0) next.push_back({kNoToken, base, len});
          break;
        }
        if (guarded && in_plain(match, match + st.size())) {
          from = match + 1;
          continue;
        }
        size_t left_len = match - base;
        if (attr & kAttrLstrip)
          while (left_len > 0 && std::isspace(uint8_t(text[base + left_len - 1]))) --left_len;
        if (left_len > 0) next.push_back({kNoToken, base, left_len});
        next.push_back({id, 0, 0});
        size_t r_off = match + st.size();
        size_t r_len = base + len - r_off;
        if (attr & kAttrRstrip)
          while (r_len > 0 && std::isspace(uint8_t(text[r_off]))) { ++r_off; --r_len; }
        base = r_off;
        len = r_len;
        from = base;
        if (len == 0) break;
      }
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos && vocab_.bos != kNoToken) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_fragment(text.substr(f.offset, f.length), after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos != kNoToken) out.push_back(vocab_.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  check_id(id);
  const std::string& t = vocab_.tokens[id];
  const uint32_t attr = vocab_.attrs[id];
  const uint32_t shown = (render_special ? (kAttrControl | kAttrUnknown) : 0u) | kAttrUserDefined;
  if (attr & shown) return t;
  if (vocab_.type != VocabType::Bpe) {
    if (attr & kAttrNormal) {
      // "▁" (U+2581, e2 96 81) stands for a space (SPM; WordPiece's word-initial pieces).
      std::string out;
      out.reserve(t.size());
      for (size_t i = 0; i < t.size();) {
        if (i + 2 < t.size() && uint8_t(t[i]) == 0xE2 && uint8_t(t[i + 1]) == 0x96 && uint8_t(t[i + 2]) == 0x81) {
          out += ' ';
          i += 3;
        } else {
          out += t[i++];
        }
      }
      return out;
    }
    if (attr & kAttrByte) {
      // "<0xXX>"
      if (t.size() == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>')
        return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
      return t.size() == 1 ? t : std::string();
    }
    return std::string();
  }
  if (attr & kAttrNormal) {
    std::string out;
    out.reserve(t.size());
    for (uint32_t cp : unicode::decode_utf8(t)) {
      int b = unicode::unicode_to_byte(cp);
      if (b >= 0) out += char(b);
      else unicode::append_utf8(out, cp);  // not byte-level text: keep as is
    }
    return out;
  }
  return std::string();
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool remove_space = vocab_.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, !skip_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  return out;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < s.size();) {
    const uint8_t b0 = uint8_t(s[i]);
    if (b0 < 0x80) { out += char(b0); ++i; continue; }
    const size_t len = (b0 >= 0xC2 && b0 < 0xF5) ? unicode::utf8_len(b0) : 1;
    if (len == 1) { out += "\xEF\xBF\xBD"; ++i; continue; }
    // A sequence cut short (by the end or a non-continuation byte) is one U+FFFD, as Python's
    // decode(errors="replace") does; the byte that cut it starts the next character.
    size_t k = 1;
    uint32_t cp = b0 & (0xFF >> (len + 1));
    while (k < len && i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80) {
      cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
      ++k;
    }
    if (k < len) { out += "\xEF\xBF\xBD"; i += k; continue; }
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      out += "\xEF\xBF\xBD";  // overlong, surrogate or beyond U+10FFFF
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, !skip_special_);
  if (first_ && tok_.vocab().add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  first_ = false;
  pending_ += piece;
  size_t n = unicode::complete_utf8_prefix(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace edgellm
