#include <algorithm>

#include "common/errors.h"
#include "grammar/grammar.h"

namespace edgellm::grammar {

namespace {
int32_t sat_add(int64_t a, int64_t b) {
  return static_cast<int32_t>(std::min<int64_t>(a + b, GrammarAutomaton::kUnreachable));
}
}  // namespace

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  compute_rest();
  begin_closure();
  for (int32_t start : grammar_->alternatives(grammar_->root())) close(intern_node(start, kEmptyStack));
  initial_ = intern_state();
  if (initial_ == kDead) throw InvalidRequestError("grammar matches nothing: its root rule has no alternative");
}

// Shortest expansion of every rule (a worklist fixed point: a rule's value only falls, and its
// callers are revisited when it does), then rest_ for every element position.
void GrammarAutomaton::compute_rest() {
  const auto& el = grammar_->elements();
  const int32_t n = grammar_->n_rules();
  std::vector<int32_t> minlen(n, kUnreachable);
  std::vector<std::vector<int32_t>> callers(n);
  for (int32_t r = 0; r < n; ++r)
    for (int32_t start : grammar_->alternatives(r))
      for (int32_t p = start; el[p].kind != GrammarElement::kEnd; ++p)
        if (el[p].kind == GrammarElement::kRef) callers[el[p].value].push_back(r);
  auto eval = [&](int32_t r) {
    int32_t best = kUnreachable;
    for (int32_t start : grammar_->alternatives(r)) {
      int64_t sum = 0;
      for (int32_t p = start; el[p].kind != GrammarElement::kEnd && sum < kUnreachable; ++p)
        sum += el[p].kind == GrammarElement::kBytes ? 1 : minlen[el[p].value];
      best = std::min(best, sat_add(sum, 0));
    }
    return best;
  };
  std::vector<int32_t> work(n);
  std::vector<char> queued(n, 1);
  for (int32_t r = 0; r < n; ++r) work[r] = n - 1 - r;
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    queued[r] = 0;
    const int32_t v = eval(r);
    if (v >= minlen[r]) continue;
    minlen[r] = v;
    for (int32_t c : callers[r])
      if (!queued[c]) {
        queued[c] = 1;
        work.push_back(c);
      }
  }
  rest_.assign(el.size(), 0);
  for (size_t p = el.size(); p-- > 0;) {
    if (el[p].kind == GrammarElement::kEnd) continue;
    const int32_t own = el[p].kind == GrammarElement::kBytes ? 1 : minlen[el[p].value];
    rest_[p] = sat_add(own, rest_[p + 1]);
  }
}

void GrammarAutomaton::begin_closure() {
  step_nodes_base_ = nodes_.size();
  found_.clear();
  found_accepting_ = false;
  if (++stamp_ == 0) {  // wrapped: old stamps could collide
    std::fill(visited_.begin(), visited_.end(), 0);
    std::fill(pos_stamp_.begin(), pos_stamp_.end(), 0);
    stamp_ = 1;
  }
}

int32_t GrammarAutomaton::intern_node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto it = node_index_.find(key);
  if (it != node_index_.end()) return it->second;
  const int32_t depth = parent == kEmptyStack ? 1 : nodes_[parent].depth + 1;
  if (depth > kMaxStackDepth)
    throw InvalidRequestError("grammar nesting exceeds " + std::to_string(kMaxStackDepth) +
                              " levels of rule calls");
  if (nodes_.size() - step_nodes_base_ >= kMaxNewNodesPerStep)
    throw InvalidRequestError("grammar is too ambiguous: one step expands to more than " +
                              std::to_string(kMaxNewNodesPerStep) +
                              " parser stacks (nested repetitions of something that may be empty?)");
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent, depth});
  node_dist_.push_back(sat_add(rest_[pos], parent == kEmptyStack ? 0 : node_dist_[parent]));
  node_index_.emplace(key, id);
  return id;
}

void GrammarAutomaton::close(int32_t stack) {
  const auto& el = grammar_->elements();
  work_.clear();
  work_.push_back(stack);
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (id == kEmptyStack) {
      found_accepting_ = true;
      continue;
    }
    if (static_cast<size_t>(id) >= visited_.size()) visited_.resize(nodes_.size() + 1024, 0);
    if (visited_[id] == stamp_) continue;
    visited_[id] = stamp_;
    const StackNode node = nodes_[id];
    const GrammarElement e = el[node.pos];
    if (e.kind == GrammarElement::kBytes) {
      found_.push_back(id);
      if (pos_stamp_.size() <= static_cast<size_t>(node.pos)) {
        pos_stamp_.resize(el.size(), 0);
        pos_count_.resize(el.size(), 0);
      }
      if (pos_stamp_[node.pos] != stamp_) {
        pos_stamp_[node.pos] = stamp_;
        pos_count_[node.pos] = 0;
      }
      if (++pos_count_[node.pos] > kMaxStacksPerElement)
        throw InvalidRequestError("grammar is too ambiguous: more than " + std::to_string(kMaxStacksPerElement) +
                                  " ways to parse the same input at once (nested repetitions?)");
    } else if (e.kind == GrammarElement::kEnd) {
      work_.push_back(node.parent);
    } else {
      // A call in tail position returns straight to our caller: no frame for "after the call".
      const int32_t ret = el[node.pos + 1].kind == GrammarElement::kEnd ? node.parent : intern_node(node.pos + 1, node.parent);
      for (int32_t start : grammar_->alternatives(e.value)) work_.push_back(intern_node(start, ret));
    }
  }
}

int32_t GrammarAutomaton::intern_state() {
  std::sort(found_.begin(), found_.end());
  found_.erase(std::unique(found_.begin(), found_.end()), found_.end());
  if (found_.empty() && !found_accepting_) return kDead;
  std::string key(reinterpret_cast<const char*>(found_.data()), found_.size() * sizeof(int32_t));
  key += found_accepting_ ? '\1' : '\0';
  auto it = state_index_.find(key);
  if (it != state_index_.end()) return it->second;
  if (states_.size() >= kMaxStates)
    throw InvalidRequestError("grammar automaton exceeds " + std::to_string(kMaxStates) +
                              " states; the grammar is too ambiguous to track");
  const int32_t id = static_cast<int32_t>(states_.size());
  int32_t dist = found_accepting_ ? 0 : kUnreachable;
  for (int32_t sid : found_) dist = std::min(dist, node_dist_[sid]);
  states_.push_back({found_, found_accepting_, dist});
  state_index_.emplace(std::move(key), id);
  transitions_.resize(transitions_.size() + 256, kUnknown);
  return id;
}

int32_t GrammarAutomaton::compute_next(int32_t state, uint8_t byte) {
  const auto& el = grammar_->elements();
  // Copy: close() may grow states_/nodes_ and move their storage.
  const std::vector<int32_t> stacks = states_[state].stacks;
  begin_closure();
  for (int32_t sid : stacks) {
    const StackNode node = nodes_[sid];
    if (grammar_->byte_set(el[node.pos].value).has(byte)) close(intern_node(node.pos + 1, node.parent));
  }
  const int32_t next = intern_state();
  transitions_[static_cast<size_t>(state) * 256 + byte] = next;
  return next;
}

int32_t GrammarAutomaton::next(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace edgellm::grammar
