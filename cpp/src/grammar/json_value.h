// A small JSON document model for reading JSON schemas (the grammar converter's input).
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::grammar {

struct JsonValue {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0.0;
  std::string text;  // String: the decoded string; Number: the literal as written
  std::vector<JsonValue> items;                            // Array
  std::vector<std::pair<std::string, JsonValue>> members;  // Object, in document order

  bool is_object() const { return type == Type::Object; }
  bool is_array() const { return type == Type::Array; }
  bool is_string() const { return type == Type::String; }
  bool is_number() const { return type == Type::Number; }
  bool is_bool() const { return type == Type::Bool; }
  // Member lookup (the last one wins for duplicate keys, like most parsers); null if absent.
  const JsonValue* get(std::string_view key) const;
  // Compact serialization (numbers as written, strings escaped per RFC 8259).
  std::string dump() const;
};

// Parses RFC 8259 JSON. Throws InvalidRequestError naming `what` and the byte offset.
JsonValue parse_json(std::string_view text, const std::string& what);

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace edgellm::grammar
