// tessera server: access control and admission: API keys (constant-time match, key ids for logs),
// IP allow-lists in CIDR (IPv4 and IPv6), per-key token-bucket rate limits and the global cap on
// concurrent requests with a bounded wait queue. All classes are thread-safe unless noted.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Equal iff a == b; the time taken does not depend on where they differ nor on their lengths
// (both are hashed with SHA-256 and the digests compared with CRYPTO_memcmp).
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// An IP address in 16 bytes (IPv4 as ::ffff:a.b.c.d so both families share one comparison).
struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  bool v4 = false;
  static std::optional<IpAddress> Parse(std::string_view text);  // "1.2.3.4", "::1", "::ffff:1.2.3.4"
};

class CidrRange {
 public:
  // "10.0.0.0/8", "2001:db8::/32", "192.168.1.7" (a host). Throws Error(kInvalidArgument).
  static CidrRange Parse(std::string_view text);
  bool Contains(const IpAddress& ip) const;

 private:
  IpAddress base_;
  int prefix_bits_ = 0;  // over the 128-bit form
};

class IpAllowList {
 public:
  explicit IpAllowList(const std::vector<std::string>& cidrs);  // empty list allows everyone
  bool Allowed(std::string_view ip_text) const;                 // unparsable addresses are refused
  bool empty() const { return ranges_.empty(); }

 private:
  std::vector<CidrRange> ranges_;
};

// The accepted API keys: from the config list, a file (one a line, '#' comments, blank lines
// skipped) and the TESSERA_API_KEY environment variable. No keys configured = auth disabled.
class ApiKeyStore {
 public:
  ApiKeyStore() = default;
  // Throws Error(kNotFound) when key_file is set and unreadable.
  static ApiKeyStore Load(const std::vector<std::string>& keys, const std::string& key_file,
                          bool use_env = true);
  void Add(std::string key);
  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // The key's id ("key-" + 12 hex digits of its SHA-256) when it matches one; every stored key is
  // compared (no early exit) so the timing says nothing about which or how many matched.
  std::optional<std::string> Match(std::string_view presented) const;
  static std::string KeyId(std::string_view key);

 private:
  std::vector<std::pair<std::string, std::string>> keys_;  // key, id
};

// "Bearer <token>" -> token ("" when the header is not a bearer credential).
std::string BearerToken(std::string_view authorization_header);

using SteadyClock = std::chrono::steady_clock;

// Per-key token buckets: requests per minute and tokens per minute. A bucket holds at most one
// minute's worth and refills continuously. Tokens are charged as they are known: the prompt at
// admission, the completion when it ends (the bucket may then go negative, delaying later requests).
class RateLimiter {
 public:
  RateLimiter(double requests_per_minute, double tokens_per_minute);
  struct Decision {
    bool allowed = true;
    double retry_after_s = 0;  // when refused: seconds until the request would fit
  };
  Decision Admit(const std::string& key, int64_t prompt_tokens, SteadyClock::time_point now);
  void ChargeTokens(const std::string& key, int64_t tokens, SteadyClock::time_point now);
  bool enabled() const { return rpm_ > 0 || tpm_ > 0; }
  size_t tracked_keys() const {  // buckets held (tests)
    std::lock_guard<std::mutex> lock(mu_);
    return buckets_.size();
  }

 private:
  struct Bucket {
    double requests = 0, tokens = 0;
    SteadyClock::time_point last;
  };
  Bucket& Refill(const std::string& key, SteadyClock::time_point now);
  void ForgetFullBuckets(SteadyClock::time_point now);

  double rpm_, tpm_;
  mutable std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
  size_t sweep_at_ = 4096;  // buckets_.size() that triggers the next ForgetFullBuckets
};

// At most `max_running` admitted at once and `max_queue` waiting; a waiter is resumed (its
// callback invoked, outside the lock, on the thread that released the slot) in FIFO order.
class ConcurrencyLimiter {
 public:
  ConcurrencyLimiter(int64_t max_running, int64_t max_queue);
  enum class Result { kAdmitted, kQueued, kRejected };
  // kAdmitted: the caller holds a slot now (on_admit is not called). kQueued: on_admit runs later
  // holding a slot, unless Cancel(ticket) is called first. kRejected: nothing held.
  Result Acquire(std::function<void()> on_admit, uint64_t* ticket);
  bool Cancel(uint64_t ticket);  // true if it was still waiting (and now is not)
  void Release();
  int64_t running() const;
  int64_t waiting() const;

 private:
  int64_t max_running_, max_queue_;
  mutable std::mutex mu_;
  int64_t running_ = 0;
  uint64_t next_ticket_ = 1;
  std::deque<std::pair<uint64_t, std::function<void()>>> waiters_;
};

}  // namespace tessera
