// tessera server: the content-safety stage's external classifier (docs/CONTENT_SAFETY.md): one
// blocking HTTP/1.1 POST to an endpoint compatible with OpenAI's /v1/moderations (a second tessera
// behind a moderation model, or any moderation service), bounded by one deadline for resolve,
// connect, send and answer. Small on purpose: the server layer may not use src/loadgen's client
// (ARCHITECTURE.md: loadgen stands beside the server, not below it), and plain http:// only (a TLS
// endpoint goes through a local proxy).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct HttpUrl {
  std::string host, port, target;  // port "80" when not given; target "/" when no path
};
// "http://host[:port][/path]"; throws Error(kInvalidArgument) saying what is wrong (https included).
HttpUrl ParseHttpUrl(std::string_view url);

struct ModerationResult {
  bool flagged = false;
  std::vector<std::string> categories;  // the categories the answer marks true
};

// A classifier that could not answer: unreachable, too slow, not 200, or not a moderation answer.
struct ModerationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ModerationClient {
 public:
  // `model` "" leaves the field out of the request; `api_key` "" sends no Authorization header.
  ModerationClient(const std::string& url, std::string model, std::string api_key, double timeout_s);
  // POSTs {"input": text[, "model"]} and reads {"results": [{"flagged", "categories", ...}]}
  // (flagged when any result is). Blocks the calling thread up to the timeout; thread-safe.
  ModerationResult Check(const std::string& text) const;

 private:
  HttpUrl url_;
  std::string model_, api_key_;
  double timeout_s_;
};

}  // namespace tessera
