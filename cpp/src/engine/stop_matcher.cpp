#include "engine/stop_matcher.h"

#include <algorithm>

namespace edgellm {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

size_t StopMatcher::incomplete_utf8_tail(const std::string& s) {
  // Look back at most 3 bytes for the lead byte of the last sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes (invalid): release them as they are
}

StopMatcher::Step StopMatcher::push(const std::string& piece) {
  Step out;
  if (stopped_) return out;
  text_ += piece;
  // A stop string can only start in unreleased text: released text never ends in a stop prefix.
  size_t first = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = text_.find(stops_[i], released_);
    if (at != std::string::npos && (first == std::string::npos || at < first)) {
      first = at;
      out.stop_index = static_cast<int>(i);
    }
  }
  if (out.stop_index >= 0) {
    text_.resize(first);
    out.text = text_.substr(released_);
    released_ = text_.size();
    stopped_ = true;
    return out;
  }
  size_t hold = 0;
  const size_t pending = text_.size() - released_;
  for (const auto& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, pending);
    for (size_t k = max_k; k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  hold = std::max(hold, std::min(incomplete_utf8_tail(text_), pending));
  const size_t end = text_.size() - hold;
  out.text = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string StopMatcher::flush() {
  std::string rest = text_.substr(released_);
  released_ = text_.size();
  return rest;
}

}  // namespace edgellm
