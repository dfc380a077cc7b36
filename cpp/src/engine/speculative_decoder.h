// Speculative decoding (issue 18), the engine's part of it as one unit: which sequences get a
// draft each step and how long (proposal, spec_policy.h's measured cost against acceptance),
// where the drafts come from (a sequence's own history, ngram_proposer.h; a draft model,
// draft_proposer.h), and the verification of one sequence's drafted rows after the target's
// forward. The Engine calls propose() before scheduling a step and verify() while sampling it;
// the per-sequence state (its drafts, its proposers' acceptance) lives in the Sequence.
//
// Modes. Off: one token per sequence per step. Ngram: drafts copied from the sequence's own
// history (prompt lookup). Draft: drafts from a draft model. Auto: the n-gram proposal when the
// history has one, else the draft model's when there is one. Every mode but Off is adaptive:
// per sequence the expected tokens per step (from its acceptance) are weighed against the
// measured cost of verifying k more tokens (and of drafting them), and k shrinks to 0 where
// drafting would not pay.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/draft_proposer.h"
#include "engine/engine_model.h"
#include "engine/sequence.h"
#include "engine/spec_policy.h"

namespace edgellm {

enum class SpecMode { Off, Ngram, Draft, Auto };

struct SpeculativeConfig {
  SpecMode mode = SpecMode::Off;
  int32_t max_draft = 0;   // most tokens drafted per step (num_speculative_tokens); 0 = default (32 n-gram, 8 draft)
  bool adaptive = true;    // false: always draft max_draft tokens when there is a proposal (tests, benchmarks)
  // n-gram lengths matched, longest first. Up to 12: in code a 4-token context recurs all over
  // (indentation, `self.`, `return `) and points at the wrong place; a 12-token one finds the
  // passage being copied (code edit: 99.6 % acceptance, 15.4 tokens per step, against 86-92 %
  // and ~8 with at most 4).
  int32_t ngram_max = 12, ngram_min = 1;
};

// The draft model's KV pool: slots mirroring the target's, `positions` token positions in all.
struct DraftPool {
  int32_t slots = 0;
  int64_t positions = 0;
  int32_t page_size = 32;
  DType kv_type = DType::F16;
};

struct SpecCounters {
  int64_t drafted = 0, accepted = 0, steps = 0;  // tokens proposed and verified, accepted; verify steps
  int64_t draft_forwards = 0;                      // the draft model's forward passes and time
  double draft_seconds = 0.0;
};

// The acceptance the policy expects of an n-gram draft from a match of n tokens in `s`: that
// length's record over the record of the matches at least as long (its prior).
double ngram_alpha(const Sequence& s, int32_t n);

class SpeculativeDecoder {
 public:
  // Throws InvalidRequestError for a bad max_draft, or mode Draft without a draft model. The
  // draft model (Draft / Auto only) gets a KV pool of `pool`.
  SpeculativeDecoder(const SpeculativeConfig& cfg, std::shared_ptr<EngineModel> draft_model, int32_t n_vocab,
                     int32_t n_ctx, int32_t max_batch_tokens, const DraftPool& pool);

  // A new sequence (at submit): its n-gram proposer reads the prompt.
  void start(Sequence* s, const std::vector<int32_t>& prompt) const;
  // Before a step is scheduled: sets each running decoding sequence's draft (possibly none).
  void propose(const std::vector<std::shared_ptr<Sequence>>& running);
  // A step of `tokens` batch tokens took `seconds` (the cost model behind the draft lengths).
  void observe_step(int32_t tokens, double seconds) { step_cost_.observe(tokens, seconds); }

  // Samples one sequence's verify rows (its n_draft drafted positions and the one after them,
  // `rows` their logits, n_vocab floats each; `work` the row copy sampled from) in order until the
  // first rejection: `mask` constrains the copy in place, `emit` posts a sampled token (it may
  // finish or shift the sequence: the walk stops there), `fail` ends the sequence with an error
  // from sampling.
  // Returns the drafted tokens accepted.
  struct Hooks {
    std::function<void(float*)> mask;
    std::function<void(int32_t token, TokenLogprob* lp)> emit;
    std::function<void(const std::string&)> fail;
  };
  int32_t verify(Sequence* s, int32_t n_draft, const float* rows, int32_t n_vocab, std::vector<float>& work,
                 const Hooks& hooks);
  // After verify, once the target's KV kept only the accepted tokens: the draft's KV follows.
  void rollback(const Sequence* s);
  // The sequence's context shifted: its drafts and draft KV follow the old positions.
  void forget(Sequence* s);

  SpecCounters counters() const;

 private:
  int32_t max_draft(bool from_model) const;

  SpeculativeConfig cfg_;
  int32_t n_ctx_ = 0, max_batch_tokens_ = 0;
  std::unique_ptr<DraftProposer> draft_;
  StepCostModel step_cost_;
  std::vector<DraftRequest> draft_reqs_;
  std::vector<TokenProb> spec_p_;
  double draft_forward_seconds_ = 0.0;   // recent draft forward time (one token per sequence)
  double draft_catch_up_seconds_ = 0.0;  // recent draft time per catch-up token
  int64_t drafted_ = 0, accepted_ = 0, steps_ = 0;
};

}  // namespace edgellm
