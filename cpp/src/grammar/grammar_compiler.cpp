// GrammarRules -> CompiledGrammar: literals become byte elements, Unicode classes become UTF-8
// byte-sequence alternatives, groups and repetitions become helper rules, and the result is
// checked for undefined rules and left recursion (which would make the automaton's closure
// push frames forever).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "common/errors.h"
#include "grammar/grammar.h"

namespace edgellm::grammar {
namespace {

constexpr size_t kMaxElements = size_t{1} << 22;

// Normalised (sorted, merged, surrogate-free) scalar ranges a class matches.
CodepointRanges effective_ranges(const GrammarNode& cls) {
  CodepointRanges r = cls.ranges;
  std::sort(r.begin(), r.end());
  CodepointRanges merged;
  for (const auto& x : r) {
    if (!merged.empty() && x.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  }
  if (cls.negated) {
    CodepointRanges inv;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) inv.emplace_back(next, lo - 1);
      next = std::max(next, hi + 1);
    }
    if (next <= 0x10FFFF) inv.emplace_back(next, 0x10FFFF);
    merged.swap(inv);
  }
  CodepointRanges out;  // drop surrogates and anything past U+10FFFF: not encodable
  for (auto [lo, hi] : merged) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      out.emplace_back(lo, 0xD7FF);
      lo = 0xE000;
    }
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
    if (lo <= hi) out.emplace_back(lo, hi);
  }
  return out;
}

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (same UTF-8 length) into byte-range sequences: each sequence matches exactly
// the encodings of a sub-range, the classic construction used by automaton-based regex engines.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  static const uint32_t kLenMax[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int len = 0; len < 4; ++len) {  // first split at the encoded-length boundaries
    const uint32_t bmin = len == 0 ? 0 : kLenMax[len - 1] + 1;
    if (lo < bmin && hi >= bmin) {
      utf8_sequences(lo, bmin - 1, out);
      utf8_sequences(bmin, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  ByteRangeSeq seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

}  // namespace

class GrammarCompiler {
 public:
  explicit GrammarCompiler(const GrammarRules& rules) : src_(rules) {}

  std::shared_ptr<CompiledGrammar> run() {
    g_ = std::make_shared<CompiledGrammar>();
    for (const auto& r : src_.rules) rule_ids_[r.name] = new_rule(r.name);
    for (const auto& r : src_.rules) {
      const int32_t id = rule_ids_.at(r.name);
      current_ = r.name;
      if (r.body.kind == GrammarNode::Kind::Alternation) {
        for (const auto& alt : r.body.children) add_alternative(id, lower(alt));
      } else {
        add_alternative(id, lower(r.body));
      }
    }
    auto it = rule_ids_.find("root");
    if (it == rule_ids_.end()) throw InvalidRequestError("grammar has no 'root' rule");
    g_->root_ = it->second;
    check_left_recursion();
    return g_;
  }

 private:
  using Seq = std::vector<GrammarElement>;
  const GrammarRules& src_;
  std::shared_ptr<CompiledGrammar> g_;
  std::unordered_map<std::string, int32_t> rule_ids_;
  std::map<std::array<uint64_t, 4>, int32_t> byte_set_ids_;
  std::map<CodepointRanges, int32_t> class_rules_;
  std::string current_;
  int32_t helper_count_ = 0;

  int32_t new_rule(const std::string& name) {
    g_->rule_alts_.emplace_back();
    g_->rule_names_.push_back(name);
    return static_cast<int32_t>(g_->rule_alts_.size() - 1);
  }
  int32_t helper_rule() { return new_rule(current_ + "-" + std::to_string(++helper_count_)); }

  void add_alternative(int32_t rule, const Seq& seq) {
    auto& el = g_->elements_;
    if (el.size() + seq.size() + 1 > kMaxElements)
      throw InvalidRequestError("grammar is too large: more than " + std::to_string(kMaxElements) +
                                " elements after expanding repetitions (rule '" + current_ + "')");
    g_->rule_alts_[rule].push_back(static_cast<int32_t>(el.size()));
    el.insert(el.end(), seq.begin(), seq.end());
    el.push_back({GrammarElement::kEnd, 0});
  }

  GrammarElement bytes(const ByteSet& s) {
    auto [it, fresh] = byte_set_ids_.emplace(s.bits, static_cast<int32_t>(g_->byte_sets_.size()));
    if (fresh) g_->byte_sets_.push_back(s);
    return {GrammarElement::kBytes, it->second};
  }
  static GrammarElement ref(int32_t rule) { return {GrammarElement::kRef, rule}; }

  Seq lower(const GrammarNode& n) {
    Seq out;
    lower_into(n, out);
    return out;
  }

  void lower_into(const GrammarNode& n, Seq& out) {
    using K = GrammarNode::Kind;
    switch (n.kind) {
      case K::Sequence:
        for (const auto& c : n.children) lower_into(c, out);
        return;
      case K::Alternation: {
        const int32_t r = helper_rule();
        for (const auto& c : n.children) add_alternative(r, lower(c));
        out.push_back(ref(r));
        return;
      }
      case K::Literal:
        for (unsigned char c : n.text) {
          ByteSet s;
          s.add_range(c, c);
          out.push_back(bytes(s));
        }
        return;
      case K::CharClass:
        out.push_back(lower_class(n));
        return;
      case K::RuleRef: {
        auto it = rule_ids_.find(n.text);
        if (it == rule_ids_.end())
          throw InvalidRequestError("grammar error at line " + std::to_string(n.line) + ", column " +
                                    std::to_string(n.column) + ": undefined rule '" + n.text + "'");
        out.push_back(ref(it->second));
        return;
      }
      case K::Repeat:
        lower_repeat(n, out);
        return;
    }
  }

  GrammarElement lower_class(const GrammarNode& n) {
    const CodepointRanges ranges = effective_ranges(n);
    ByteSet ascii;
    std::vector<ByteRangeSeq> multi;
    for (const auto& [lo, hi] : ranges) {
      std::vector<ByteRangeSeq> seqs;
      utf8_sequences(lo, hi, seqs);
      for (auto& s : seqs) {
        if (s.size() == 1) ascii.add_range(s[0].first, s[0].second);
        else multi.push_back(std::move(s));
      }
    }
    if (multi.empty()) return bytes(ascii);
    auto it = class_rules_.find(ranges);
    if (it != class_rules_.end()) return ref(it->second);
    const int32_t r = helper_rule();
    class_rules_[ranges] = r;
    if (ascii.bits != ByteSet{}.bits) add_alternative(r, {bytes(ascii)});
    for (const auto& s : multi) {
      Seq seq;
      for (const auto& [lo, hi] : s) {
        ByteSet b;
        b.add_range(lo, hi);
        seq.push_back(bytes(b));
      }
      add_alternative(r, seq);
    }
    return ref(r);
  }

  void lower_repeat(const GrammarNode& n, Seq& out) {
    Seq body = lower(n.children[0]);
    if (body.size() > 1) {  // one element per copy keeps long repetitions small
      const int32_t r = helper_rule();
      add_alternative(r, body);
      body = {ref(r)};
    }
    if (body.empty() || n.max == 0) return;
    for (int32_t i = 0; i < n.min; ++i) out.insert(out.end(), body.begin(), body.end());
    if (n.max < 0) {  // star ::= body star | ""
      const int32_t star = helper_rule();
      Seq alt = body;
      alt.push_back(ref(star));
      add_alternative(star, alt);
      add_alternative(star, {});
      out.push_back(ref(star));
      return;
    }
    // Up to k more: opt_k ::= body opt_{k-1} | "", so the count is part of the state.
    int32_t prev = -1;
    for (int32_t k = 1; k <= n.max - n.min; ++k) {
      const int32_t opt = helper_rule();
      Seq alt = body;
      if (prev >= 0) alt.push_back(ref(prev));
      add_alternative(opt, alt);
      add_alternative(opt, {});
      prev = opt;
    }
    if (prev >= 0) out.push_back(ref(prev));
  }

  // A rule reached again at the left edge through a non-tail call can never consume a byte
  // before recursing: reject it (cycles through tail calls only are harmless).
  void check_left_recursion() {
    const int32_t n = g_->n_rules();
    const auto& el = g_->elements_;
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (int32_t start : g_->rule_alts_[r]) {
          bool all = true;
          for (int32_t p = start; el[p].kind != GrammarElement::kEnd; ++p)
            if (el[p].kind == GrammarElement::kBytes || !nullable[el[p].value]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<std::pair<int32_t, bool>>> edges(n);  // (callee, is_tail)
    for (int32_t r = 0; r < n; ++r)
      for (int32_t start : g_->rule_alts_[r])
        for (int32_t p = start; el[p].kind == GrammarElement::kRef; ++p) {
          edges[r].emplace_back(el[p].value, el[p + 1].kind == GrammarElement::kEnd);
          if (!nullable[el[p].value]) break;
        }
    // Iterative search: a long chain of rules must not exhaust the native stack.
    std::vector<int32_t> seen(n, -1), todo;
    auto reaches = [&](int32_t from, int32_t target, int32_t mark) {
      todo.assign(1, from);
      while (!todo.empty()) {
        const int32_t r = todo.back();
        todo.pop_back();
        if (r == target) return true;
        if (seen[r] == mark) continue;
        seen[r] = mark;
        for (const auto& e : edges[r]) todo.push_back(e.first);
      }
      return false;
    };
    int32_t mark = 0;
    for (int32_t r = 0; r < n; ++r)
      for (const auto& [to, tail] : edges[r])
        if (!tail && reaches(to, r, mark++))
          throw InvalidRequestError("grammar rule '" + g_->rule_names_[r] +
                                    "' is left-recursive: it can reach itself before matching any character");
  }
};

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const GrammarRules& rules) {
  return GrammarCompiler(rules).run();
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::from_text(GrammarKind kind, std::string_view text) {
  std::string gbnf;
  GrammarRules rules;
  switch (kind) {
    case GrammarKind::Gbnf:
      gbnf = std::string(text);
      rules = parse_gbnf(gbnf);
      break;
    case GrammarKind::Regex: {
      GrammarRule root;
      root.name = "root";
      root.body = parse_regex(text);
      gbnf = "root ::= " + to_gbnf(root.body) + "\n";
      rules.rules.push_back(std::move(root));
      break;
    }
    case GrammarKind::JsonSchema:
      gbnf = json_schema_to_gbnf(text);
      rules = parse_gbnf(gbnf);
      break;
  }
  auto compiled = GrammarCompiler(rules).run();
  compiled->gbnf_ = std::move(gbnf);
  return compiled;
}

}  // namespace edgellm::grammar
