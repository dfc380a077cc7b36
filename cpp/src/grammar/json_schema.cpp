// JSON schema -> GBNF. Supported: type (one or a list), object properties / required /
// additionalProperties (false, absent, true or a schema), array items / prefixItems /
// minItems / maxItems, string enum / const / pattern / minLength / maxLength / format
// (date, time, date-time, uuid), integer ranges (minimum / maximum and their exclusive forms,
// exact), number (a minimum >= 0 drops the sign; other bounds are not enforced), boolean,
// null, enum / const of any JSON value, anyOf / oneOf, allOf (merged), nullable, and local
// $ref (#/$defs/..., #/definitions/..., any JSON pointer into the schema, recursion allowed).
//
// Output shape: object members appear in the order the schema lists them; optional ones may be
// left out. Whitespace between tokens is limited to one space or one newline plus up to 20
// spaces/tabs, so the model cannot stall the output with endless blanks; numbers are capped at
// 16 integer digits, 16 fraction digits and a 3-digit exponent for the same reason.
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "common/errors.h"
#include "grammar/grammar_ast.h"
#include "grammar/json_value.h"

namespace edgellm::grammar {
namespace {

const char* const kPrimitives = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
json-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-frac-exp ::= ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
json-number ::= json-int json-frac-exp
json-unsigned-number ::= ( "0" | [1-9] [0-9]{0,15} ) json-frac-exp
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-member ::= json-string ws ":" ws json-value ws
json-object ::= "{" ws ( json-member ( "," ws json-member )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
)";

const char* const kDate = R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))";
const char* const kTime =
    R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
const char* const kUuid =
    R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})";

constexpr int64_t kIntLimit = 9999999999999999;  // 16 digits, as json-int allows

std::string lit(std::string_view bytes) { return to_gbnf(GrammarNode::literal(std::string(bytes))); }

std::string digit_class(char lo, char hi) {
  if (lo == hi) return lit(std::string(1, lo));
  return std::string("[") + lo + "-" + hi + "]";
}

std::string repeat_digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return "[0-9]{" + std::to_string(n) + "}";
}

