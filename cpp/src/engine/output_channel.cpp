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

void OutputChannel::push(OutputEvent ev) {
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
