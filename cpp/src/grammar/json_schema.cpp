// JSON schema -> GBNF. Every keyword is either honoured, an annotation (ignored by definition),
// or refused with an InvalidRequestError naming the keyword and its JSON path: a schema is never
// silently weakened. Honoured: type (one or a list), object properties / required /
// additionalProperties (false, absent, true or a schema), array items / prefixItems /
// additionalItems / minItems / maxItems / uniqueItems (false, or at most one item), string
// minLength / maxLength / pattern / format (date, time, date-time, uuid honoured; other formats
// are annotations, as validators treat them by default), integer ranges (minimum / maximum and
// their exclusive forms, exact) and multipleOf 1, number ranges with integer bounds and
// multipleOf 1 or 10^-k, boolean, null, enum / const of any JSON value (filtered by the other
// keywords beside them), anyOf / oneOf (oneOf as anyOf: the branches are not checked for
// overlap), allOf (intersected keyword by keyword; refused where the intersection cannot be
// written, an error where it is empty), nullable, and local $ref (#/$defs/..., #/definitions/...,
// any JSON pointer into the schema, recursion allowed; keywords beside $ref are intersected).
// Unsatisfiable schemas (no type in common, required members that may not appear, min > max)
// are errors. Annotations: title, description, default, examples, $comment, $schema, $id, ...
//
// Output shape: object members appear in the order the schema lists them; optional ones may be
// left out. Whitespace between tokens is limited to one space or one newline plus up to 20
// spaces/tabs, so the model cannot stall the output with endless blanks; numbers are capped at
// 16 integer digits, 16 fraction digits and a 3-digit exponent for the same reason.
#include <algorithm>
#include <cctype>
#include <functional>
#include <initializer_list>
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
// Schema nesting (subschemas inside subschemas, allOf inside allOf) beyond this is refused.
constexpr int kMaxSchemaDepth = 128;

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

