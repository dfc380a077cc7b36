#include "engine/scheduler.h"

#include <algorithm>

namespace edgellm {

Scheduler::Scheduler(KVCache& kv, PrefixCache* cache, int32_t n_slots, int32_t max_batch_tokens)
    : kv_(kv), cache_(cache), max_batch_tokens_(max_batch_tokens) {
  for (int s = n_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

void Scheduler::enqueue(std::shared_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }

int Scheduler::acquire_slot() {
  const int s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void Scheduler::release_slot(int slot) { free_slots_.push_back(slot); }

bool Scheduler::reserve_evicting(int slot, int32_t n) {
  while (!kv_.reserve(slot, n)) {
    if (!cache_) return false;
    // Both groups draw on one byte budget, so a cached page of either helps: first a group that
    // is short on its own, then one the sequence needs pages of, then any.
    bool evicted = false;
    for (KvGroup g : kKvGroups)
      if (!evicted && kv_.pages_needed(slot, n, g) > kv_.pages_free(g)) evicted = cache_->evict_one(g);
    for (KvGroup g : kKvGroups)
      if (!evicted && kv_.pages_needed(slot, n, g) > 0) evicted = cache_->evict_one(g);
    for (KvGroup g : kKvGroups)
      if (!evicted) evicted = cache_->evict_one(g);
    if (!evicted) return false;
  }
  return true;
}

void Scheduler::preempt(size_t i) {
  std::shared_ptr<Sequence> s = running_[i];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  kv_.release(s->slot);
  release_slot(s->slot);
  s->slot = -1;
  s->n_computed = 0;
  s->cache_cursor = s->fresh_cursor();
  s->draft.clear();
  s->draft_q.clear();
  if (s->want_prompt_logprobs) s->prompt_logprobs.clear();
  if (s->embedding) s->embd.reset();  // its rows are produced again by the recompute
  ++s->preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(s));
}

void Scheduler::add_chunk(Sequence* s, int32_t n, Batch& batch, std::vector<ScheduledChunk>& plan) {
  ScheduledChunk c;
  c.seq = s;
  c.start = s->n_computed;
  c.n_tokens = n;
  const int32_t end = s->n_computed + n;
  c.samples = end == static_cast<int32_t>(s->tokens.size());
  const int32_t first_token = batch.size();
  int32_t row = batch.n_outputs();
  int32_t hidden_row = batch.n_hidden_outputs();
  for (int32_t p = c.start; p < end; ++p) {
    const bool logits =
        (s->want_prompt_logprobs && p < s->n_prompt) || (c.samples && !s->embedding && p == end - 1);
    if (logits) {
      if (c.first_row < 0) c.first_row = row;
      ++row;
      ++c.n_rows;
    }
    const bool hidden = s->embedding && s->embd.uses_position(p, s->n_prompt);
    if (hidden) {
      if (c.first_hidden_row < 0) c.first_hidden_row = hidden_row;
      ++hidden_row;
      ++c.n_hidden_rows;
    }
    if (const PromptImage* im = s->images.empty() ? nullptr : image_at(s->images, p)) {
      const size_t width = im->embd->size() / static_cast<size_t>(im->n_tokens);
      batch.add(im->token, p, s->slot, logits, hidden);
      batch.set_image_row(im->embd->data() + static_cast<size_t>(p - im->pos) * width,
                          im->bidirectional ? im->last() : -1);
    } else {
      batch.add(s->tokens[p], p, s->slot, logits, hidden);
    }
    if (s->mrope) {
      int32_t p3[3];
      mrope_position(s->images, p, p3);
      batch.set_rope_pos(p3);
    }
  }
  if (c.samples && !s->embedding && !s->draft.empty()) {
    // Verification: the drafted tokens follow the last known one, each row sampled (in order)
    // and each computed exactly as a decode step of that position would (Batch::exact_row).
    batch.exact_row.back() = 1;
    const int32_t nd = static_cast<int32_t>(s->draft.size());
    for (int32_t i = 0; i < nd; ++i) batch.add(s->draft[i], end + i, s->slot, true, false, true);
    c.n_draft = nd;
    c.n_tokens += nd;
    c.n_rows += nd;
  }
  batch.set_lora(first_token, s->lora.get());
  if (!s->started()) {
    s->advance(SequenceStatus::Prefill);
    s->t_start = Clock::now();
  }
  plan.push_back(c);
}

void Scheduler::schedule(Batch& batch, std::vector<ScheduledChunk>& plan) {
  batch.clear();
  plan.clear();
  int32_t budget = max_batch_tokens_;

  // Running sequences, oldest first; the newest are preempted when pages run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i].get();
    int32_t k = std::min(s->remaining(), budget);
    if (s->want_prompt_logprobs) k = std::min(k, kPromptLogprobChunk);
    if (!s->images.empty()) {
      k = fit_image_chunk(s->images, s->n_computed, k, budget);
      if (k == 0) {  // its next image block needs more than this step's budget left: next step
        ++i;
        continue;
      }
    }
    if (!s->draft.empty()) {
      if (s->remaining() != 1 || s->embedding) {
        s->draft.clear();
        s->draft_q.clear();
      } else if (static_cast<int32_t>(s->draft.size()) > budget - 1) {
        s->draft.resize(std::max(0, budget - 1));
        if (s->draft_q.size() > s->draft.size()) s->draft_q.resize(s->draft.size());
      }
    }
    int32_t nd = static_cast<int32_t>(s->draft.size());
    bool preempted_self = false;
    while (!reserve_evicting(s->slot, s->n_computed + k + nd)) {
      if (nd > 0) {  // a draft is never worth a preemption: verify nothing this step instead
        s->draft.clear();
        s->draft_q.clear();
        nd = 0;
        continue;
      }
      const size_t victim = running_.size() - 1;
      preempted_self = victim == i;
      preempt(victim);
      if (preempted_self) break;
    }
    if (preempted_self) break;  // everything after it is gone too
    add_chunk(s, k, batch, plan);
    budget -= k + nd;
    ++i;
  }

  // Waiting sequences, first come first served; siblings blocked on their parent are skipped.
  while (budget > 0 && !free_slots_.empty()) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(), [](const auto& s) { return !s->blocked(); });
    if (it == waiting_.end()) break;
    std::shared_ptr<Sequence> s = *it;
    if (whole_prompts_ && s->remaining() > budget) break;  // next step, whole
    const int slot = acquire_slot();
    s->slot = slot;
    s->n_computed = 0;
    if (cache_ && s->use_prefix_cache) {
      // At least the last token is recomputed: its logits choose the next token.
      const int32_t hit =
          cache_->attach_prefix(slot, s->tokens.data(), static_cast<int32_t>(s->tokens.size()) - 1, s->lora_key);
      s->n_computed = hit;
      s->cache_cursor = s->fresh_cursor();
      if (!s->started()) s->cached_tokens = hit;
    }
    int32_t k = std::min(s->remaining(), budget);
    if (s->want_prompt_logprobs) k = std::min(k, kPromptLogprobChunk);
    if (!s->images.empty()) k = fit_image_chunk(s->images, s->n_computed, k, budget);
    if (k == 0 || !reserve_evicting(slot, s->n_computed + k)) {
      kv_.release(slot);
      release_slot(slot);
      s->slot = -1;
      s->n_computed = 0;
      break;  // FCFS: nobody overtakes the head of the queue
    }
    waiting_.erase(it);
    running_.push_back(s);
    add_chunk(s.get(), k, batch, plan);
    budget -= k;
  }
}

