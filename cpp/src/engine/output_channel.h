// Results of one request travel from the engine thread to its caller through an OutputChannel:
// a mutex-protected queue of events the caller waits on (with the GIL released in Python).
// An optional file descriptor gets a byte per event so an asyncio loop can wait on it.
//
// The engine always sends a completion as it goes (an event per token). A caller that wants
// whole completions (a non-streaming request) asks its channel to collect them: then each
// completion's events are joined in the channel and only its final event is queued, carrying
// the completion's text, tokens and log-probs (and the prompt's log-probs, sent earlier).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace edgellm {

struct Timings {
  int32_t prompt_n = 0;        // prompt tokens computed (cache hits excluded)
  double prompt_ms = 0.0;      // first scheduled -> first token
  int32_t predicted_n = 0;     // tokens generated
  double predicted_ms = 0.0;   // first token -> last token
  int32_t draft_n = 0;         // speculative decoding: tokens drafted for this completion
  int32_t draft_n_accepted = 0;  // of them, accepted by the target (llama-server's names)
  int32_t context_shifts = 0;  // context shifts of this completion (EngineConfig::context_shift)
};

// Where the prefill of a prompt stands (llama-server's prompt_progress). processed counts the
// prompt positions in the KV cache, the `cache` tokens reused from the prefix cache included.
struct PromptProgress {
  int32_t total = 0;       // prompt tokens
  int32_t cache = 0;       // reused from the prefix cache at admission
  int32_t processed = 0;   // prompt tokens in the KV cache so far (cache .. total)
  double time_ms = 0.0;    // since the request's first progress event (0 on it)
};

// Why a completion ended. to_string gives the names Python and the HTTP API see.
enum class FinishReason {
  Stop,       // end-of-generation token, a stop token id or a stop string
  Length,     // max_tokens, or the end of the context
  Cancelled,  // Engine::abort
  Error,      // OutputEvent::error says what went wrong
};
const char* to_string(FinishReason r);

struct OutputEvent {
  int32_t index = 0;                     // completion index (n > 1)
  std::string text;                      // new text (whole UTF-8 characters; all text when not streaming)
  std::vector<int32_t> token_ids;        // new tokens (all tokens when not streaming)
  std::vector<TokenLogprob> logprobs;    // per new token when logprobs were asked for
  std::vector<TokenLogprob> prompt_logprobs;  // once, on the first event of completion 0
  bool has_prompt_logprobs = false;
  bool finished = false;
  FinishReason finish_reason = FinishReason::Stop;  // when finished
  int32_t stop_token = -1;               // stop_token_ids entry that ended it
  std::string stop_string;               // stop string that ended it
  bool has_stop_string = false;
  std::string error;                     // FinishReason::Error: what went wrong
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  Timings timings;
  // Embedding requests, on the final event: embedding_rows vectors of n_embd floats, row-major
  // (one pooled vector, or one per prompt token with pooling none).
  std::vector<float> embedding;
  int32_t embedding_rows = 0;
  // return_progress (streaming): an event of its own, never finished, no text or tokens; one at
  // admission (processed == cache, time 0), then one after each prefill chunk.
  bool has_progress = false;
  PromptProgress progress;
};

class OutputChannel {
 public:
  OutputChannel() = default;
  explicit OutputChannel(int notify_fd) : notify_fd_(notify_fd) {}

  void push(OutputEvent ev);
  // Waits up to `timeout_ms` for an event; false on timeout.
  bool pop(OutputEvent& ev, int64_t timeout_ms);
  bool try_pop(OutputEvent& ev);
  // Completions still expected to finish (set by the engine at submit).
  void expect(int32_t n_completions) { remaining_ = n_completions; }
  // Before submit: queue one event per completion, its final one, carrying everything before it
  // (an error's final event carries only the error, as a failed completion has no answer).
  void collect_whole() { whole_ = true; }
  bool collects_whole() const { return whole_; }
  // Every completion's last event was pushed (the engine will not touch the channel again).
  bool all_sent() const;
  // all_sent() and every event consumed.
  bool done() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OutputEvent> events_;
  int notify_fd_ = -1;
  int32_t remaining_ = 1;
  int32_t finished_pushed_ = 0;
  // collect_whole: per completion index, what its events carried so far.
  struct Whole {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprob> logprobs, prompt_logprobs;
    bool has_prompt_logprobs = false;
  };
  bool whole_ = false;
  std::vector<Whole> whole_events_;  // engine thread only (push)
  // Joins ev into its completion's record; true when ev (now whole) is to be queued.
  bool join(OutputEvent& ev);
};

}  // namespace edgellm
