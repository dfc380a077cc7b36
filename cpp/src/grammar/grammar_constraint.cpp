#include "grammar/grammar_constraint.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <map>

#include "common/errors.h"
#include "engine/engine_model.h"

namespace edgellm::grammar {
namespace {

// Masks kept per (grammar, vocabulary) before the cache is emptied and refilled on demand:
// 16 MiB is ~500 masks of Gemma 3's 262k-token vocabulary (~2700 of SmolLM2's). With at most
// kContextCacheSize idle contexts that bounds the cache at 128 MiB; a refill costs well under a
// millisecond per token (bench/README.md), so a small budget is cheap.
constexpr int64_t kMaxMaskBytes = int64_t{16} << 20;
// Contexts whose automaton grew past this are not handed to new requests (they keep working
// for the requests that hold them): a recursive grammar cannot grow one context forever.
constexpr size_t kRetireStates = 20000;
constexpr size_t kContextCacheSize = 8;

}  // namespace

// ---- GrammarContext -------------------------------------------------------------------------

GrammarContext::GrammarContext(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(grammar), automaton_(std::move(grammar)), initial_(automaton_.initial_state()) {}

int32_t GrammarContext::advance(int32_t state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.next(state, bytes);
}

bool GrammarContext::is_accepting(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.is_accepting(state);
}

bool GrammarContext::can_continue(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.can_continue(state);
}

size_t GrammarContext::n_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.n_states();
}

GrammarContextStats GrammarContext::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  GrammarContextStats s;
  s.mask_hits = hits_;
  s.mask_misses = misses_;
  s.n_states = static_cast<int64_t>(automaton_.n_states());
  for (const auto& m : masks_) {
    s.n_masks += static_cast<int64_t>(m.by_state.size());
    s.mask_bytes += m.bytes;
  }
  return s;
}

int32_t GrammarContext::distance(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.distance(state);
}

void GrammarContext::with_mask(const std::shared_ptr<const TokenTrie>& trie, int32_t state, int32_t guard,
                               const std::function<void(const std::vector<uint64_t>&, int32_t)>& f) {
  std::lock_guard<std::mutex> lock(mu_);
  Masks* m = nullptr;
  for (auto& x : masks_)
    if (x.trie == trie) m = &x;
  if (!m) {
    masks_.push_back({trie, {}, 0});
    m = &masks_.back();
  }
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(guard);
  auto it = m->by_state.find(key);
  if (it != m->by_state.end()) {
    ++hits_;
    f(it->second.bits, it->second.max_dist);
    return;
  }
  ++misses_;
  const size_t words = (static_cast<size_t>(trie->n_vocab()) + 63) / 64;
  if (m->bytes + static_cast<int64_t>(words * 8) > kMaxMaskBytes) {
    m->by_state.clear();
    m->bytes = 0;
  }
  Mask mask;
  mask.bits.assign(words, 0);
  uint64_t* bits = mask.bits.data();
  int32_t max_state = -1, max_dist = 0;
  trie->walk(state, guard, [this](int32_t s, uint8_t b) { return automaton_.next(s, b); },
             [&](int32_t t, int32_t s) {
               bits[t >> 6] |= uint64_t{1} << (t & 63);
               if (s != max_state) {  // tokens of one subtree often share their state
                 max_state = s;
                 max_dist = std::max(max_dist, automaton_.distance(s));
               }
             });
  mask.max_dist = max_dist;
  if (automaton_.is_accepting(state))
    for (int32_t t : trie->eog()) mask.bits[t >> 6] |= uint64_t{1} << (t & 63);
  m->bytes += static_cast<int64_t>(words * 8);
  const Mask& kept = m->by_state.emplace(key, std::move(mask)).first->second;
  f(kept.bits, kept.max_dist);
}

