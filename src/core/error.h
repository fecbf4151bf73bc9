// tessera core: the one error type every layer throws for bad input or failed I/O.
// The CLI turns it into a one-line message and a non-zero exit; the server into an OpenAI error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera {

// Kinds let callers map an error to an exit code or HTTP status without parsing the message.
enum class ErrorKind {
  kInvalidArgument,  // bad value from the user (flag, request field, id out of range)
  kNotFound,         // missing file or tensor
  kCorrupt,          // a file exists but its content is malformed or inconsistent
  kUnsupported,      // valid input this build cannot handle (unknown architecture, dtype)
  kInternal,         // a bug: an invariant of ours broke
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void Fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

// Checks an invariant of our own code (not user input): a failure is a bug.
#define TESSERA_CHECK(cond)                                                                  \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::tessera::Fail(::tessera::ErrorKind::kInternal, "internal check failed: {} ({}:{})", \
                      #cond, __FILE__, __LINE__);                                            \
  } while (0)

}  // namespace tessera
