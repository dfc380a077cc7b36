#include "engine/output_channel.h"

#include <unistd.h>

namespace edgellm {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "error";
}

bool OutputChannel::join(OutputEvent& ev) {
  if (ev.has_progress) return false;  // progress is a streaming event
  if (ev.index < 0) return true;
  if (static_cast<size_t>(ev.index) >= whole_events_.size()) whole_events_.resize(static_cast<size_t>(ev.index) + 1);
  Whole& w = whole_events_[static_cast<size_t>(ev.index)];
  if (ev.has_prompt_logprobs) {
    w.prompt_logprobs = std::move(ev.prompt_logprobs);
    w.has_prompt_logprobs = true;
    ev.has_prompt_logprobs = false;
  }
  if (!ev.finished) {
    w.text += ev.text;
    w.token_ids.insert(w.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    w.logprobs.insert(w.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    return false;
  }
  if (ev.finish_reason != FinishReason::Error) {
    ev.text = std::move(w.text) + ev.text;
    w.token_ids.insert(w.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    ev.token_ids = std::move(w.token_ids);
    w.logprobs.insert(w.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    ev.logprobs = std::move(w.logprobs);
    if (w.has_prompt_logprobs && ev.finish_reason != FinishReason::Cancelled) {
      ev.prompt_logprobs = std::move(w.prompt_logprobs);
      ev.has_prompt_logprobs = true;
    }
  }
  w = Whole{};
  return true;
}

void OutputChannel::push(OutputEvent ev) {
  if (whole_ && !join(ev)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ev.finished) ++finished_pushed_;
    events_.push_back(std::move(ev));
    if (notify_fd_ >= 0) {
      // Under the lock: once all_sent() is true the fd is never written again, so its owner may
      // close it. Non-blocking pipe: a full pipe already wakes the reader, nothing is lost.
      const char b = 1;
      ssize_t r = ::write(notify_fd_, &b, 1);
      (void)r;
    }
  }
  cv_.notify_all();
}

bool OutputChannel::pop(OutputEvent& ev, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); })) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool OutputChannel::try_pop(OutputEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool OutputChannel::all_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_pushed_ >= remaining_;
}

bool OutputChannel::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_pushed_ >= remaining_ && events_.empty();
}

}  // namespace edgellm