std::pair<int64_t, int64_t> GrammarContext::budget_masks(const TokenTrie& trie, int32_t state, int32_t guard,
                                                         int32_t limit, std::vector<uint64_t>& within,
                                                         std::vector<uint64_t>& closer) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t words = (static_cast<size_t>(trie.n_vocab()) + 63) / 64;
  within.assign(words, 0);
  closer.assign(words, 0);
  const int32_t here = automaton_.distance(state);
  int64_t n_within = 0, n_closer = 0;
  int32_t best = here;  // the nearest next state so far (closer = the tokens reaching it)
  trie.walk(state, guard, [this](int32_t s, uint8_t b) { return automaton_.next(s, b); },
            [&](int32_t t, int32_t s) {
              const int32_t d = automaton_.distance(s);
              const uint64_t bit = uint64_t{1} << (t & 63);
              if (d <= limit) {
                within[t >> 6] |= bit;
                ++n_within;
              }
              if (d < best) {
                std::fill(closer.begin(), closer.end(), 0);
                n_closer = 0;
                best = d;
              }
              if (d == best && d < here) {
                closer[t >> 6] |= bit;
                ++n_closer;
              }
            });
  return {n_within, n_closer};
}

// ---- caches ---------------------------------------------------------------------------------

std::shared_ptr<GrammarContext> grammar_context(GrammarKind kind, std::string_view text) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<GrammarContext>>> lru;  // most recent first
  std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
  key.append(text);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = lru.begin(); it != lru.end(); ++it) {
      if (it->first != key) continue;
      auto ctx = it->second;
      lru.erase(it);
      if (ctx->n_states() > kRetireStates) break;  // start afresh below
      lru.emplace_front(key, ctx);
      return ctx;
    }
  }
  // Compile outside the lock: a large schema must not stall other requests' lookups.
  auto ctx = std::make_shared<GrammarContext>(CompiledGrammar::from_text(kind, text));
  std::lock_guard<std::mutex> lock(mu);
  lru.emplace_front(key, ctx);
  while (lru.size() > kContextCacheSize) lru.pop_back();
  return ctx;
}

std::shared_ptr<const TokenTrie> token_trie_for(const std::shared_ptr<const void>& owner, int32_t n_vocab,
                                                const std::function<std::string(int32_t)>& piece,
                                                const std::vector<int32_t>& eog,
                                                const std::vector<std::pair<int32_t, std::string>>& special) {
  struct Entry {
    std::weak_ptr<const void> owner;
    int32_t n_vocab;
    std::shared_ptr<const TokenTrie> trie;
  };
  static std::mutex mu;
  static std::vector<Entry> entries;
  std::lock_guard<std::mutex> lock(mu);  // held while building: two requests must not build twice
  for (auto it = entries.begin(); it != entries.end();) {
    if (it->owner.expired()) {
      it = entries.erase(it);
      continue;
    }
    if (!it->owner.owner_before(owner) && !owner.owner_before(it->owner) && it->n_vocab == n_vocab) return it->trie;
    ++it;
  }
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t t = 0; t < n_vocab; ++t) {
    try {
      pieces[t] = piece(t);
    } catch (const std::exception&) {
      pieces[t].clear();  // ids past the tokenizer (padded embedding rows) are never allowed
    }
  }
  auto trie = std::make_shared<const TokenTrie>(pieces, eog, special);
  entries.push_back({owner, n_vocab, trie});
  return trie;
}

// ---- GrammarConstraint ----------------------------------------------------------------------

GrammarConstraint::GrammarConstraint(std::shared_ptr<GrammarContext> ctx, std::shared_ptr<const TokenTrie> trie,
                                     bool budget_close)
    : ctx_(std::move(ctx)), trie_(std::move(trie)), state_(ctx_->initial_state()), budget_close_(budget_close) {}

void GrammarConstraint::mask_logits(const std::vector<uint64_t>& mask, float* logits, int n_vocab) const {
  const int n = std::min(n_vocab, trie_->n_vocab());
  for (int w = 0; w * 64 < n; ++w) {
    uint64_t bad = ~mask[w];
    if (!bad) continue;
    const int base = w * 64;
    while (bad) {
      const int t = base + __builtin_ctzll(bad);
      if (t >= n) break;
      logits[t] = -INFINITY;
      bad &= bad - 1;
    }
  }
  for (int t = trie_->n_vocab(); t < n_vocab; ++t) logits[t] = -INFINITY;
}

