// The value of one hexadecimal digit, shared by the parsers that read \xHH / \uHHHH escapes
// (GBNF, regex, JSON).
#pragma once

namespace edgellm {

// 0..15 for [0-9a-fA-F], -1 for anything else.
constexpr int hex_digit_value(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

}  // namespace edgellm
