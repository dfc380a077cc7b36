// GBNF, llama.cpp's grammar syntax: `name ::= alternatives`, `|`, `( )`, "literals" with
// escapes, [classes] / [^negated], `.`, postfix `* + ? {m} {m,} {m,n}`, `#` comments, start
// rule `root`. A rule's body runs until the next `name ::=` or the end of the text, so
// alternatives and sequences may continue across lines.
#include <cctype>
#include <unordered_set>

#include "common/errors.h"
#include "common/hex_digit.h"
#include "grammar/grammar_ast.h"

namespace edgellm::grammar {
namespace {

constexpr int kMaxNesting = 256;  // parentheses; deeper input is refused, not a stack overflow

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : s_(text) {}

  GrammarRules parse() {
    GrammarRules out;
    std::unordered_set<std::string> defined;
    skip_space();
    while (!at_end()) {
      const int32_t line = line_, col = col_;
      if (!is_name_char(peek())) fail("expected a rule name");
      std::string name = parse_name();
      skip_space();
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      advance(3);
      if (!defined.insert(name).second) fail_at(line, col, "rule '" + name + "' is defined twice");
      GrammarRule r;
      r.name = name;
      r.line = line;
      r.column = col;
      r.body = parse_alternation(0);
      out.rules.push_back(std::move(r));
      skip_space();
    }
    if (!defined.count("root")) fail_at(1, 1, "the grammar has no 'root' rule");
    return out;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int32_t line_ = 1, col_ = 1;

  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  void advance(size_t n = 1) {
    for (size_t i = 0; i < n && pos_ < s_.size(); ++i) {
      if (s_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else if ((static_cast<unsigned char>(s_[pos_]) & 0xC0) != 0x80) {
        ++col_;  // columns count characters, not UTF-8 continuation bytes
      }
      ++pos_;
    }
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(line_, col_, msg); }
  [[noreturn]] static void fail_at(int32_t line, int32_t col, const std::string& msg) {
    throw InvalidRequestError("grammar parse error at line " + std::to_string(line) + ", column " +
                              std::to_string(col) + ": " + msg);
  }

  static bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') advance();
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) advance();
    return std::string(s_.substr(start, pos_ - start));
  }

  // True when the text at pos_ is `name ::=`, i.e. the next rule starts here.
  bool at_rule_start() const {
    size_t p = pos_;
    if (p >= s_.size() || !is_name_char(s_[p])) return false;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  GrammarNode parse_alternation(int depth) {
    if (depth > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
    std::vector<GrammarNode> alts;
    alts.push_back(parse_sequence(depth));
    while (peek() == '|') {
      advance();
      alts.push_back(parse_sequence(depth));
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return GrammarNode::alternation(std::move(alts));
  }

  GrammarNode parse_sequence(int depth) {
    std::vector<GrammarNode> items;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (depth == 0 && at_rule_start()) break;
      GrammarNode item = parse_item(depth);
      skip_space();
      item = parse_postfix(std::move(item));
      items.push_back(std::move(item));
    }
    if (items.size() == 1) return std::move(items[0]);
    return GrammarNode::sequence(std::move(items));
  }

  GrammarNode parse_postfix(GrammarNode item) {
    for (int stacked = 0;; ++stacked) {
      if (stacked > kMaxNesting) fail("more than " + std::to_string(kMaxNesting) + " repetition operators in a row");
      const char c = peek();
      int32_t min, max;
      if (c == '*') {
        min = 0, max = -1;
        advance();
      } else if (c == '+') {
        min = 1, max = -1;
        advance();
      } else if (c == '?') {
        min = 0, max = 1;
        advance();
      } else if (c == '{') {
        advance();
        skip_space();
        min = std::isdigit(static_cast<unsigned char>(peek())) ? parse_count() : 0;
        skip_space();
        if (peek() == '}') {
          max = min;
        } else if (peek() == ',') {
          advance();
          skip_space();
          max = std::isdigit(static_cast<unsigned char>(peek())) ? parse_count() : -1;
          skip_space();
        } else {
          fail("expected ',' or '}' in repetition");
        }
        if (peek() != '}') fail("expected '}' to close the repetition");
        advance();
        if (max >= 0 && max < min) fail("repetition {" + std::to_string(min) + "," + std::to_string(max) + "} has max < min");
      } else {
        return item;
      }
      item = GrammarNode::stacked_repeat(std::move(item), min, max);  // folds x+++, (x?)*?? ...
      skip_space();
    }
  }

  int32_t parse_count() {
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepetition) fail("repetition count exceeds the limit " + std::to_string(kMaxRepetition));
      advance();
    }
    return static_cast<int32_t>(v);
  }

  GrammarNode parse_item(int depth) {
    const int32_t line = line_, col = col_;
    const char c = peek();
    GrammarNode n;
    if (c == '"') {
      advance();
      std::string bytes;
      while (!at_end() && peek() != '"') {
        if (peek() == '\n') fail("unterminated string literal");
        append_utf8(bytes, parse_char());
      }
      if (at_end()) fail("unterminated string literal");
      advance();
      n = GrammarNode::literal(std::move(bytes));
    } else if (c == '[') {
      advance();
      bool negated = false;
      if (peek() == '^') {
        negated = true;
        advance();
      }
      CodepointRanges ranges;
      while (!at_end() && peek() != ']') {
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
          advance();
          hi = parse_char();
          if (hi < lo) fail("character range is reversed");
        }
        ranges.emplace_back(lo, hi);
      }
      if (at_end()) fail("unterminated character class");
      advance();
      n = GrammarNode::char_class(std::move(ranges), negated);
    } else if (c == '.') {
      advance();
      n = GrammarNode::char_class({}, true);
    } else if (c == '(') {
      advance();
      n = parse_alternation(depth + 1);
      skip_space();
      if (peek() != ')') fail("expected ')'");
      advance();
    } else if (is_name_char(c)) {
      n = GrammarNode::rule_ref(parse_name());
    } else if (c == '<' || c == '!') {
      fail("token references (<[id]>, <text>, !<...>) are not supported");
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    n.line = line;
    n.column = col;
    return n;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int d = hex_digit_value(peek());
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits in escape");
      v = v * 16 + static_cast<uint32_t>(d);
      advance();
    }
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 character.
  uint32_t parse_char() {
    if (peek() == '\\') {
      advance();
      const char e = peek();
      advance();
      uint32_t cp;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': cp = parse_hex(2); break;
        case 'u': cp = parse_hex(4); break;
        case 'U': cp = parse_hex(8); break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '.': case '\'':
          return static_cast<uint32_t>(e);
        default: fail(std::string("unknown escape '\\") + e + "'");
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("escape is not a Unicode scalar value");
      return cp;
    }
    size_t p = pos_;
    uint32_t cp;
    if (!decode_utf8(s_, p, cp)) fail("invalid UTF-8 in grammar text");
    advance(p - pos_);
    return cp;
  }
};

}  // namespace

GrammarRules parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace edgellm::grammar