void GrammarConstraint::apply(float* logits, int n_vocab) {
  bool tight = false;
  int32_t limit = 0;
  ctx_->with_mask(trie_, state_, guard_, [&](const std::vector<uint64_t>& mask, int32_t max_dist) {
    if (budget_close_ && remaining_ >= 0) {
      // After this token remaining_ - 1 are left, one of them kept for end-of-generation.
      limit = remaining_ - 1 - (trie_->eog().empty() ? 0 : 1);
      tight = max_dist > limit;
    }
    if (!tight) mask_logits(mask, logits, n_vocab);
  });
  if (!tight) return;
  const bool accepting = ctx_->is_accepting(state_);
  const auto [n_within, n_closer] = ctx_->budget_masks(*trie_, state_, guard_, limit, within_, closer_);
  std::vector<uint64_t>* pick = nullptr;
  if (n_within > 0 || accepting) pick = &within_;
  else if (n_closer > 0) pick = &closer_;
  if (!pick) {  // nothing brings it closer (an unreachable end): the plain grammar mask
    ctx_->with_mask(trie_, state_, guard_,
                    [&](const std::vector<uint64_t>& mask, int32_t) { mask_logits(mask, logits, n_vocab); });
    return;
  }
  if (accepting)
    for (int32_t t : trie_->eog()) (*pick)[t >> 6] |= uint64_t{1} << (t & 63);
  mask_logits(*pick, logits, n_vocab);
}

void GrammarConstraint::accept(int32_t token) {
  if (token < 0 || token >= trie_->n_vocab())
    throw InvalidRequestError("constraint: token id " + std::to_string(token) + " is outside the vocabulary");
  if (trie_->is_eog(token)) {
    if (!ctx_->is_accepting(state_))
      throw InvalidRequestError("constraint: end of generation before the output is complete");
    return;
  }
  if (trie_->excluded(token))
    throw InvalidRequestError("constraint: token " + std::to_string(token) +
                              " is a special (control) token, never text inside the grammar");
  const std::string& piece = trie_->piece(token);
  const int32_t guard = trie_->guard_next(guard_, piece);
  if (guard < 0)
    throw InvalidRequestError("constraint: token " + std::to_string(token) +
                              " would spell a special token's text inside the grammar");
  const int32_t next = ctx_->advance(state_, piece);
  if (next == GrammarAutomaton::kDead)
    throw InvalidRequestError("constraint: token " + std::to_string(token) + " is not allowed by the grammar here");
  state_ = next;
  guard_ = guard;
}

bool GrammarConstraint::is_complete() const { return ctx_->is_accepting(state_); }

bool GrammarConstraint::can_continue() const { return ctx_->can_continue(state_); }

bool GrammarConstraint::accept_bytes(std::string_view bytes) {
  const int32_t guard = trie_->guard_next(guard_, std::string(bytes));
  if (guard < 0) return false;
  const int32_t next = ctx_->advance(state_, bytes);
  if (next == GrammarAutomaton::kDead) return false;
  state_ = next;
  guard_ = guard;
  return true;
}

std::vector<int32_t> GrammarConstraint::allowed_tokens() {
  std::vector<int32_t> out;
  ctx_->with_mask(trie_, state_, guard_, [&](const std::vector<uint64_t>& mask, int32_t) {
    for (int32_t t = 0; t < trie_->n_vocab(); ++t)
      if ((mask[t >> 6] >> (t & 63)) & 1) out.push_back(t);
  });
  return out;
}

// ---- LazyGrammarConstraint ------------------------------------------------------------------

LazyGrammarConstraint::LazyGrammarConstraint(std::shared_ptr<GrammarContext> ctx,
                                             std::shared_ptr<const TokenTrie> trie,
                                             std::vector<std::string> triggers, bool budget_close)
    : ctx_(std::move(ctx)), trie_(std::move(trie)), triggers_(std::move(triggers)), budget_close_(budget_close) {
  for (const auto& t : triggers_) {
    if (t.empty() || t == "^") throw InvalidRequestError("constraint: a grammar trigger is empty");
    max_trigger_ = std::max(max_trigger_, t.size());
  }
}

void LazyGrammarConstraint::apply(float* logits, int n_vocab) {
  if (inner_) inner_->apply(logits, n_vocab);
}

