// Stop strings on streamed text. Token pieces arrive as bytes; a stop string may span several
// tokens, so text is released only when it can no longer become part of a stop string: the
// longest suffix that is a prefix of some stop string is held back, and so is an incomplete
// UTF-8 sequence at the end. When a stop string appears, the text before it is released and
// the stop string itself never is.
#pragma once
#include <string>
#include <vector>

namespace edgellm {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  struct Step {
    std::string text;     // newly releasable text
    int stop_index = -1;  // index into the stop strings when one matched
  };
  // Appends a token's bytes.
  Step push(const std::string& piece);
  // At the end of generation (no stop string matched): everything still held back.
  std::string flush();
  // The full text so far (truncated before the stop string once one matched).
  const std::string& text() const { return text_; }

  // Bytes at the end of `s` that begin a UTF-8 sequence not yet complete.
  static size_t incomplete_utf8_tail(const std::string& s);

 private:
  std::vector<std::string> stops_;
  std::string text_;
  size_t released_ = 0;
  bool stopped_ = false;
};

}  // namespace edgellm
