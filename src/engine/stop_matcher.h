// tessera engine: stop strings over streamed text. Text that could still turn out to be the start
// of a stop string is held back until it is decided, so a client never sees part of a stop string.
#pragma once

#include <string>
#include <vector>

namespace tessera {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds newly decoded text; returns the part that is now safe to emit. After a stop string is
  // found, stopped() is true and the returned text ends right before it.
  std::string Feed(const std::string& text);
  // Releases what is held back (at the end of generation).
  std::string Flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tessera
