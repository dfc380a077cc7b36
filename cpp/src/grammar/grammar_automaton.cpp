#include <algorithm>

#include "common/errors.h"
#include "grammar/grammar.h"

namespace edgellm::grammar {

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  begin_closure();
  for (int32_t start : grammar_->alternatives(grammar_->root())) close(intern_node(start, kEmptyStack));
  initial_ = intern_state();
  if (initial_ == kDead) throw InvalidRequestError("grammar matches nothing: its root rule has no alternative");
}

void GrammarAutomaton::begin_closure() {
  found_.clear();
  found_accepting_ = false;
  if (++stamp_ == 0) {  // wrapped: old stamps could collide
    std::fill(visited_.begin(), visited_.end(), 0);
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
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent, depth});
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
  states_.push_back({found_, found_accepting_});
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
