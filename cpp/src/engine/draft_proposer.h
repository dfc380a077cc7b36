// Speculative decoding with a draft model (issue 18, item 1): a small model with the target's
// vocabulary runs beside it on the engine thread, in a KV cache of its own whose slots mirror
// the target's sequence slots, and proposes the next k tokens of each decoding sequence. The
// engine verifies them with one target forward (engine.cpp); this unit only drafts.
//
// One propose() call serves every sequence that wants a draft this step, batched: first each
// sequence's draft KV catches up with the tokens it has not seen (the prompt on the first call,
// then the tokens accepted since the last one) — all but the last known token, in chunks under
// max_batch_tokens — then k autoregressive steps, each one batch of one token per sequence.
// Sequences asking for fewer tokens drop out of the later steps.
//
// At temperature <= 0 a drafted token is the draft's argmax. At temperature > 0 it is drawn from
// the draft's distribution under the request's own sampling chain (Sampler::distribution with the
// request's parameters, with a generator of the slot's own seeded from (seed, key), so a seeded
// request repeats whatever shares its batch), and that distribution q is returned with it:
// the engine accepts with min(1, p/q) and resamples from the residual (the speculative sampling
// rule), so the output is distributed as the target's.
//
// Slots are owned by a sequence key (the engine's per-sequence arrival number): a slot whose key
// changed is reset before use, so a preempted or finished sequence's draft KV never leaks into
// the next owner. When the draft's KV pool is full a sequence simply gets no draft this step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/engine_model.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/batch.h"

namespace edgellm {

class Tokenizer;

// Throws InvalidRequestError naming the first difference unless `draft` can draft for `target`:
// the same tokenizer kind (BPE / SPM) and pre-tokenizer, the same BOS / EOS / EOG ids, vocabulary
// sizes within 128 of each other, and identical token texts for every id both have.
void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft);

struct DraftRequest {
  int slot = -1;                              // the target's KV slot of the sequence
  uint64_t key = 0;                           // unique per sequence (a slot's owner)
  const std::vector<int32_t>* tokens = nullptr;  // prompt + accepted tokens (the last is not in the target's KV yet)
  int32_t k = 0;                              // tokens wanted (0: none)
  const Sampler* sampler = nullptr;           // the sequence's sampler: params() give the chain
  int32_t n_generated = 0;                    // of *tokens, how many were generated (min_tokens masks)
  // Out:
  std::vector<int32_t> draft;                 // 0..k tokens
  std::vector<std::vector<TokenProb>> q;      // temperature > 0: the distribution each was drawn from
};

struct DraftStats {
  int64_t forwards = 0;        // draft forward passes
  int64_t tokens = 0;          // tokens run through the draft (catch-up + drafting)
  double seconds = 0.0;        // time in draft forwards
};

class DraftProposer {
 public:
  // `target_n_vocab`: drafted ids are always < it (draft-only ids are masked). The KV pool holds
  // `positions` token positions per group (pages of `page_size`), `max_slots` sequence slots.
  DraftProposer(std::shared_ptr<EngineModel> draft, int32_t target_n_vocab, int32_t max_slots, int64_t positions,
                int32_t page_size, DType kv_type, int32_t max_batch_tokens, uint64_t seed);
  ~DraftProposer();

  void propose(std::vector<DraftRequest>& reqs);
  // The sequence in `slot` (owner `key`) keeps only its first n tokens (rejected drafts rolled back).
  void rollback(int slot, uint64_t key, int32_t n);
  // Frees the draft KV of every slot whose owner is not in `live` (slot, key) pairs.
  void retain(const std::vector<std::pair<int, uint64_t>>& live);
  void release(int slot);

  // At most this many catch-up tokens per propose() call (0: no limit, the default). A sequence
  // cut short keeps what was computed and gets no draft this call; the next calls continue, so a
  // long prompt's catch-up is spread over steps instead of stalling one.
  void set_catch_up_budget(int32_t tokens) { catch_up_budget_ = tokens > 0 ? tokens : 0; }

  // Tokens a propose() for this sequence would first have to run through the draft (catch-up):
  // all of them but the last for a slot it does not own yet.
  int32_t behind(int slot, uint64_t key, const std::vector<int32_t>& tokens) const;

  const DraftStats& stats() const { return stats_; }
  int64_t pages_used() const;
  int32_t n_vocab() const { return n_vocab_; }

 private:
  struct SlotState {
    uint64_t key = 0;
    bool owned = false;
    int32_t n_computed = 0;  // positions in the draft KV
    // Positions [0, n_real) of the draft KV hold the sequence's own tokens (a sequence's token
    // list only grows); positions [n_real, n_computed) hold the drafted tokens `drafted`, which
    // the next propose() checks against the tokens then known (so a missed or generous
    // rollback() never leaves wrong tokens in the draft KV).
    int32_t n_real = 0;
    std::vector<int32_t> drafted;
    std::unique_ptr<Sampler> rng;  // draws at temperature > 0 (draw_from only)
  };
  void reset(int slot);
  // Shrinks the slot's draft KV to n positions (released entirely when a sliding-window page
  // that position n still sees was already trimmed).
  void shrink(int slot, int32_t n);
  bool window_intact(int slot, int32_t n) const;
  void run_forward();
  // Chooses the next draft token of request r from logits row `row`; false when none can be
  // chosen (every token masked).
  bool choose(DraftRequest& r, const float* row, std::vector<int32_t>& history);
  std::shared_ptr<EngineModel> model_;
  int32_t target_n_vocab_ = 0, n_vocab_ = 0, max_batch_tokens_ = 0;
  std::unique_ptr<KVCache> kv_;
  std::vector<SlotState> slots_;
  Batch batch_;
  std::vector<float> logits_, work_;
  std::vector<TokenProb> q_;
  int32_t max_window_ = 0;
  int32_t catch_up_budget_ = 0;
  uint64_t seed_ = 0;
  DraftStats stats_;
};

}  // namespace edgellm
