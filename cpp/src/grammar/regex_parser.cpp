// The regular-expression subset a `regex` constraint (and a JSON-schema `pattern`) may use:
// literals and escapes, classes ([a-z], [^...], \d \w \s and their negations), `.` (any
// character but newline), groups ( ), (?: ), (?<name> ), alternation, and the quantifiers
// * + ? {m} {m,} {m,n} (a trailing lazy/possessive mark is accepted and means nothing for a
// full match). ^ and $ are accepted only at the ends: the whole output must match anyway.
// Backreferences, lookaround and word boundaries cannot be expressed by the automaton and are
// rejected with an error naming the offset.
#include <algorithm>
#include <cctype>

#include "common/errors.h"
#include "common/hex_digit.h"
#include "grammar/grammar_ast.h"

namespace edgellm::grammar {
namespace {

const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};

CodepointRanges complement(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : s_(p) {}

  GrammarNode parse() {
    if (peek() == '^') ++pos_;
    GrammarNode n = parse_alternation();
    if (pos_ < s_.size()) {
      if (peek() == ')') fail("unbalanced ')'");
      fail("unexpected character");
    }
    return n;
  }

 private:
  static constexpr int kMaxNesting = 256;  // groups; deeper input is refused, not a stack overflow
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;

  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= s_.size(); }
  [[noreturn]] void fail(const std::string& msg) const {
    throw InvalidRequestError("regex error at offset " + std::to_string(pos_) + ": " + msg);
  }