void Scheduler::complete(const std::vector<ScheduledChunk>& plan) {
  for (const auto& c : plan) {
    Sequence* s = c.seq;
    if (c.n_draft > 0) {
      // Verification: every drafted position was written; only the last known token is
      // certainly the sequence's. commit_draft() settles the rest once the rows are sampled.
      s->n_computed = c.start + c.n_tokens - c.n_draft;
      kv_.set_n_positions(s->slot, c.start + c.n_tokens);
      continue;
    }
    s->n_computed = c.start + c.n_tokens;
    if (c.start < s->n_prompt && s->n_shifted == 0) s->prompt_computed += std::min(s->n_computed, s->n_prompt) - c.start;
    kv_.set_n_positions(s->slot, s->n_computed);
    // Register before trimming so cached prefixes keep the window pages they need.
    if (cache_ && !s->embedding) cache_->register_pages(s->slot, s->tokens.data(), s->n_computed, s->cache_cursor);
    kv_.trim_window(s->slot, s->n_computed);
  }
}

void Scheduler::commit_draft(Sequence* s, int32_t accepted) {
  s->n_computed += accepted;
  s->draft.clear();
  s->draft_q.clear();
  if (s->slot < 0) return;
  kv_.truncate(s->slot, s->n_computed);
  kv_.set_n_positions(s->slot, s->n_computed);
  if (cache_) cache_->register_pages(s->slot, s->tokens.data(), s->n_computed, s->cache_cursor);
  kv_.trim_window(s->slot, s->n_computed);
}

