#include "grammar/grammar_ast.h"

#include <cstdio>

namespace edgellm::grammar {

GrammarNode GrammarNode::sequence(std::vector<GrammarNode> items) {
  GrammarNode n;
  n.kind = Kind::Sequence;
  n.children = std::move(items);
  return n;
}

GrammarNode GrammarNode::alternation(std::vector<GrammarNode> items) {
  GrammarNode n;
  n.kind = Kind::Alternation;
  n.children = std::move(items);
  return n;
}

GrammarNode GrammarNode::literal(std::string bytes) {
  GrammarNode n;
  n.kind = Kind::Literal;
  n.text = std::move(bytes);
  return n;
}

GrammarNode GrammarNode::char_class(CodepointRanges ranges, bool negated) {
  GrammarNode n;
  n.kind = Kind::CharClass;
  n.ranges = std::move(ranges);
  n.negated = negated;
  return n;
}

GrammarNode GrammarNode::rule_ref(std::string name) {
  GrammarNode n;
  n.kind = Kind::RuleRef;
  n.text = std::move(name);
  return n;
}

GrammarNode GrammarNode::stacked_repeat(GrammarNode item, int32_t min, int32_t max) {
  // (x{a,b}){c,d} repeats x a number of times in the union over j in [c, d] of [j*a, j*b]. Those
  // intervals overlap or touch from j = c on exactly when a - 1 <= c * (b - a) (the gap shrinks as
  // j grows; c = 0 also needs a <= 1 to join {0}), and then the language is x{c*a, d*b}: one
  // repeat instead of nested ones, whose expansion is the product of both (x{0,3}{,311} would
  // otherwise compile 933 nested optional copies). Unbounded ends stay unbounded.
  if (item.kind != Kind::Repeat || max == 0 || item.max == 0) return repeat(std::move(item), min, max);
  const int64_t a = item.min, b = item.max, c = min, d = max;
  const bool joined = b < 0 ? (c >= 1 || a <= 1) : (a - 1 <= c * (b - a));
  const int64_t new_min = a * c;
  const int64_t new_max = (b < 0 || d < 0) ? -1 : b * d;
  // A folded count past kMaxRepetition could not be written back as GBNF (to_gbnf), so such a
  // stack stays nested (its expansion then meets the compiler's size limits).
  if (!joined || new_min > kMaxRepetition || new_max > kMaxRepetition) return repeat(std::move(item), min, max);
  GrammarNode inner = std::move(item.children[0]);
  return repeat(std::move(inner), static_cast<int32_t>(new_min), static_cast<int32_t>(new_max));
}

GrammarNode GrammarNode::repeat(GrammarNode item, int32_t min, int32_t max) {
  GrammarNode n;
  n.kind = Kind::Repeat;
  n.children.push_back(std::move(item));
  n.min = min;
  n.max = max;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp) {
  if (i >= s.size()) return false;
  const auto b0 = static_cast<uint8_t>(s[i]);
  int len;
  uint32_t min;
  if (b0 < 0x80) {
    cp = b0;
    ++i;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (i + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  i += len;
  return true;
}

namespace {

void print_escaped_char(std::string& out, uint32_t cp, bool in_class) {
  char buf[16];
  switch (cp) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\\': out += "\\\\"; return;
    default: break;
  }
  if (!in_class && cp == '"') {
    out += "\\\"";
  } else if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else {
    append_utf8(out, cp);
  }
}

void print(std::string& out, const GrammarNode& n, bool wrap) {
  using K = GrammarNode::Kind;
  switch (n.kind) {
    case K::Literal: {
      out += '"';
      for (unsigned char c : n.text) {
        if (c >= 0x80) out += static_cast<char>(c);  // UTF-8 bytes pass through unchanged
        else print_escaped_char(out, c, false);
      }
      out += '"';
      return;
    }
    case K::CharClass:
      out += n.negated ? "[^" : "[";
      for (const auto& r : n.ranges) {
        print_escaped_char(out, r.first, true);
        if (r.second != r.first) {
          out += '-';
          print_escaped_char(out, r.second, true);
        }
      }
      out += ']';
      return;
    case K::RuleRef:
      out += n.text;
      return;
    case K::Repeat: {
      const GrammarNode& item = n.children[0];
      const bool atomic = item.kind == K::Literal || item.kind == K::CharClass || item.kind == K::RuleRef;
      if (!atomic) out += '(';
      print(out, item, false);
      if (!atomic) out += ')';
      if (n.min == 0 && n.max == -1) out += '*';
      else if (n.min == 1 && n.max == -1) out += '+';
      else if (n.min == 0 && n.max == 1) out += '?';
      else if (n.max == -1) out += "{" + std::to_string(n.min) + ",}";
      else if (n.min == n.max) out += "{" + std::to_string(n.min) + "}";
      else out += "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
      return;
    }
    case K::Sequence:
      if (n.children.empty()) {
        out += "\"\"";
        return;
      }
      if (wrap && n.children.size() > 1) out += '(';
      for (size_t i = 0; i < n.children.size(); ++i) {
        if (i) out += ' ';
        print(out, n.children[i], true);
      }
      if (wrap && n.children.size() > 1) out += ')';
      return;
    case K::Alternation:
      if (wrap) out += '(';
      for (size_t i = 0; i < n.children.size(); ++i) {
        if (i) out += " | ";
        print(out, n.children[i], false);
      }
      if (wrap) out += ')';
      return;
  }
}

}  // namespace

std::string to_gbnf(const GrammarNode& node) {
  std::string out;
  print(out, node, true);
  return out;
}

}  // namespace edgellm::grammar
