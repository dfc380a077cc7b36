// One completion in flight: its tokens (prompt + generated), how much of them the KV cache
// holds, its sampler, stop-string state and output channel. A request with n > 1 is n
// sequences; the first computes the prompt and the others fork its pages.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/constraint.h"
#include "engine/embedding.h"
#include "engine/ngram_proposer.h"
#include "engine/output_channel.h"
#include "engine/prompt_image.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "kv/prefix_cache.h"
#include "model/lora.h"

namespace edgellm {

using Clock = std::chrono::steady_clock;

// Per-token acceptance of one proposer for one sequence, recent steps weighted more (counts
// decay by kDecay per verify step) under a uniform prior: alpha() starts at 0.5.
struct SpecAcceptance {
  static constexpr double kDecay = 0.85;
  double accepted = 0.0, rejected = 0.0;
  // A verify step: `drafted` proposed, the first `n_accepted` of them accepted.
  void update(int32_t drafted, int32_t n_accepted) {
    accepted = accepted * kDecay + n_accepted;
    rejected = rejected * kDecay + (n_accepted < drafted ? 1.0 : 0.0);
  }
  double alpha() const { return (accepted + 1.0) / (accepted + rejected + 2.0); }
  // The same with `prior` (another estimate, e.g. the longer n-gram matches of the sequence) in
  // place of the uniform 1/2, weighted as two steps; alpha() == alpha_given(0.5).
  double alpha_given(double prior) const { return (accepted + 2.0 * prior) / (accepted + rejected + 2.0); }
};

// Where a sequence is in its life. It only moves forward (advance()): a preempted sequence keeps
// its status (Prefill or Decode) while it waits to be admitted again.
enum class SequenceStatus {
  Blocked,   // n > 1, completions 1..: waiting for completion 0 to compute the prompt (then fork it)
  Waiting,   // not admitted yet
  Prefill,   // admitted at least once (t_start set), no token yet
  Decode,    // first token sampled (t_first set); an embedding: its vector is ready
  Finished,  // its last event was built (Engine::finish)
};

struct Sequence {
  int64_t request_id = 0;
  int32_t index = 0;                   // completion index within the request
  int64_t arrival = 0;                 // FCFS order
  std::shared_ptr<OutputChannel> out;

  std::vector<int32_t> tokens;         // prompt followed by generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;              // positions [0, n_computed) are in the KV cache
  int slot = -1;                       // KV sequence slot while admitted
  PrefixCache::Cursor cache_cursor;    // pages registered with the prefix cache
  bool use_prefix_cache = true;
  // The LoRA adapters it runs with (null: the base alone). Held here, so an adapter unloaded
  // while the sequence runs stays until it finishes. lora_key roots its prefix-cache chain.
  std::shared_ptr<const LoraMix> lora;
  uint64_t lora_key = 0;
  PrefixCache::Cursor fresh_cursor() const { return {0, lora_key}; }

  // Image blocks of the prompt (engine/prompt_image.h): their positions in `tokens` hold key
  // tokens; such a sequence never shifts its context and drafts nothing.
  std::vector<PromptImage> images;
  bool mrope = false;  // an image has a grid: every position gets M-RoPE positions (prompt_image.h)

  int32_t max_tokens = -1;             // < 0: until EOG or n_ctx
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TokenConstraint> constraint;
  StopMatcher stop;

  // n > 1: completions 1.. wait for completion 0 to compute the prompt, then fork its pages.
  Sequence* parent = nullptr;
  std::vector<Sequence*> siblings;     // on completion 0: those still waiting to fork
  SequenceStatus status = SequenceStatus::Waiting;

  bool want_prompt_logprobs = false;   // rows for every prompt token still to be produced
  std::vector<TokenLogprob> prompt_logprobs;
  bool prompt_logprobs_sent = false;

  // Embedding request: never sampled; the prompt's final-norm hidden states are pooled and the
  // sequence finishes once its prompt is computed. Not matched against or added to the prefix cache.
  bool embedding = false;
  EmbeddingPool embd;

  int32_t cached_tokens = 0;           // prefix-cache hit at first admission
  // return_progress: prompt-progress events (completion 0 of a streaming request only).
  bool return_progress = false;
  int32_t progress_sent = -1;          // `processed` of the last progress event; -1: none yet
  Clock::time_point t_progress;        // when the first progress event was sent
  int32_t prompt_computed = 0;         // prompt tokens computed by this sequence
  Clock::time_point t_start, t_first, t_last;
  int32_t preemptions = 0;
  // Context shift: tokens dropped from `tokens` so far (they stay in the output already sent;
  // n_generated() counts them), how many shifts, and the request's n_keep.
  int32_t n_shifted = 0;
  int32_t context_shifts = 0;
  int32_t n_keep = 0, n_discard = 0;

  // Speculative decoding (engine.cpp, spec_policy.h). `draft` holds the tokens proposed for the
  // next step: the scheduler appends them after the last known token and the step verifies them;
  // `draft_q` their draft-model distributions (temperature > 0 only); `draft_from_model` which
  // proposer made them. `ngram` sees every accepted token (prompt, then generated).
  std::vector<int32_t> draft;
  std::vector<std::vector<TokenProb>> draft_q;
  bool draft_from_model = false;
  std::unique_ptr<NgramProposer> ngram;
  // Acceptance per n-gram match length (index n; a long match is a better predictor than a
  // one-token one), and of the draft model; draft_ngram_n: the match length of the current draft.
  std::vector<SpecAcceptance> accept_ngram;  // per match length
  SpecAcceptance accept_draft;
  int32_t draft_ngram_n = 0;
  int32_t draft_n = 0, draft_n_accepted = 0;  // this completion's totals (timings)

  bool blocked() const { return status == SequenceStatus::Blocked; }
  bool started() const { return status >= SequenceStatus::Prefill; }
  bool has_first_token() const { return status >= SequenceStatus::Decode; }
  void advance(SequenceStatus to) {
    if (status < to) status = to;
  }
  // A blocked sibling computes the prompt itself from now on (or forks it right away).
  void unblock() {
    if (status == SequenceStatus::Blocked) status = SequenceStatus::Waiting;
  }

  int32_t n_generated() const { return static_cast<int32_t>(tokens.size()) + n_shifted - n_prompt; }
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
};

}  // namespace edgellm
