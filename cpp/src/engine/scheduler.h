// Who runs next. Each step builds one batch under a token budget: running sequences first, in
// admission order (a decoding sequence adds one token, a prefilling one a chunk of its prompt),
// then waiting sequences first-come-first-served while budget, slots and pages last. Pages come
// from the KV pool, then from evicting prefix-cache pages nobody uses; when a running sequence
// still cannot grow, the newest running sequence is preempted: its pages are freed and it goes
// back to the front of the waiting queue, to be recomputed (prompt + generated tokens) later.
// A decoding sequence with a speculative draft adds its last token plus the drafted tokens (cut
// to the budget; dropped when it is preempted).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/batch.h"

namespace edgellm {

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t start = 0;      // first position computed by this chunk
  int32_t n_tokens = 0;
  int32_t first_row = -1; // first logits row of the chunk (rows are in batch order)
  int32_t n_rows = 0;
  bool samples = false;   // the chunk reaches the last known token: its last row is sampled
                          // (embedding sequences: the prompt is complete, nothing is sampled)
  int32_t first_hidden_row = -1;  // embedding sequences: the chunk's hidden-state rows
  int32_t n_hidden_rows = 0;
  // Speculative verification: the chunk is the last known token followed by n_draft drafted
  // tokens (seq->draft), each with a logits row and a query block of its own. complete() counts
  // only the first token as computed; commit_draft() adds the accepted drafts after sampling.
  int32_t n_draft = 0;
};

class Scheduler {
 public:
  // Prompt-logprob chunks are kept small: every token of them needs a full logits row.
  static constexpr int32_t kPromptLogprobChunk = 64;

  Scheduler(KVCache& kv, PrefixCache* cache, int32_t n_slots, int32_t max_batch_tokens);

  void enqueue(std::shared_ptr<Sequence> s);
  // Encoders (non-causal models): every prompt is scheduled whole, in one batch.
  void set_whole_prompts(bool whole) { whole_prompts_ = whole; }
  void schedule(Batch& batch, std::vector<ScheduledChunk>& plan);
  // After the forward pass: positions computed, pages registered with the prefix cache, window
  // pages no query can see any more returned.
  void complete(const std::vector<ScheduledChunk>& plan);
  // After a verify chunk was sampled: its first `accepted` drafted tokens are now the sequence's
  // tokens, the KV of the rejected ones is dropped (pages past them freed), and the verified
  // positions are registered with the prefix cache (never a rejected one).
  void commit_draft(Sequence* s, int32_t accepted);
  // Context shift: `s` (running) had its tokens replaced by the kept ones; its KV pages are
  // released and it is recomputed from position 0 like a prompt (the prefix cache's pages
  // reused where they match), keeping its slot and place among the running sequences.
  void restart(Sequence* s);
  // Frees the sequence's pages and slot and drops it from the queues.
  void finish(Sequence* s);
  // Starts `child` on a copy of `parent`'s KV (shared full pages); false when no slot or page.
  bool fork_into(Sequence* parent, const std::shared_ptr<Sequence>& child);
  // Removes every sequence of a request (freeing its pages); returns them.
  std::vector<std::shared_ptr<Sequence>> remove_request(int64_t request_id);
  // Reserves positions [0, n) for a slot outside the queues (eval_logits), evicting cached pages
  // and preempting running sequences as needed. False if the pool cannot hold n positions.
  bool reserve_outside(int slot, int32_t n);
  std::shared_ptr<Sequence> find(Sequence* s) const;

  size_t n_running() const { return running_.size(); }
  size_t n_waiting() const { return waiting_.size(); }
  int64_t preemptions() const { return preemptions_; }
  int32_t free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::shared_ptr<Sequence>>& waiting() const { return waiting_; }

 private:
  bool reserve_evicting(int slot, int32_t n);
  void preempt(size_t running_index);
  int acquire_slot();
  void release_slot(int slot);
  void add_chunk(Sequence* s, int32_t n, Batch& batch, std::vector<ScheduledChunk>& plan);

  KVCache& kv_;
  PrefixCache* cache_;
  int32_t max_batch_tokens_;
  bool whole_prompts_ = false;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order: newest last
  std::vector<int> free_slots_;
  int64_t preemptions_ = 0;
};

}  // namespace edgellm