// A schema (or a branch of one) that no value satisfies; anyOf drops such branches.
struct Unsatisfiable : InvalidRequestError {
  using InvalidRequestError::InvalidRequestError;
};

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
  int ref_hops_ = 0;

  static std::string message(const std::string& path, const std::string& msg) {
    // A path through deep nesting is shortened to its two ends.
    const std::string p = path.size() <= 240 ? path : path.substr(0, 80) + "/.../" + path.substr(path.size() - 150);
    return "json_schema at " + p + ": " + msg;
  }
  [[noreturn]] static void fail(const std::string& path, const std::string& msg) {
    throw InvalidRequestError(message(path, msg));
  }
  [[noreturn]] static void unsatisfiable(const std::string& path, const std::string& msg) {
    throw Unsatisfiable(message(path, msg));
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
    if (++depth_ > kMaxSchemaDepth)
      fail(path, "schema nesting deeper than " + std::to_string(kMaxSchemaDepth) + " levels (the limit)");
    std::string out = visit_inner(s, hint, path);
    --depth_;
    return out;
  }

  // ---- keyword classes --------------------------------------------------------------------

  static bool is_annotation(const std::string& k) {
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "$anchor",
        "$dynamicAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly", "contentEncoding",
        "contentMediaType", "discriminator", "$defs", "definitions"};
    return kAnnotations.count(k) > 0 || k.rfind("x-", 0) == 0;
  }
  static bool is_supported(const std::string& k) {
    static const std::set<std::string> kSupported = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
        "minItems", "maxItems", "uniqueItems", "enum", "const", "pattern", "minLength", "maxLength", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf",
        "$ref", "nullable"};
    return kSupported.count(k) > 0;
  }
  static void check_keywords(const JsonValue& s, const std::string& path) {
    for (const auto& [k, v] : s.members)
      if (!is_annotation(k) && !is_supported(k))
        fail(path + "/" + k, "keyword '" + k + "' is not supported (the output could not be held to it)");
  }
  // The schema without the keywords in `drop` and without annotations (null when nothing is left).
  static std::optional<JsonValue> siblings(const JsonValue& s, std::initializer_list<const char*> drop) {
    JsonValue out;
    out.type = JsonValue::Type::Object;
    for (const auto& [k, v] : s.members) {
      bool skip = is_annotation(k);
      for (const char* d : drop) skip = skip || k == d;
      if (!skip) out.members.emplace_back(k, v);
    }
    if (out.members.empty()) return std::nullopt;
    return out;
  }
  static void set(JsonValue& obj, const std::string& key, JsonValue v) {
    auto& m = obj.members;
    m.erase(std::remove_if(m.begin(), m.end(), [&](const auto& kv) { return kv.first == key; }), m.end());
    m.emplace_back(key, std::move(v));
  }
  static JsonValue all_of(JsonValue a, JsonValue b) {
    JsonValue arr;
    arr.type = JsonValue::Type::Array;
    arr.items.push_back(std::move(a));
    arr.items.push_back(std::move(b));
    JsonValue out;
    out.type = JsonValue::Type::Object;
    out.members.emplace_back("allOf", std::move(arr));
    return out;
  }

  std::string visit_inner(const JsonValue& s, const std::string& hint, const std::string& path) {
    if (s.is_bool()) {
      if (!s.boolean) unsatisfiable(path, "the schema 'false' matches nothing");
      return "json-value";
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    const JsonValue* n = s.get("nullable");
    if (n && !n->is_bool()) fail(path + "/nullable", "nullable must be a boolean");
    std::string expr = visit_keywords(s, hint, path);
    if (n && n->boolean) expr = "( " + expr + " | json-null )";
    return expr;
  }

  std::string visit_keywords(const JsonValue& s, const std::string& hint, const std::string& path) {
    if (const JsonValue* ref = s.get("$ref")) {
      if (!ref->is_string()) fail(path + "/$ref", "$ref must be a string");
      if (auto rest = siblings(s, {"$ref", "nullable"})) {  // keywords beside $ref hold too
        JsonValue pure;
        pure.type = JsonValue::Type::Object;
        pure.members.emplace_back("$ref", *ref);
        return visit(all_of(std::move(pure), std::move(*rest)), hint, path);
      }
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
    if (const JsonValue* a = s.get("allOf")) {
      if (!a->is_array() || a->items.empty()) fail(path + "/allOf", "allOf must be a non-empty array");
      return visit(intersect_all(s, path), hint, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const JsonValue* a = s.get(key)) {
        if (!a->is_array() || a->items.empty()) fail(path + "/" + key, std::string(key) + " must be a non-empty array");
        if (s.get("anyOf") && s.get("oneOf"))
          fail(path + "/oneOf", "anyOf and oneOf in one schema are not supported (put them under allOf)");
        // Keywords beside the branches hold for each of them.
        const auto rest = siblings(s, {"anyOf", "oneOf", "nullable"});
        std::string out = "(";
        size_t kept = 0;
        std::string first_error;
        for (size_t i = 0; i < a->items.size(); ++i) {
          const std::string bpath = path + "/" + key + "/" + std::to_string(i);
          const std::string bhint = hint + "-" + std::to_string(i);
          // A branch no value satisfies is left out (its partial rules undone).
          const size_t n_rules = rules_.size();
          const auto refs = ref_rules_;
          const int depth = depth_;
          try {
            const std::string b = rest ? visit(all_of(*rest, a->items[i]), bhint, bpath) : visit(a->items[i], bhint, bpath);
            out += (kept++ ? " | " : " ") + b;
          } catch (const Unsatisfiable& e) {
            rules_.resize(n_rules);
            ref_rules_ = refs;
            depth_ = depth;
            if (first_error.empty()) first_error = e.what();
          }
        }
        if (!kept) throw Unsatisfiable("no branch of " + std::string(key) + " can be satisfied: " + first_error);
        return out + " )";
      }
    }
    if (s.get("const") || s.get("enum")) return visit_enum(s, path);
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
    // No type: the keywords of each type constrain values of that type only, so the value is
    // any of the types whose keywords are all honoured here.
    static const char* const kObjectKw[] = {"properties", "required", "additionalProperties"};
    static const char* const kArrayKw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"};
    static const char* const kStringKw[] = {"pattern", "minLength", "maxLength", "format"};
    static const char* const kNumberKw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
    auto any = [&](const auto& kws) {
      for (const char* k : kws)
        if (s.get(k)) return true;
      return false;
    };
    const bool o = any(kObjectKw), ar = any(kArrayKw), st = any(kStringKw), nu = any(kNumberKw);
    if (!o && !ar && !st && !nu) return "json-value";
    std::vector<std::string> alts;
    alts.push_back(o ? visit_typed(s, "object", hint, path) : "json-object");
    alts.push_back(ar ? visit_typed(s, "array", hint, path) : "json-array");
    alts.push_back(st ? visit_typed(s, "string", hint, path) : "json-string");
    alts.push_back(nu ? visit_typed(s, "number", hint, path) : "json-number");
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " | json-boolean | json-null )";
  }

  // ---- enum / const -----------------------------------------------------------------------

  std::string visit_enum(const JsonValue& s, const std::string& path) {
    std::vector<const JsonValue*> values;
    std::string where = path + "/enum";
    if (const JsonValue* c = s.get("const")) {
      values.push_back(c);
      where = path + "/const";
      if (const JsonValue* e = s.get("enum")) {  // both: the const must be one of the enum
        if (!e->is_array()) fail(path + "/enum", "enum must be a non-empty array");
        bool found = false;
        for (const auto& x : e->items) found = found || x.dump() == c->dump();
        if (!found) unsatisfiable(path + "/const", "the const value is not in enum: no value satisfies the schema");
      }
    } else {
      const JsonValue* e = s.get("enum");
      if (!e->is_array() || e->items.empty()) fail(path + "/enum", "enum must be a non-empty array");
      for (const auto& x : e->items) values.push_back(&x);
    }
    // The other keywords hold for the values too: keep those that satisfy them.
    const auto rest = siblings(s, {"enum", "const", "nullable"});
    std::string out = "(";
    size_t kept = 0;
    for (const JsonValue* v : values) {
      if (rest && !fits(*v, *rest, where)) continue;
      out += (kept++ ? " | " : " ") + lit(v->dump());
    }
    if (!kept) unsatisfiable(where, "no value of it satisfies the other keywords of the schema");
    return out + " )";
  }

  static bool is_integer_value(const JsonValue& v) { return v.is_number() && v.number == std::floor(v.number); }

  static bool has_type(const JsonValue& v, const std::string& t) {
    if (t == "null") return v.type == JsonValue::Type::Null;
    if (t == "boolean") return v.is_bool();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return is_integer_value(v);
    if (t == "array") return v.is_array();
    if (t == "object") return v.is_object();
    return false;
  }

  static size_t codepoints(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  // Does value `v` satisfy schema `s`? Throws naming the keyword when it cannot tell.
  bool fits(const JsonValue& v, const JsonValue& s, const std::string& where) {
    if (s.is_bool()) return s.boolean;
    if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
    for (const auto& [k, x] : s.members) {
      if (is_annotation(k) || k == "nullable") continue;
      if (k == "type") {
        bool ok = false;
        if (x.is_string()) ok = has_type(v, x.text);
        else if (x.is_array())
          for (const auto& t : x.items) ok = ok || (t.is_string() && has_type(v, t.text));
        if (!ok) return false;
      } else if (k == "enum" || k == "const") {
        bool ok = false;
        if (k == "const") ok = x.dump() == v.dump();
        else
          for (const auto& e : x.items) ok = ok || e.dump() == v.dump();
        if (!ok) return false;
      } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (!v.is_number()) continue;
        if (!x.is_number()) fail(where, "'" + k + "' beside enum/const must be a number");
        if ((k == "minimum" && v.number < x.number) || (k == "maximum" && v.number > x.number) ||
            (k == "exclusiveMinimum" && v.number <= x.number) || (k == "exclusiveMaximum" && v.number >= x.number))
          return false;
      } else if (k == "multipleOf") {
        if (!v.is_number()) continue;
        if (!x.is_number() || x.number <= 0) fail(where, "multipleOf must be a number > 0");
        const double q = v.number / x.number;
        if (std::fabs(q - std::round(q)) > 1e-9) return false;
      } else if (k == "minLength" || k == "maxLength") {
        if (!v.is_string()) continue;
        const double n = static_cast<double>(codepoints(v.text));
        if ((k == "minLength" && n < x.number) || (k == "maxLength" && n > x.number)) return false;
      } else if (k == "minItems" || k == "maxItems") {
        if (!v.is_array()) continue;
        const double n = static_cast<double>(v.items.size());
        if ((k == "minItems" && n < x.number) || (k == "maxItems" && n > x.number)) return false;
      } else if (k == "required") {
        if (!v.is_object()) continue;
        for (const auto& r : x.items)
          if (!r.is_string() || !v.get(r.text)) return false;
      } else if (k == "properties") {
        if (!v.is_object()) continue;
        for (const auto& [pk, pv] : x.members)
          if (const JsonValue* m = v.get(pk); m && !fits(*m, pv, where)) return false;
      } else if (k == "additionalProperties") {
        if (!v.is_object()) continue;
        const JsonValue* props = s.get("properties");
        for (const auto& [mk, mv] : v.members)
          if (!(props && props->get(mk)) && !fits(mv, x, where)) return false;
      } else if (k == "items" && x.is_object()) {
        if (!v.is_array()) continue;
        for (const auto& it : v.items)
          if (!fits(it, x, where)) return false;
      } else if (k == "anyOf" || k == "oneOf" || k == "allOf") {
        if (!x.is_array()) fail(where, k + " must be an array");
        size_t n = 0;
        for (const auto& b : x.items) n += fits(v, b, where) ? 1 : 0;
        if ((k == "anyOf" && n == 0) || (k == "oneOf" && n != 1) || (k == "allOf" && n != x.items.size())) return false;
      } else if (k == "$ref") {
        if (!x.is_string() || ++ref_hops_ > 64) fail(where, "$ref beside enum/const does not resolve to a schema");
        const bool ok = fits(v, resolve(x.text, where), where);
        --ref_hops_;
        if (!ok) return false;
      } else {
        fail(where, "enum/const together with '" + k + "' is not supported (the values cannot be checked against it)");
      }
    }
    return true;
  }

  // ---- allOf: intersection ----------------------------------------------------------------

  // The members of allOf (with $ref chains resolved and nested allOf flattened), plus the
  // keywords beside allOf, merged into one schema that holds exactly when all of them hold.
  JsonValue intersect_all(const JsonValue& s, const std::string& path) {
    std::vector<std::pair<const JsonValue*, std::string>> parts;
    std::function<void(const JsonValue&, const std::string&, int)> collect = [&](const JsonValue& x, const std::string& p,
                                                                                 int depth) {
      if (depth > kMaxSchemaDepth) fail(p, "allOf nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
      const JsonValue* part = &x;
      for (int hops = 0; part->is_object() && part->get("$ref") && !siblings(*part, {"$ref"}); ++hops) {
        if (hops > 32) fail(p, "$ref chain too long");
        const JsonValue* r = part->get("$ref");
        if (!r->is_string()) fail(p + "/$ref", "$ref must be a string");
        part = &resolve(r->text, p);
      }
      if (part->is_bool()) {
        if (!part->boolean) unsatisfiable(p, "allOf is unsatisfiable: a member is the schema 'false'");
        return;
      }
      if (!part->is_object()) fail(p, "allOf members must be schema objects");
      if (const JsonValue* inner = part->get("allOf")) {
        if (!inner->is_array() || inner->items.empty()) fail(p + "/allOf", "allOf must be a non-empty array");
        for (size_t i = 0; i < inner->items.size(); ++i)
          collect(inner->items[i], p + "/allOf/" + std::to_string(i), depth + 1);
      }
      parts.emplace_back(part, p);
    };
    collect(s, path, 0);
    JsonValue acc;
    acc.type = JsonValue::Type::Object;
    // additionalProperties of each part constrain the members its own properties do not name.
    struct Closed {
      std::set<std::string> own;
      JsonValue ap;
      std::string path;
    };
    std::vector<Closed> closed;
    for (const auto& [part, p] : parts) {
      check_keywords(*part, p);
      for (const auto& [k, v] : part->members) {
        if (k == "allOf") continue;
        merge_keyword(acc, k, v, p);
      }
      if (const JsonValue* ap = part->get("additionalProperties"); ap && !(ap->is_bool() && ap->boolean)) {
        Closed c{{}, *ap, p};
        if (const JsonValue* pr = part->get("properties"); pr && pr->is_object())
          for (const auto& m : pr->members) c.own.insert(m.first);
        closed.push_back(std::move(c));
      }
    }
    // Members named by one part only must also pass the others' additionalProperties.
    if (!closed.empty()) {
      std::set<std::string> required;
      if (const JsonValue* r = acc.get("required"))
        for (const auto& x : r->items) required.insert(x.text);
      const JsonValue* pr = acc.get("properties");
      JsonValue props;
      props.type = JsonValue::Type::Object;
      if (pr)
        for (const auto& [key, sub] : pr->members) {
          JsonValue value = sub;
          bool dropped = false;
          for (const auto& c : closed) {
            if (c.own.count(key)) continue;
            if (c.ap.is_bool()) {  // false: the member may not appear
              if (required.count(key))
                unsatisfiable(c.path + "/additionalProperties", "allOf is unsatisfiable: '" + key +
                                                                    "' is required but this member's additionalProperties is false");
              dropped = true;
            } else {
              value = all_of(std::move(value), c.ap);
            }
          }
          if (!dropped) props.members.emplace_back(key, std::move(value));
        }
      std::set<std::string> named;
      for (const auto& m : props.members) named.insert(m.first);
      if (pr) set(acc, "properties", std::move(props));  // pr is stale from here on
      for (const auto& key : required) {  // required but named by no part: extras must allow it
        if (named.count(key)) continue;
        for (const auto& c : closed)
          if (c.ap.is_bool())
            unsatisfiable(c.path + "/additionalProperties", "allOf is unsatisfiable: '" + key +
                                                                "' is required but this member's additionalProperties is false");
      }
      JsonValue ap;
      bool any_false = false;
      for (const auto& c : closed) any_false = any_false || c.ap.is_bool();
      if (any_false) {
        ap.type = JsonValue::Type::Bool;
        ap.boolean = false;
      } else {
        ap = closed[0].ap;
        for (size_t i = 1; i < closed.size(); ++i) ap = all_of(std::move(ap), closed[i].ap);
      }
      set(acc, "additionalProperties", std::move(ap));
    }
    return acc;
  }

  static std::set<std::string> type_set(const JsonValue& t, const std::string& path) {
    std::set<std::string> out;
    if (t.is_string()) out.insert(t.text);
    else if (t.is_array())
      for (const auto& x : t.items) {
        if (!x.is_string()) fail(path + "/type", "type names must be strings");
        out.insert(x.text);
      }
    else fail(path + "/type", "type must be a string or a list of strings");
    return out;
  }

  void merge_keyword(JsonValue& acc, const std::string& k, const JsonValue& v, const std::string& p) {
    const JsonValue* a = acc.get(k);
    if (!a) {
      if (k == "nullable") return;  // absent means false: set only when every part says true
      acc.members.emplace_back(k, v);
      return;
    }
    const std::string where = p + "/" + k;
    auto unsat = [&](const std::string& why) { unsatisfiable(where, "allOf is unsatisfiable: " + why); };
    auto cannot = [&]() { fail(where, "allOf with '" + k + "' in more than one member, differing, cannot be intersected"); };
    if (is_annotation(k)) return;
    if (k == "type") {
      const auto x = type_set(*a, p), y = type_set(v, p);
      std::set<std::string> both;
      for (const auto& t : x) {
        if (y.count(t)) both.insert(t);
        else if (t == "integer" && y.count("number")) both.insert("integer");
        else if (t == "number" && y.count("integer")) both.insert("integer");
      }
      if (both.empty()) unsat("no type is allowed by every member");
      JsonValue out;
      if (both.size() == 1) {
        out.type = JsonValue::Type::String;
        out.text = *both.begin();
      } else {
        out.type = JsonValue::Type::Array;
        for (const auto& t : both) {
          JsonValue e;
          e.type = JsonValue::Type::String;
          e.text = t;
          out.items.push_back(std::move(e));
        }
      }
      set(acc, k, std::move(out));
    } else if (k == "properties") {
      if (!a->is_object() || !v.is_object()) fail(where, "properties must be an object");
      JsonValue out = *a;
      for (const auto& [key, sub] : v.members) {
        bool merged = false;
        for (auto& [ok, ov] : out.members)
          if (ok == key) {
            ov = all_of(ov, sub);
            merged = true;
          }
        if (!merged) out.members.emplace_back(key, sub);
      }
      set(acc, k, std::move(out));
    } else if (k == "required") {
      if (!a->is_array() || !v.is_array()) fail(where, "required must be an array of strings");
      JsonValue out = *a;
      for (const auto& x : v.items) out.items.push_back(x);
      set(acc, k, std::move(out));
    } else if (k == "additionalProperties") {
      // resolved after all members are merged (intersect_all); keep the stricter marker here
      if (v.is_bool() && !v.boolean) set(acc, k, v);
    } else if (k == "items" || k == "additionalItems") {
      if (a->is_array() || v.is_array()) cannot();
      set(acc, k, all_of(*a, v));
    } else if (k == "minItems" || k == "minLength" || k == "minimum" || k == "exclusiveMinimum") {
      if (!a->is_number() || !v.is_number()) {
        if (a->dump() != v.dump()) cannot();
        return;
      }
      if (v.number > a->number) set(acc, k, v);
    } else if (k == "maxItems" || k == "maxLength" || k == "maximum" || k == "exclusiveMaximum") {
      if (!a->is_number() || !v.is_number()) {
        if (a->dump() != v.dump()) cannot();
        return;
      }
      if (v.number < a->number) set(acc, k, v);
    } else if (k == "enum" || k == "const") {
      auto values = [](const std::string& key, const JsonValue& x) {
        std::vector<JsonValue> out;
        if (key == "const") out.push_back(x);
        else if (x.is_array()) out = x.items;
        return out;
      };
      const auto x = values(k, *a), y = values(k, v);
      JsonValue out;
      out.type = JsonValue::Type::Array;
      for (const auto& e : x)
        for (const auto& f : y)
          if (e.dump() == f.dump()) {
            out.items.push_back(e);
            break;
          }
      if (out.items.empty()) unsat("no " + k + " value is allowed by every member");
      if (k == "const") set(acc, k, out.items[0]);
      else set(acc, k, std::move(out));
    } else if (k == "uniqueItems") {
      if (v.is_bool() && v.boolean) set(acc, k, v);
    } else if (k == "nullable") {
      if (!(v.is_bool() && v.boolean)) set(acc, k, v);
    } else if (k == "anyOf" || k == "oneOf") {
      if (!a->is_array() || !v.is_array()) fail(where, k + " must be a non-empty array");
      if (a->items.size() * v.items.size() > 64) fail(where, "allOf of two " + k + " lists with more than 64 combinations is not supported");
      JsonValue out;
      out.type = JsonValue::Type::Array;
      for (const auto& x : a->items)
        for (const auto& y : v.items) out.items.push_back(all_of(x, y));
      set(acc, k, std::move(out));
    } else if (k == "$ref") {
      // two different references: keep one, intersect the other's target
      if (a->dump() == v.dump()) return;
      JsonValue pure;
      pure.type = JsonValue::Type::Object;
      pure.members.emplace_back("$ref", v);
      const JsonValue* existing = acc.get("anyOf");
      if (existing) cannot();
      JsonValue arr;
      arr.type = JsonValue::Type::Array;
      arr.items.push_back(std::move(pure));
      set(acc, "anyOf", std::move(arr));  // a one-branch anyOf: the branch holds with the rest
    } else {
      // pattern, format, multipleOf, prefixItems: equal or refused
      if (a->dump() != v.dump()) cannot();
    }
  }

  // ---- typed values -----------------------------------------------------------------------

  std::string visit_typed(const JsonValue& s, const std::string& type, const std::string& hint,
                          const std::string& path) {
    if (type == "object") return visit_object(s, hint, path);
    if (type == "array") return visit_array(s, hint, path);
    if (type == "string") return visit_string(s, path);
    if (type == "integer") return visit_integer(s, path);
    if (type == "number") return visit_number(s, path);
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
    std::vector<std::string> required_order;
    if (const JsonValue* r = s.get("required")) {
      if (!r->is_array()) fail(path + "/required", "required must be an array of strings");
      for (const auto& x : r->items) {
        if (!x.is_string()) fail(path + "/required", "required must be an array of strings");
        if (required.insert(x.text).second) required_order.push_back(x.text);
      }
    }
    const JsonValue* ap = s.get("additionalProperties");
    if (ap && !ap->is_bool() && !ap->is_object()) fail(path + "/additionalProperties", "must be a boolean or a schema");
    const JsonValue* p = s.get("properties");
    if (p && !p->is_object()) fail(path + "/properties", "properties must be an object");
    std::set<std::string> declared;
    if (p)
      for (const auto& [key, sub] : p->members) {
        if (!declared.insert(key).second) continue;
        const bool req = required.count(key) > 0;
        if (sub.is_bool() && !sub.boolean && !req) continue;  // may not appear: leave it out
        props.push_back({key, visit(sub, hint + "-" + key, path + "/properties/" + key), req});
      }
    std::string extra_value;  // empty: no additional members
    if (!ap) {
      if (props.empty() && required.empty()) extra_value = "json-value";
    } else if (ap->is_bool()) {
      if (ap->boolean) extra_value = "json-value";
    } else {
      extra_value = visit(*ap, hint + "-additional", path + "/additionalProperties");
    }
    for (const auto& key : required_order) {  // required but not described by properties
      if (declared.count(key)) continue;
      if (ap && ap->is_bool() && !ap->boolean)
        unsatisfiable(path + "/required", "'" + key + "' is required but additionalProperties is false and "
                                          "properties does not describe it: no object satisfies the schema");
      props.push_back({key, ap && ap->is_object() ? extra_value : std::string("json-value"), true});
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
    int open_groups = 0;  // optional members nest one group each: give every 64 levels a rule of
                          // their own, so hundreds of optional members stay within the GBNF
                          // parser's nesting limit (fuzz_json_schema)
    for (size_t i = n; i-- > 0;) {
      std::string with = kv(props[i]) + (after[i + 1].empty() ? "" : " " + after[i + 1]);
      if (props[i].required) {
        first = with;
        open_groups = 0;
      } else {
        if (++open_groups == 64) {
          first = add_rule(name + "-from-" + std::to_string(i + 1), first);
          open_groups = 1;
        }
        first = "( " + with + " | " + (first.empty() ? "\"\"" : first) + " )";
      }
    }
    rules_[slot].second = "\"{\" ws " + (first.empty() ? "" : first + " ") + "\"}\"";
    return name;
  }

  std::string visit_array(const JsonValue& s, const std::string& hint, const std::string& path) {
    const int64_t min = count_keyword(s, "minItems", 0, path);
    int64_t max = count_keyword(s, "maxItems", -1, path);
    if (max >= 0 && max < min) unsatisfiable(path, "maxItems < minItems");
    if (const JsonValue* u = s.get("uniqueItems")) {
      if (!u->is_bool()) fail(path + "/uniqueItems", "uniqueItems must be a boolean");
      if (u->boolean && !(max >= 0 && max <= 1))
        fail(path + "/uniqueItems", "uniqueItems: true cannot be honoured (the grammar cannot compare items); "
                                    "only with maxItems <= 1");
    }
    const JsonValue* items = s.get("items");
    const JsonValue* prefix = s.get("prefixItems");
    std::string items_path = path + "/items";
    if (items && items->is_array()) {  // draft 4-7 tuple form
      if (prefix) fail(path + "/prefixItems", "prefixItems beside an items array is not supported");
      prefix = items;
      items = s.get("additionalItems");
      items_path = path + "/additionalItems";
    } else if (s.get("additionalItems") && !prefix) {
      // without a tuple, additionalItems has no effect
    }
    const bool items_none = items && items->is_bool() && !items->boolean;
    const std::string name = unique_name(hint);
    rules_.emplace_back(name, "");
    const size_t slot = rules_.size() - 1;
    if (prefix) {
      if (!prefix->is_array()) fail(path + "/prefixItems", "must be an array of schemas");
      const int64_t n = static_cast<int64_t>(prefix->items.size());
      // The prefix items written: all of them, fewer when maxItems says so.
      const int64_t k = max >= 0 ? std::min(n, max) : n;
      if (k < min && items_none)
        unsatisfiable(path + "/minItems", "minItems " + std::to_string(min) + " exceeds the " + std::to_string(k) +
                                          " items prefixItems allows");
      std::string body = "\"[\" ws";
      for (int64_t i = 0; i < k; ++i) {
        if (i) body += " \",\" ws";
        body += " " + visit(prefix->items[i], name + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)) + " ws";
      }
      if (!items_none) {
        const int64_t emin = std::max<int64_t>(0, min - k);
        const int64_t emax = max >= 0 ? max - k : -1;
        if (k == n && emax != 0) {
          const std::string item = items ? visit(*items, name + "-item", items_path) : "json-value";
          if (k == 0) {
            const std::string rest = repetition("\",\" ws " + item + " ws", emin > 0 ? emin - 1 : 0, emax < 0 ? -1 : emax - 1);
            const std::string all = item + " ws" + (rest.empty() ? "" : " " + rest);
            body += emin > 0 ? " " + all : " ( " + all + " )?";
          } else {
            const std::string rest = repetition("\",\" ws " + item + " ws", emin, emax);
            if (!rest.empty()) body += " " + rest;
          }
        }
      }
      rules_[slot].second = body + " \"]\"";
      return name;
    }
    if (items_none) {
      if (min > 0) unsatisfiable(path + "/items", "items is false but minItems is " + std::to_string(min));
      max = 0;
    }
    const std::string item = items && !items_none ? visit(*items, name + "-item", items_path) : "json-value";
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
    const bool lengths = s.get("minLength") || s.get("maxLength");
    const JsonValue* f = s.get("format");
    if (f && !f->is_string()) fail(path + "/format", "format must be a string");
    const JsonValue* p = s.get("pattern");
    static const std::map<std::string, std::string> kFormats = {
        {"date", kDate}, {"time", kTime}, {"date-time", std::string(kDate) + " \"T\" " + kTime}, {"uuid", kUuid}};
    const auto fmt = f ? kFormats.find(f->text) : kFormats.end();
    if (fmt != kFormats.end()) {
      if (p) fail(path + "/pattern", "pattern together with format '" + f->text + "' is not supported");
      if (lengths) fail(path + (s.get("minLength") ? "/minLength" : "/maxLength"),
                        "minLength/maxLength together with format '" + f->text + "' is not supported");
      return q + " " + fmt->second + " " + q;
    }
    // other formats: annotations (validators do not assert them by default)
    if (p) {
      if (!p->is_string()) fail(path + "/pattern", "pattern must be a string");
      if (lengths) fail(path + (s.get("minLength") ? "/minLength" : "/maxLength"),
                        "minLength/maxLength together with pattern is not supported (put the length in the pattern)");
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
    if (max >= 0 && max < min) unsatisfiable(path, "maxLength < minLength");
    if (min == 0 && max < 0) return "json-string";
    const std::string chars = repetition("json-char", min, max);
    return q + (chars.empty() ? "" : " " + chars) + " " + q;
  }

  // multipleOf: nullopt when absent; 0 for 1 (integers); k for 10^-k; anything else is refused.
  static std::optional<int> multiple_of(const JsonValue& s, const std::string& path, bool integer) {
    const JsonValue* m = s.get("multipleOf");
    if (!m) return std::nullopt;
    if (!m->is_number() || !(m->number > 0))
      fail(path + "/multipleOf", "multipleOf must be a number greater than 0");
    for (int k = 0; k <= 16; ++k) {
      const double inv = std::pow(10.0, k);
      if (std::fabs(m->number * inv - 1.0) < 1e-9) {
        if (k > 0 && integer) break;
        return k;
      }
      if (integer) break;
    }
    fail(path + "/multipleOf", "multipleOf " + m->text + " cannot be honoured (supported: 1" +
                                   std::string(integer ? "" : ", or 10^-k such as 0.01 for numbers") + ")");
  }

  struct Bounds {
    std::optional<int64_t> lo, hi;  // integers, clamped to the 16-digit range
    bool lo_excl = false, hi_excl = false;
  };

  // Numeric bounds; integer_type rounds fractional bounds inward, otherwise they must be integers.
  static Bounds bounds(const JsonValue& s, const std::string& path, bool integer_type) {
    Bounds b;
    auto num = [&](const char* key) -> const JsonValue* {
      const JsonValue* v = s.get(key);
      if (v && !v->is_number() && !v->is_bool()) fail(path + "/" + key, "must be a number");
      if (v && v->is_bool() && (std::string(key) == "minimum" || std::string(key) == "maximum"))
        fail(path + "/" + key, "must be a number");
      if (v && v->is_number() && !integer_type && v->number != std::floor(v->number))
        fail(path + "/" + key, std::string(key) + " " + v->text +
                                   " cannot be honoured for a number (only integer bounds are supported)");
      return v;
    };
    auto clamp = [](double x) { return static_cast<int64_t>(std::max(-1e16, std::min(1e16, x))); };
    const JsonValue* mn = num("minimum");
    const JsonValue* mx = num("maximum");
    const JsonValue* xmn = num("exclusiveMinimum");
    const JsonValue* xmx = num("exclusiveMaximum");
    // lower bound: the largest of minimum (inclusive) and exclusiveMinimum
    auto lower = [&](int64_t v, bool excl) {
      if (!b.lo || v > *b.lo || (v == *b.lo && excl)) {
        b.lo = v;
        b.lo_excl = excl;
      }
    };
    auto upper = [&](int64_t v, bool excl) {
      if (!b.hi || v < *b.hi || (v == *b.hi && excl)) {
        b.hi = v;
        b.hi_excl = excl;
      }
    };
    if (mn && mn->is_number()) lower(clamp(std::ceil(mn->number)), false);
    if (mx && mx->is_number()) upper(clamp(std::floor(mx->number)), false);
    if (xmn && xmn->is_number()) {
      if (integer_type) lower(clamp(std::floor(xmn->number) + 1), false);
      else lower(clamp(xmn->number), true);
    }
    if (xmx && xmx->is_number()) {
      if (integer_type) upper(clamp(std::ceil(xmx->number) - 1), false);
      else upper(clamp(xmx->number), true);
    }
    // draft 4: exclusiveMinimum/Maximum: true make minimum/maximum exclusive
    if (xmn && xmn->is_bool() && xmn->boolean && mn && mn->is_number()) {
      if (mn->number == std::floor(mn->number)) {
        if (integer_type) b.lo = *b.lo + 1;
        else b.lo_excl = true;
      }
    }
    if (xmx && xmx->is_bool() && xmx->boolean && mx && mx->is_number()) {
      if (mx->number == std::floor(mx->number)) {
        if (integer_type) b.hi = *b.hi - 1;
        else b.hi_excl = true;
      }
    }
    if (b.lo) b.lo = std::max(*b.lo, -kIntLimit);
    if (b.hi) b.hi = std::min(*b.hi, kIntLimit);
    return b;
  }

  std::string visit_integer(const JsonValue& s, const std::string& path) {
    multiple_of(s, path, true);
    const Bounds b = bounds(s, path, true);
    const auto& lo = b.lo;
    const auto& hi = b.hi;
    if (!lo && !hi) return "json-int";
    if (lo && hi && *lo > *hi) unsatisfiable(path, "no integer satisfies the minimum/maximum bounds");
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

  // Magnitudes v >= 0 in [a, b] (b absent: unbounded; each end inclusive or exclusive), written
  // as digits with at most `frac` fraction digits. Empty string: no such magnitude.
  static std::string magnitudes(int64_t a, bool a_excl, std::optional<int64_t> b, bool b_excl, int frac) {
    const std::string any = "( \".\" [0-9]{1," + std::to_string(frac) + "} )?";
    const std::string nonzero = frac == 1 ? "\".\" [1-9]" : "\".\" [0-9]{0," + std::to_string(frac - 1) + "} [1-9]";
    const std::string zero = "( \".\" \"0\"{1," + std::to_string(frac) + "} )?";
    std::vector<std::string> alts;
    // integer part a: any fraction (a exclusive: a non-zero one), unless b == a
    const int64_t first_full = a_excl ? a + 1 : a;
    if (a_excl && (!b || a < *b)) alts.push_back(lit(std::to_string(a)) + " " + nonzero);
    // integer parts first_full .. b-1 with any fraction
    const int64_t last_full = b ? *b - 1 : -1;
    if (!b) alts.push_back(range_nonnegative(first_full, -1) + " " + any);
    else if (first_full <= last_full) alts.push_back(range_nonnegative(first_full, last_full) + " " + any);
    // integer part b: only a zero fraction, when b is inclusive
    if (b && !b_excl && *b >= a && !(a_excl && *b == a)) alts.push_back(lit(std::to_string(*b)) + " " + zero);
    if (alts.empty()) return "";
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
  }

  std::string visit_number(const JsonValue& s, const std::string& path) {
    const std::optional<int> k = multiple_of(s, path, false);
    if (k && *k == 0) return visit_integer(s, path);  // multipleOf 1: the integers
    const Bounds b = bounds(s, path, false);
    if (!b.lo && !b.hi) {
      if (!k) return "json-number";
      return "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1," + std::to_string(*k) + "} )?";
    }
    const int frac = k ? *k : 16;
    if (b.lo && b.hi && (*b.lo > *b.hi || (*b.lo == *b.hi && (b.lo_excl || b.hi_excl))))
      unsatisfiable(path, "no number satisfies the minimum/maximum bounds");
    std::vector<std::string> alts;
    if (!b.lo || *b.lo < 0) {  // negative values -v: v in [max(0, -hi), -lo]
      const bool above = b.hi && *b.hi < 0;
      const std::string m = magnitudes(above ? -*b.hi : 0, above ? b.hi_excl : false,
                                        b.lo ? std::optional<int64_t>(-*b.lo) : std::nullopt, b.lo_excl, frac);
      if (!m.empty()) alts.push_back("\"-\" " + m);
    }
    if (!b.hi || *b.hi >= 0) {  // non-negative values
      const bool above = b.lo && *b.lo >= 0;
      const std::string m = magnitudes(above ? *b.lo : 0, above ? b.lo_excl : false, b.hi, b.hi_excl, frac);
      if (!m.empty()) alts.push_back(m);
    }
    if (alts.empty()) unsatisfiable(path, "no number satisfies the minimum/maximum bounds");
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
