#include "grammar/json_value.h"

#include "common/hex_digit.h"

#include <cstdio>
#include <cstdlib>

#include "common/errors.h"
#include "grammar/grammar_ast.h"

namespace edgellm::grammar {
namespace {

constexpr int kMaxDepth = 256;

class JsonParser {
 public:
  JsonParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  JsonValue parse() {
    JsonValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw InvalidRequestError(what_ + ": invalid JSON at offset " + std::to_string(pos_) + ": " + msg);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect_word(const char* w) {
    for (const char* p = w; *p; ++p, ++pos_)
      if (peek() != *p) fail(std::string("expected '") + w + "'");
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_ws();
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      ++pos_;
      v.type = JsonValue::Type::Object;
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (peek() != '"') fail("expected a string key");
        std::string key = string();
        skip_ws();
        if (peek() != ':') fail("expected ':'");
        ++pos_;
        v.members.emplace_back(std::move(key), value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == '}') {
          ++pos_;
          return v;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos_;
      v.type = JsonValue::Type::Array;
      skip_ws();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == ']') {
          ++pos_;
          return v;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type = JsonValue::Type::String;
      v.text = string();
      return v;
    }
    if (c == 't') {
      expect_word("true");
      v.type = JsonValue::Type::Bool;
      v.boolean = true;
      return v;
    }
    if (c == 'f') {
      expect_word("false");
      v.type = JsonValue::Type::Bool;
      return v;
    }
    if (c == 'n') {
      expect_word("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(c ? std::string("unexpected character '") + c + "'" : "unexpected end of text");
  }

  JsonValue number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ > d;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') ++pos_;
    else if (!digits()) fail("expected digits");
    if (peek() == '.') {
      ++pos_;
      if (!digits()) fail("expected digits after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits()) fail("expected exponent digits");
    }
    JsonValue v;
    v.type = JsonValue::Type::Number;
    v.text = std::string(s_.substr(start, pos_ - start));
    v.number = std::strtod(v.text.c_str(), nullptr);
    return v;
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const int d = hex_digit_value(peek());
      if (d < 0) fail("expected 4 hex digits after \\u");
      v = (v << 4) | static_cast<uint32_t>(d);
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        // RFC 8259 text is UTF-8; invalid bytes would otherwise reach the grammar text.
        const size_t start = pos_;
        uint32_t cp;
        if (!decode_utf8(s_, pos_, cp)) fail("invalid UTF-8 in string");
        out.append(s_.substr(start, pos_ - start));
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && peek() == '\\' && pos_ + 1 < s_.size() && s_[pos_ + 1] == 'u') {
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape in string");
      }
    }
  }
};

}  // namespace

const JsonValue* JsonValue::get(std::string_view key) const {
  if (type != Type::Object) return nullptr;
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    if (it->first == key) return &it->second;
  return nullptr;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonValue::dump() const {
  switch (type) {
    case Type::Null: return "null";
    case Type::Bool: return boolean ? "true" : "false";
    case Type::Number: return text;
    case Type::String: return json_quote(text);
    case Type::Array: {
      std::string out = "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        out += items[i].dump();
      }
      return out + "]";
    }
    case Type::Object: {
      std::string out = "{";
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        out += json_quote(members[i].first) + ":" + members[i].second.dump();
      }
      return out + "}";
    }
  }
  return "null";
}

JsonValue parse_json(std::string_view text, const std::string& what) { return JsonParser(text, what).parse(); }

}  // namespace edgellm::grammar