void Scheduler::restart(Sequence* s) {
  if (s->slot < 0) {  // waiting (not admitted): it is computed from its tokens anyway
    s->n_computed = 0;
    return;
  }
  kv_.release(s->slot);
  s->n_computed = 0;
  s->cache_cursor = s->fresh_cursor();
  s->draft.clear();
  s->draft_q.clear();
  if (cache_ && s->use_prefix_cache) {
    // At least the last token is recomputed: its logits choose the next token.
    s->n_computed =
        cache_->attach_prefix(s->slot, s->tokens.data(), static_cast<int32_t>(s->tokens.size()) - 1, s->lora_key);
  }
}

void Scheduler::finish(Sequence* s) {
  auto r = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == s; });
  if (r != running_.end()) running_.erase(r);
  auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& p) { return p.get() == s; });
  if (w != waiting_.end()) waiting_.erase(w);
  if (s->slot >= 0) {
    kv_.release(s->slot);
    release_slot(s->slot);
    s->slot = -1;
  }
}

bool Scheduler::fork_into(Sequence* parent, const std::shared_ptr<Sequence>& child) {
  if (free_slots_.empty() || parent->slot < 0) return false;
  const int slot = acquire_slot();
  while (!kv_.fork(parent->slot, slot, parent->n_computed)) {
    bool evicted = false;
    for (KvGroup g : kKvGroups)
      if (!evicted && cache_ && kv_.pages_free(g) < 1) evicted = cache_->evict_one(g);
    for (KvGroup g : kKvGroups)
      if (!evicted && cache_) evicted = cache_->evict_one(g);  // the budget is shared: any cached page helps
    if (!evicted) {
      release_slot(slot);
      return false;
    }
  }
  child->slot = slot;
  child->n_computed = parent->n_computed;
  child->cache_cursor = parent->cache_cursor;
  child->advance(SequenceStatus::Prefill);
  child->t_start = parent->t_start;
  auto w = std::find(waiting_.begin(), waiting_.end(), child);
  if (w != waiting_.end()) waiting_.erase(w);
  running_.push_back(child);
  return true;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::remove_request(int64_t request_id) {
  std::vector<std::shared_ptr<Sequence>> out;
  for (const auto& s : running_)
    if (s->request_id == request_id) out.push_back(s);
  for (const auto& s : waiting_)
    if (s->request_id == request_id) out.push_back(s);
  for (const auto& s : out) finish(s.get());
  return out;
}

std::shared_ptr<Sequence> Scheduler::find(Sequence* s) const {
  for (const auto& p : running_)
    if (p.get() == s) return p;
  for (const auto& p : waiting_)
    if (p.get() == s) return p;
  return nullptr;
}

bool Scheduler::reserve_outside(int slot, int32_t n) {
  while (!reserve_evicting(slot, n)) {
    if (running_.empty()) return false;
    preempt(running_.size() - 1);
  }
  return true;
}

}  // namespace edgellm