void LazyGrammarConstraint::accept(int32_t token) {
  if (inner_) {
    inner_->accept(token);
    return;
  }
  if (token < 0 || token >= trie_->n_vocab())
    throw InvalidRequestError("constraint: token id " + std::to_string(token) + " is outside the vocabulary");
  if (trie_->is_eog(token)) return;
  accept_text(trie_->piece(token));
}

void LazyGrammarConstraint::accept_text(std::string_view bytes) {
  if (inner_) {
    if (!inner_->accept_bytes(bytes))
      throw InvalidRequestError("constraint: the output does not follow the grammar here");
    return;
  }
  const size_t old = tail_.size();
  for (size_t i = 0; i < bytes.size() && first_text_ == std::string::npos; ++i) {
    const char c = bytes[i];
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') first_text_ = tail_start_ + old + i;
  }
  tail_.append(bytes.data(), bytes.size());
  // The earliest trigger that ends inside the new bytes: it starts after
  // old - (its length - 1), which the kept tail covers. An anchored trigger ("^...") counts
  // only where nothing but whitespace precedes it in the whole output.
  size_t best = std::string::npos;
  for (const auto& trig : triggers_) {
    const bool anchored = trig[0] == '^';
    const std::string_view t = anchored ? std::string_view(trig).substr(1) : std::string_view(trig);
    const size_t from = old >= t.size() - 1 ? old - (t.size() - 1) : 0;
    for (size_t at = tail_.find(t, from); at != std::string::npos; at = tail_.find(t, at + 1)) {
      if (anchored && tail_start_ + at > first_text_) break;
      if (at < best) best = at;
      break;
    }
  }
  if (best == std::string::npos) {
    if (tail_.size() >= max_trigger_) {
      const size_t drop = tail_.size() - (max_trigger_ - 1);
      tail_.erase(0, drop);
      tail_start_ += drop;
    }
    return;
  }
  inner_ = std::make_unique<GrammarConstraint>(ctx_, trie_, budget_close_);
  inner_->set_remaining(remaining_);
  const std::string_view rest = std::string_view(tail_).substr(best);
  if (!inner_->accept_bytes(rest))
    throw InvalidRequestError("constraint: the text after the grammar trigger does not follow the grammar");
  tail_.clear();
}

bool LazyGrammarConstraint::is_complete() const { return !inner_ || inner_->is_complete(); }

std::unique_ptr<TokenConstraint> make_grammar_constraint(const ConstraintSpec& spec,
                                                         std::shared_ptr<const TokenTrie> trie) {
  const int n_set = !spec.json_schema.empty() + !spec.grammar.empty() + !spec.regex.empty();
  if (n_set > 1)
    throw InvalidRequestError("constraint: json_schema (or response_format), grammar and regex are exclusive; "
                              "set only one");
  std::shared_ptr<GrammarContext> ctx;
  if (!spec.json_schema.empty()) ctx = grammar_context(GrammarKind::JsonSchema, spec.json_schema);
  else if (!spec.grammar.empty()) ctx = grammar_context(GrammarKind::Gbnf, spec.grammar);
  else if (!spec.regex.empty()) ctx = grammar_context(GrammarKind::Regex, spec.regex);
  else throw InvalidRequestError("constraint: none of json_schema, grammar or regex is set");
  if (!spec.triggers.empty())
    return std::make_unique<LazyGrammarConstraint>(std::move(ctx), std::move(trie), spec.triggers, spec.budget_close);
  return std::make_unique<GrammarConstraint>(std::move(ctx), std::move(trie), spec.budget_close);
}

void register_grammar_constraints() {
  register_constraint_factory([](const ConstraintSpec& spec) -> std::unique_ptr<TokenConstraint> {
    if (!spec.vocab || spec.n_vocab <= 0)
      throw InvalidRequestError("constraint: the engine passed no vocabulary (ConstraintSpec.vocab)");
    const EngineVocab* v = spec.vocab.get();
    auto trie = token_trie_for(spec.vocab, spec.n_vocab, [v](int32_t t) { return v->piece(t); }, v->eog_tokens(),
                               v->special_tokens());
    return make_grammar_constraint(spec, std::move(trie));
  });
}

}  // namespace edgellm::grammar
