// Progress of a model load, told to the caller's callback from the loading thread: a fraction
// of the whole load (0..1, never decreasing) and the stage it is in ("open": mapping and
// validating the GGUF, "bind": binding the tensor table, "repack": interleaving the weight
// matrices — the long part —, "tokenizer", "engine", "ready"). A callback that returns false
// stops the load: report() throws LoadCancelled and everything built so far is released as the
// exception unwinds (llama.cpp's progress_callback semantics).
//
// A LoadProgress covers a range [lo, hi] of the whole; range() hands a part of it to a sub-step
// (the draft model, the repacking), all sharing one callback and one high-water mark.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "common/errors.h"

namespace edgellm {

using LoadProgressFn = std::function<bool(double fraction, const char* stage)>;

class LoadProgress {
 public:
  LoadProgress() = default;  // reports nothing
  explicit LoadProgress(LoadProgressFn fn) : state_(std::make_shared<State>()) { state_->fn = std::move(fn); }

  bool active() const { return state_ && state_->fn; }

  // `done` (0..1) of this range reached in `stage`. Throws LoadCancelled if the callback says stop.
  void report(double done, const char* stage) const {
    if (!active()) return;
    if (done < 0) done = 0;
    if (done > 1) done = 1;
    double f = lo_ + (hi_ - lo_) * done;
    if (f < state_->last) f = state_->last;  // monotone even if a sub-step restarts its count
    state_->last = f;
    if (!state_->fn(f, stage)) throw LoadCancelled(std::string("model load cancelled by the progress callback (") + stage + ")");
  }

  // The part [a, b] (fractions of this range) as a range of its own.
  LoadProgress range(double a, double b) const {
    LoadProgress p = *this;
    p.lo_ = lo_ + (hi_ - lo_) * a;
    p.hi_ = lo_ + (hi_ - lo_) * b;
    return p;
  }

 private:
  struct State {
    LoadProgressFn fn;
    double last = 0;
  };
  std::shared_ptr<State> state_;
  double lo_ = 0, hi_ = 1;
};

}  // namespace edgellm