// Decimal strings a..b of equal length (no sign).
std::string range_same_length(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (a == b) return lit(a);
  if (n == 1) return digit_class(a[0], b[0]);
  if (a[0] == b[0]) return lit(a.substr(0, 1)) + " " + range_same_length(a.substr(1), b.substr(1));
  const std::string ra = a.substr(1), rb = b.substr(1);
  const bool a_low = ra.find_first_not_of('0') == std::string::npos;
  const bool b_high = rb.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> alts;
  char mid_lo = a[0], mid_hi = b[0];
  if (!a_low) {
    alts.push_back(lit(a.substr(0, 1)) + " " + range_same_length(ra, std::string(n - 1, '9')));
    ++mid_lo;
  }
  if (!b_high) --mid_hi;
  if (mid_lo <= mid_hi) alts.push_back(digit_class(mid_lo, mid_hi) + " " + repeat_digits(n - 1));
  if (!b_high) alts.push_back(lit(b.substr(0, 1)) + " " + range_same_length(std::string(n - 1, '0'), rb));
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// Non-negative integers in [lo, hi] (hi < 0: unbounded), decimal without leading zeros.
std::string range_nonnegative(int64_t lo, int64_t hi) {
  const bool open = hi < 0;
  if (open) hi = kIntLimit;
  std::vector<std::string> alts;
  const std::string slo = std::to_string(lo), shi = std::to_string(hi);
  int64_t pow = 1;
  for (size_t d = 1; d < slo.size(); ++d) pow *= 10;
  for (size_t d = slo.size(); d <= shi.size(); ++d, pow *= 10) {
    const int64_t a = d == slo.size() ? lo : pow;
    const int64_t b = d == shi.size() ? hi : pow * 10 - 1;
    if (a <= b) alts.push_back(range_same_length(std::to_string(a), std::to_string(b)));
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

class SchemaConverter {
 public:
  SchemaConverter(const JsonValue& root) : root_(root) {}

  std::string run() {
    names_.insert({"root", "ws"});
    for (const char* p : {"json-char", "json-string", "json-int", "json-frac-exp", "json-number",
                          "json-unsigned-number", "json-boolean", "json-null", "json-value", "json-member",
                          "json-object", "json-array"})
      names_.insert(p);
    const std::string body = visit(root_, "root", "#");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out + kPrimitives;
  }

 private:
  const JsonValue& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::map<std::string, std::string> ref_rules_;  // $ref -> rule name
  int depth_ = 0;

  [[noreturn]] static void fail(const std::string& path, const std::string& msg) {
    throw InvalidRequestError("json_schema at " + path + ": " + msg);
  }

  std::string unique_name(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-';
      if (ok) base += c;
      else if (!base.empty() && base.back() != '-') base += '-';
    }
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty()) base = "r";
    if (base.size() > 60) base.resize(60);
    std::string name = base;
    for (int i = 2; names_.count(name); ++i) name = base + "-" + std::to_string(i);
    names_.insert(name);
    return name;
  }

  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = unique_name(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  const JsonValue& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#')
      fail(path, "only local $ref (starting with '#') is supported, got '" + ref + "'");
    const JsonValue* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') fail(path, "$ref '" + ref + "' is not a JSON pointer");
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      if (j == std::string::npos) j = ref.size();
      std::string tok = ref.substr(i + 1, j - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      const JsonValue* next = nullptr;
      if (cur->is_object()) {
        next = cur->get(key);
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
        const size_t idx = std::stoul(key);
        if (idx < cur->items.size()) next = &cur->items[idx];
      }
      if (!next) fail(path, "$ref '" + ref + "' does not resolve");
      cur = next;
      i = j;
    }
    return *cur;
  }

  std::string visit(const JsonValue& s, const std::string& hint, const std::string& path) {
    if (++depth_ > 128) fail(path, "schema nesting deeper than 128");
    std::string out = visit_inner(s, hint, path);
    --depth_;
    return out;
  }

  std::string visit_inner(const JsonValue& s, const std::string& hint, const std::string& path) {
    if (s.is_bool()) {
      if (!s.boolean) fail(path, "the schema 'false' matches nothing");
      return "json-value";
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    std::string expr = visit_keywords(s, hint, path);
    if (const JsonValue* n = s.get("nullable"); n && n->is_bool() && n->boolean) expr = "( " + expr + " | json-null )";
    return expr;
  }

  std::string visit_keywords(const JsonValue& s, const std::string& hint, const std::string& path) {
    if (const JsonValue* ref = s.get("$ref")) {
      if (!ref->is_string()) fail(path, "$ref must be a string");
      auto it = ref_rules_.find(ref->text);
      if (it != ref_rules_.end()) return it->second;
      const std::string& r = ref->text;
      const std::string name = unique_name(r == "#" ? "root-ref" : r.substr(r.rfind('/') + 1));
      ref_rules_[r] = name;
      const size_t slot = rules_.size();
      rules_.emplace_back(name, "");  // reserved first: the target may refer to itself
      const std::string body = visit(resolve(r, path), name, r);
      rules_[slot].second = body;
      return name;
    }
    if (const JsonValue* c = s.get("const")) return lit(c->dump());
    if (const JsonValue* e = s.get("enum")) {
      if (!e->is_array() || e->items.empty()) fail(path + "/enum", "enum must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < e->items.size(); ++i) out += (i ? " | " : " ") + lit(e->items[i].dump());
      return out + " )";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const JsonValue* a = s.get(key)) {
        if (!a->is_array() || a->items.empty()) fail(path + "/" + key, std::string(key) + " must be a non-empty array");
        std::string out = "(";
        for (size_t i = 0; i < a->items.size(); ++i)
          out += (i ? " | " : " ") + visit(a->items[i], hint + "-" + std::to_string(i),
                                           path + "/" + key + "/" + std::to_string(i));
        return out + " )";
      }
    }
    if (const JsonValue* a = s.get("allOf")) {
      if (!a->is_array() || a->items.empty()) fail(path + "/allOf", "allOf must be a non-empty array");
      JsonValue merged = merge_all_of(s, *a, path);
      return visit(merged, hint, path);
    }
    const JsonValue* type = s.get("type");
    if (type && type->is_array()) {
      if (type->items.empty()) fail(path + "/type", "type list is empty");
      std::string out = "(";
      for (size_t i = 0; i < type->items.size(); ++i) {
        if (!type->items[i].is_string()) fail(path + "/type", "type names must be strings");
        out += (i ? " | " : " ") + visit_typed(s, type->items[i].text, hint, path);
      }
      return out + " )";
    }
    if (type) {
      if (!type->is_string()) fail(path + "/type", "type must be a string or a list of strings");
      return visit_typed(s, type->text, hint, path);
    }
    // No type: infer it from the keywords present, else any JSON value.
    if (s.get("properties") || s.get("required") || s.get("additionalProperties")) return visit_typed(s, "object", hint, path);
    if (s.get("items") || s.get("prefixItems") || s.get("minItems") || s.get("maxItems"))
      return visit_typed(s, "array", hint, path);
    if (s.get("pattern") || s.get("minLength") || s.get("maxLength") || s.get("format"))
      return visit_typed(s, "string", hint, path);
    if (s.get("minimum") || s.get("maximum") || s.get("exclusiveMinimum") || s.get("exclusiveMaximum"))
      return visit_typed(s, "number", hint, path);
    return "json-value";
  }

  JsonValue merge_all_of(const JsonValue& s, const JsonValue& all, const std::string& path) {
    JsonValue merged;
    merged.type = JsonValue::Type::Object;
    JsonValue props, required;
    props.type = JsonValue::Type::Object;
    required.type = JsonValue::Type::Array;
    auto absorb = [&](const JsonValue& part) {
      for (const auto& [k, v] : part.members) {
        if (k == "allOf") continue;
        if (k == "properties" && v.is_object()) {
          for (const auto& m : v.members) props.members.push_back(m);
        } else if (k == "required" && v.is_array()) {
          for (const auto& r : v.items) required.items.push_back(r);
        } else {
          merged.members.emplace_back(k, v);
        }
      }
    };
    absorb(s);
    for (size_t i = 0; i < all.items.size(); ++i) {
      const JsonValue* part = &all.items[i];
      for (int hops = 0; part->is_object() && part->get("$ref"); ++hops) {
        if (hops > 32) fail(path + "/allOf", "$ref chain too long");
        part = &resolve(part->get("$ref")->text, path + "/allOf/" + std::to_string(i));
      }
      if (!part->is_object()) fail(path + "/allOf/" + std::to_string(i), "allOf members must be schema objects");
      absorb(*part);
    }
    if (!props.members.empty()) merged.members.emplace_back("properties", props);
    if (!required.items.empty()) merged.members.emplace_back("required", required);
    return merged;
  }

  std::string visit_typed(const JsonValue& s, const std::string& type, const std::string& hint,
                          const std::string& path) {
    if (type == "object") return visit_object(s, hint, path);
    if (type == "array") return visit_array(s, hint, path);
    if (type == "string") return visit_string(s, path);
    if (type == "integer") return visit_integer(s, path);
    if (type == "number") {
      const JsonValue* mn = s.get("minimum");
      const JsonValue* xmn = s.get("exclusiveMinimum");
      const bool nonneg = (mn && mn->is_number() && mn->number >= 0) || (xmn && xmn->is_number() && xmn->number >= 0);
      return nonneg ? "json-unsigned-number" : "json-number";
    }
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    fail(path + "/type", "unknown type '" + type + "'");
  }

  static int64_t count_keyword(const JsonValue& s, const char* key, int64_t dflt, const std::string& path) {
    const JsonValue* v = s.get(key);
    if (!v) return dflt;
    if (!v->is_number() || v->number < 0 || v->number != std::floor(v->number))
      throw InvalidRequestError("json_schema at " + path + "/" + key + ": must be a non-negative integer");
    if (v->number > kMaxRepetition)
      throw InvalidRequestError("json_schema at " + path + "/" + key + ": " + v->text + " exceeds the limit " +
                                std::to_string(kMaxRepetition));
    return static_cast<int64_t>(v->number);
  }

  static std::string repetition(const std::string& item, int64_t min, int64_t max) {
    if (max == 0) return "";
    std::string suffix;
    if (min == 0 && max < 0) suffix = "*";
    else if (min == 1 && max < 0) suffix = "+";
    else if (min == 0 && max == 1) suffix = "?";
    else if (max < 0) suffix = "{" + std::to_string(min) + ",}";
    else if (min == max) suffix = "{" + std::to_string(min) + "}";
    else suffix = "{" + std::to_string(min) + "," + std::to_string(max) + "}";
    return "( " + item + " )" + suffix;
  }

  std::string visit_object(const JsonValue& s, const std::string& hint, const std::string& path) {
    struct Prop {
      std::string key, value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (const JsonValue* r = s.get("required")) {
      if (!r->is_array()) fail(path + "/required", "required must be an array of strings");
      for (const auto& x : r->items) {
        if (!x.is_string()) fail(path + "/required", "required must be an array of strings");
        required.insert(x.text);
      }
    }
    const JsonValue* p = s.get("properties");
    if (p && !p->is_object()) fail(path + "/properties", "properties must be an object");
    std::set<std::string> declared;
    if (p)
      for (const auto& [key, sub] : p->members) {
        if (!declared.insert(key).second) continue;
        props.push_back({key, visit(sub, hint + "-" + key, path + "/properties/" + key), required.count(key) > 0});
      }
    for (const auto& key : required)  // required but not described: any value
      if (!declared.count(key)) props.push_back({key, "json-value", true});

    const JsonValue* ap = s.get("additionalProperties");
    std::string extra_value;  // empty: no additional members
    if (!ap) {
      if (props.empty()) extra_value = "json-value";
    } else if (ap->is_bool()) {
      if (ap->boolean) extra_value = "json-value";
    } else if (ap->is_object()) {
      extra_value = visit(*ap, hint + "-additional", path + "/additionalProperties");
    } else {
      fail(path + "/additionalProperties", "must be a boolean or a schema");
    }
    if (props.empty() && extra_value == "json-value") return "json-object";

    const std::string name = unique_name(hint);
    rules_.emplace_back(name, "");
    const size_t slot = rules_.size() - 1;
    const std::string extra_kv = extra_value.empty() ? "" : "json-string ws \":\" ws " + extra_value + " ws";
    auto kv = [&](const Prop& pr) { return lit(json_quote(pr.key)) + " ws \":\" ws " + pr.value + " ws"; };

    // after[i]: members i.. when something was already written (each one comma-led).
    const size_t n = props.size();
    std::vector<std::string> after(n + 1);
    after[n] = extra_kv.empty() ? "" : "( \",\" ws " + extra_kv + " )*";
    for (size_t i = n; i-- > 0;) {
      std::string head = props[i].required ? "\",\" ws " + kv(props[i]) : "( \",\" ws " + kv(props[i]) + " )?";
      const std::string body = after[i + 1].empty() ? head : head + " " + after[i + 1];
      after[i] = i > 0 && i + 1 < n ? add_rule(name + "-after-" + props[i].key, body) : body;
    }
    // first[i]: members i.. when nothing was written yet.
    std::string first = extra_kv.empty() ? "" : "( " + extra_kv + " ( \",\" ws " + extra_kv + " )* )?";
    for (size_t i = n; i-- > 0;) {
      std::string with = kv(props[i]) + (after[i + 1].empty() ? "" : " " + after[i + 1]);
      if (props[i].required) first = with;
      else first = "( " + with + " | " + (first.empty() ? "\"\"" : first) + " )";
    }
    rules_[slot].second = "\"{\" ws " + (first.empty() ? "" : first + " ") + "\"}\"";
    return name;
  }

  std::string visit_array(const JsonValue& s, const std::string& hint, const std::string& path) {
    const int64_t min = count_keyword(s, "minItems", 0, path);
    const int64_t max = count_keyword(s, "maxItems", -1, path);
    if (max >= 0 && max < min) fail(path, "maxItems < minItems");
    const JsonValue* items = s.get("items");
    const JsonValue* prefix = s.get("prefixItems");
    if (items && items->is_array()) {  // draft 4-7 tuple form
      prefix = items;
      items = s.get("additionalItems");
    }
    const std::string name = unique_name(hint);
    rules_.emplace_back(name, "");
    const size_t slot = rules_.size() - 1;
    if (prefix) {
      if (!prefix->is_array()) fail(path + "/prefixItems", "must be an array of schemas");
      std::string body = "\"[\" ws";
      for (size_t i = 0; i < prefix->items.size(); ++i) {
        if (i) body += " \",\" ws";
        body += " " + visit(prefix->items[i], name + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)) + " ws";
      }
      if (items && !(items->is_bool() && !items->boolean)) {
        const std::string item = visit(*items, name + "-item", path + "/items");
        body += prefix->items.empty() ? " ( " + item + " ws ( \",\" ws " + item + " ws )* )?"
                                      : " ( \",\" ws " + item + " ws )*";
      }
      rules_[slot].second = body + " \"]\"";
      return name;
    }
    const std::string item = items ? visit(*items, name + "-item", path + "/items") : "json-value";
    const std::string elem = item + " ws";
    std::string body;
    if (max == 0) {
      body = "\"[\" ws \"]\"";
    } else if (min == 0) {
      const std::string rest = repetition("\",\" ws " + elem, 0, max < 0 ? -1 : max - 1);
      body = "\"[\" ws ( " + elem + (rest.empty() ? "" : " " + rest) + " )? \"]\"";
    } else {
      const std::string rest = repetition("\",\" ws " + elem, min - 1, max < 0 ? -1 : max - 1);
      body = "\"[\" ws " + elem + (rest.empty() ? "" : " " + rest) + " \"]\"";
    }
    rules_[slot].second = body;
    return name;
  }

  // Pattern characters inside a JSON string: '"' and '\' need escapes and control characters
  // are not allowed raw, so literals are escaped and classes lose those characters.
  static void json_string_safe(GrammarNode& n) {
    using K = GrammarNode::Kind;
    if (n.kind == K::Literal) {
      std::string out;
      for (unsigned char c : n.text) {
        if (c == '"' || c == '\\') {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
      }
      n.text = std::move(out);
    } else if (n.kind == K::CharClass) {
      const CodepointRanges excluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      if (n.negated) {
        n.ranges.insert(n.ranges.end(), excluded.begin(), excluded.end());
      } else {
        CodepointRanges kept;
        for (auto [lo, hi] : n.ranges) {
          for (const auto& [xlo, xhi] : excluded) {
            if (hi < xlo || lo > xhi || lo > hi) continue;
            if (lo < xlo) kept.emplace_back(lo, xlo - 1);
            lo = xhi + 1;
          }
          if (lo <= hi) kept.emplace_back(lo, hi);
        }
        n.ranges = std::move(kept);
      }
    }
    for (auto& c : n.children) json_string_safe(c);
  }

  std::string visit_string(const JsonValue& s, const std::string& path) {
    const std::string q = "\"\\\"\"";
    if (const JsonValue* f = s.get("format"); f && f->is_string()) {
      if (f->text == "date") return q + " " + kDate + " " + q;
      if (f->text == "time") return q + " " + kTime + " " + q;
      if (f->text == "date-time") return q + " " + kDate + " \"T\" " + kTime + " " + q;
      if (f->text == "uuid") return q + " " + kUuid + " " + q;
      // other formats: any string (validators treat format as an annotation by default)
    }
    if (const JsonValue* p = s.get("pattern")) {
      if (!p->is_string()) fail(path + "/pattern", "pattern must be a string");
      GrammarNode n;
      try {
        n = parse_regex(p->text);
      } catch (const InvalidRequestError& e) {
        fail(path + "/pattern", e.what());
      }
      json_string_safe(n);
      return q + " " + to_gbnf(n) + " " + q;
    }
    const int64_t min = count_keyword(s, "minLength", 0, path);
    const int64_t max = count_keyword(s, "maxLength", -1, path);
    if (max >= 0 && max < min) fail(path, "maxLength < minLength");
    if (min == 0 && max < 0) return "json-string";
    const std::string chars = repetition("json-char", min, max);
    return q + (chars.empty() ? "" : " " + chars) + " " + q;
  }

  std::string visit_integer(const JsonValue& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key) -> const JsonValue* {
      const JsonValue* v = s.get(key);
      if (v && !v->is_number() && !v->is_bool()) fail(path + "/" + key, "must be a number");
      return v;
    };
    auto clamp = [](double x) { return static_cast<int64_t>(std::max(-1e16, std::min(1e16, x))); };
    const JsonValue* mn = bound("minimum");
    const JsonValue* mx = bound("maximum");
    const JsonValue* xmn = bound("exclusiveMinimum");
    const JsonValue* xmx = bound("exclusiveMaximum");
    if (mn && mn->is_number()) lo = clamp(std::ceil(mn->number));
    if (mx && mx->is_number()) hi = clamp(std::floor(mx->number));
    if (xmn && xmn->is_number()) lo = std::max(lo.value_or(INT64_MIN), clamp(std::floor(xmn->number) + 1));
    if (xmx && xmx->is_number()) hi = std::min(hi.value_or(INT64_MAX), clamp(std::ceil(xmx->number) - 1));
    if (xmn && xmn->is_bool() && xmn->boolean && mn && mn->is_number() && mn->number == std::floor(mn->number)) lo = *lo + 1;
    if (xmx && xmx->is_bool() && xmx->boolean && mx && mx->is_number() && mx->number == std::floor(mx->number)) hi = *hi - 1;
    if (!lo && !hi) return "json-int";
    if (lo && hi && *lo > *hi) fail(path, "no integer satisfies the minimum/maximum bounds");
    if (lo) lo = std::max(*lo, -kIntLimit);
    if (hi) hi = std::min(*hi, kIntLimit);
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {  // negative part: magnitudes
      const int64_t mag_lo = hi && *hi < 0 ? -*hi : 1;
      const int64_t mag_hi = lo ? -*lo : -1;
      alts.push_back("\"-\" " + range_nonnegative(mag_lo, mag_hi));
    }
    if (!hi || *hi >= 0) alts.push_back(range_nonnegative(lo && *lo > 0 ? *lo : 0, hi ? *hi : -1));
    if (alts.size() == 1) return alts[0];
    return "( " + alts[0] + " | " + alts[1] + " )";
  }
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json) {
  const JsonValue root = parse_json(schema_json, "json_schema");
  return SchemaConverter(root).run();
}

}  // namespace edgellm::grammar