  GrammarNode parse_alternation() {
    std::vector<GrammarNode> alts;
    alts.push_back(parse_sequence());
    while (peek() == '|') {
      ++pos_;
      alts.push_back(parse_sequence());
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return GrammarNode::alternation(std::move(alts));
  }

  GrammarNode parse_sequence() {
    std::vector<GrammarNode> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        // Only as the last character of the pattern or of a top-level alternative.
        if (pos_ + 1 == s_.size() || peek(1) == '|' || peek(1) == ')') {
          ++pos_;
          continue;
        }
        fail("'$' is supported only at the end of the pattern");
      }
      if (peek() == '^') {
        if (items.empty()) {
          ++pos_;
          continue;
        }
        fail("'^' is supported only at the start of the pattern");
      }
      GrammarNode atom = parse_atom();
      items.push_back(parse_quantifiers(std::move(atom)));
    }
    if (items.size() == 1) return std::move(items[0]);
    return GrammarNode::sequence(std::move(items));
  }

  int32_t parse_int() {
    int64_t v = 0;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number");
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepetition) fail("repetition count exceeds the limit " + std::to_string(kMaxRepetition));
      ++pos_;
    }
    return static_cast<int32_t>(v);
  }

  // A '{' that does not start a valid {m}, {m,} or {m,n} is a literal brace, as in most engines.
  bool at_counted_repeat() const {
    size_t p = pos_ + 1;
    const size_t min_start = p;
    while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
    const bool has_min = p > min_start;
    bool has_max = false;
    if (p < s_.size() && s_[p] == ',') {
      ++p;
      const size_t max_start = p;
      while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
      has_max = p > max_start;
    }
    return (has_min || has_max) && p < s_.size() && s_[p] == '}';  // {m}, {m,}, {m,n}, {,n}
  }

  GrammarNode parse_quantifiers(GrammarNode atom) {
    for (int stacked = 0;; ++stacked) {
      if (stacked > kMaxNesting) fail("more than " + std::to_string(kMaxNesting) + " quantifiers in a row");
      int32_t min, max;
      const char c = peek();
      if (c == '*') {
        min = 0, max = -1;
        ++pos_;
      } else if (c == '+') {
        min = 1, max = -1;
        ++pos_;
      } else if (c == '?') {
        min = 0, max = 1;
        ++pos_;
      } else if (c == '{' && at_counted_repeat()) {
        ++pos_;
        min = peek() == ',' ? 0 : parse_int();
        max = min;
        if (peek() == ',') {
          ++pos_;
          max = peek() == '}' ? -1 : parse_int();
        }
        ++pos_;  // '}'
        if (max >= 0 && max < min) fail("repetition has max < min");
      } else {
        return atom;
      }
      if (peek() == '?' || peek() == '+') ++pos_;  // lazy / possessive: same language
      atom = GrammarNode::stacked_repeat(std::move(atom), min, max);  // folds x+++ etc.
    }
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int d = hex_digit_value(peek());
      if (d < 0) fail("expected hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  uint32_t parse_utf8_char() {
    uint32_t cp;
    if (!decode_utf8(s_, pos_, cp)) fail("invalid UTF-8");
    return cp;
  }

  // After a backslash: a class escape (\d, \W, ...) fills `cls` and returns true; otherwise
  // the escaped character goes to `cp`.
  bool parse_escape(CodepointRanges& cls, uint32_t& cp) {
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'd': cls = kDigit; return true;
      case 'D': cls = complement(kDigit); return true;
      case 'w': cls = kWord; return true;
      case 'W': cls = complement(kWord); return true;
      case 's': cls = kSpace; return true;
      case 'S': cls = complement(kSpace); return true;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 't': cp = '\t'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = parse_hex(2); return false;
      case 'u':
        if (peek() == '{') {
          ++pos_;
          cp = 0;
          while (peek() != '}') {
            if (at_end()) fail("unterminated \\u{...}");
            cp = cp * 16 + parse_hex(1);
            if (cp > 0x10FFFF) fail("\\u{...} is not a Unicode scalar value");
          }
          ++pos_;
        } else {
          cp = parse_hex(4);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("escape is not a Unicode scalar value");
        return false;
      case 'b': case 'B': fail("word boundaries (\\b, \\B) are not supported");
      case '\0': fail("pattern ends with a backslash");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) fail("backreferences are not supported");
        if (std::isalpha(static_cast<unsigned char>(e))) fail(std::string("unknown escape '\\") + e + "'");
        --pos_;
        cp = parse_utf8_char();  // any other escaped character stands for itself
        return false;
    }
  }

  GrammarNode parse_atom() {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        ++pos_;
        if (peek() == ':') {
          ++pos_;
        } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
          while (!at_end() && peek() != '>') ++pos_;
          ++pos_;
        } else if (peek() == 'P' && peek(1) == '<') {
          while (!at_end() && peek() != '>') ++pos_;
          ++pos_;
        } else {
          fail("lookaround and inline flags are not supported");
        }
      }
      if (++depth_ > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
      GrammarNode inner = parse_alternation();
      --depth_;
      if (peek() != ')') fail("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return GrammarNode::char_class({{'\n', '\n'}}, true);
    }
    if (c == '*' || c == '+' || c == '?') fail("quantifier without anything to repeat");
    if (c == '\\') {
      ++pos_;
      CodepointRanges cls;
      uint32_t cp;
      if (parse_escape(cls, cp)) return GrammarNode::char_class(std::move(cls), false);
      std::string bytes;
      append_utf8(bytes, cp);
      return GrammarNode::literal(std::move(bytes));
    }
    std::string bytes;
    append_utf8(bytes, parse_utf8_char());
    return GrammarNode::literal(std::move(bytes));
  }

  GrammarNode parse_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodepointRanges ranges;
    bool first = true;
    while (!at_end() && (peek() != ']' || first)) {
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++pos_;
        CodepointRanges cls;
        if (parse_escape(cls, lo)) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
      } else {
        lo = parse_utf8_char();
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          CodepointRanges cls;
          if (parse_escape(cls, hi)) fail("a class escape cannot end a range");
        } else {
          hi = parse_utf8_char();
        }
        if (hi < lo) fail("character range is reversed");
      }
      ranges.emplace_back(lo, hi);
    }
    if (at_end()) fail("unterminated character class");
    ++pos_;
    return GrammarNode::char_class(std::move(ranges), negated);
  }
};

}  // namespace

GrammarNode parse_regex(std::string_view pattern) { return RegexParser(pattern).parse(); }

}  // namespace edgellm::grammar
