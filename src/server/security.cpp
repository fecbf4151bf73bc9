// tessera server: API keys, CIDR allow-lists, token-bucket rate limits, concurrency cap.
#include "server/security.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/text.h"

namespace tessera {
namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> Sha256(std::string_view s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

}  // namespace

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  auto da = Sha256(a), db = Sha256(b);
  return CRYPTO_memcmp(da.data(), db.data(), da.size()) == 0;
}

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  std::string t(text);
  // Strip "[...]" and an IPv6 zone id ("fe80::1%eth0").
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  if (auto pct = t.find('%'); pct != std::string::npos) t.resize(pct);
  IpAddress ip;
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, t.c_str(), &a4) == 1) {
    ip.v4 = true;
    ip.bytes[10] = ip.bytes[11] = 0xff;
    std::memcpy(ip.bytes.data() + 12, &a4, 4);
    return ip;
  }
  if (inet_pton(AF_INET6, t.c_str(), &a6) == 1) {
    std::memcpy(ip.bytes.data(), &a6, 16);
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    ip.v4 = std::memcmp(ip.bytes.data(), kMapped, 12) == 0;  // ::ffff:a.b.c.d is an IPv4 peer
    return ip;
  }
  return std::nullopt;
}

CidrRange CidrRange::Parse(std::string_view text) {
  std::string t = TrimSpace(text);
  std::string addr = t;
  int bits = -1;
  if (auto slash = t.find('/'); slash != std::string::npos) {
    addr = t.substr(0, slash);
    std::string b = t.substr(slash + 1);
    if (b.empty() || b.size() > 3 || !std::all_of(b.begin(), b.end(), ::isdigit))
      Fail(ErrorKind::kInvalidArgument, "bad CIDR '{}': prefix length '{}' is not a number", text, b);
    bits = std::stoi(b);
  }
  auto ip = IpAddress::Parse(addr);
  if (!ip || addr.find('[') != std::string::npos)
    Fail(ErrorKind::kInvalidArgument, "bad CIDR '{}': '{}' is not an IP address", text, addr);
  bool v4_text = addr.find(':') == std::string::npos;
  int max_bits = v4_text ? 32 : 128;
  if (bits < 0) bits = max_bits;
  if (bits > max_bits)
    Fail(ErrorKind::kInvalidArgument, "bad CIDR '{}': prefix length {} exceeds {}", text, bits, max_bits);
  CidrRange r;
  r.base_ = *ip;
  r.prefix_bits_ = v4_text ? 96 + bits : bits;
  return r;
}

bool CidrRange::Contains(const IpAddress& ip) const {
  int full = prefix_bits_ / 8, rest = prefix_bits_ % 8;
  if (std::memcmp(ip.bytes.data(), base_.bytes.data(), full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (ip.bytes[full] & mask) == (base_.bytes[full] & mask);
}

IpAllowList::IpAllowList(const std::vector<std::string>& cidrs) {
  for (const auto& c : cidrs) ranges_.push_back(CidrRange::Parse(c));
}

bool IpAllowList::Allowed(std::string_view ip_text) const {
  if (ranges_.empty()) return true;
  auto ip = IpAddress::Parse(ip_text);
  if (!ip) return false;
  for (const auto& r : ranges_)
    if (r.Contains(*ip)) return true;
  return false;
}

ApiKeyStore ApiKeyStore::Load(const std::vector<std::string>& keys, const std::string& key_file,
                              bool use_env) {
  ApiKeyStore store;
  for (const auto& k : keys) store.Add(k);
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) Fail(ErrorKind::kNotFound, "cannot read API key file '{}'", key_file);
    std::string line;
    while (std::getline(in, line)) {
      std::string t = TrimSpace(line);
      if (t.empty() || t[0] == '#') continue;
      store.Add(t);
    }
  }
  if (use_env) {
    if (const char* env = std::getenv("TESSERA_API_KEY"); env != nullptr && *env != '\0') store.Add(env);
  }
  return store;
}

void ApiKeyStore::Add(std::string key) {
  std::string t = TrimSpace(key);
  if (t.empty()) return;
  for (const auto& [k, id] : keys_)
    if (k == t) return;
  std::string id = KeyId(t);
  keys_.emplace_back(std::move(t), std::move(id));
}

std::string ApiKeyStore::KeyId(std::string_view key) {
  auto d = Sha256(key);
  std::string out = "key-";
  static const char* kHex = "0123456789abcdef";
  for (int i = 0; i < 6; ++i) {
    out += kHex[d[i] >> 4];
    out += kHex[d[i] & 15];
  }
  return out;
}

std::optional<std::string> ApiKeyStore::Match(std::string_view presented) const {
  const std::string* found = nullptr;
  for (const auto& [k, id] : keys_) {
    bool eq = ConstantTimeEqual(k, presented);
    if (eq && found == nullptr) found = &id;
  }
  if (found == nullptr) return std::nullopt;
  return *found;
}

std::string BearerToken(std::string_view h) {
  std::string t = TrimSpace(h);
  if (t.size() < 7) return "";
  std::string scheme = t.substr(0, 7);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer ") return "";
  return TrimSpace(std::string_view(t).substr(7));
}

RateLimiter::RateLimiter(double rpm, double tpm) : rpm_(rpm), tpm_(tpm) {}

// A bucket refilled to the brim is what a new key gets: dropping it changes no decision. Swept
// when the map has doubled since the last sweep, so the cost per request stays constant while
// the map holds only keys active within about a minute.
void RateLimiter::ForgetFullBuckets(SteadyClock::time_point now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const Bucket& b = it->second;
    double dt = std::chrono::duration<double>(now - b.last).count();
    bool full = (rpm_ <= 0 || b.requests + dt * rpm_ / 60.0 >= rpm_) &&
                (tpm_ <= 0 || b.tokens + dt * tpm_ / 60.0 >= tpm_);
    it = full ? buckets_.erase(it) : std::next(it);
  }
  sweep_at_ = std::max<size_t>(4096, 2 * buckets_.size());
}

RateLimiter::Bucket& RateLimiter::Refill(const std::string& key, SteadyClock::time_point now) {
  if (buckets_.size() >= sweep_at_ && buckets_.find(key) == buckets_.end()) ForgetFullBuckets(now);
  auto [it, inserted] = buckets_.try_emplace(key);
  Bucket& b = it->second;
  if (inserted) {
    b.requests = rpm_;
    b.tokens = tpm_;
    b.last = now;
    return b;
  }
  double dt = std::chrono::duration<double>(now - b.last).count();
  if (dt > 0) {
    b.requests = std::min(rpm_, b.requests + dt * rpm_ / 60.0);
    b.tokens = std::min(tpm_, b.tokens + dt * tpm_ / 60.0);
    b.last = now;
  }
  return b;
}

RateLimiter::Decision RateLimiter::Admit(const std::string& key, int64_t prompt_tokens,
                                         SteadyClock::time_point now) {
  Decision d;
  if (!enabled()) return d;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = Refill(key, now);
  double wait = 0;
  if (rpm_ > 0 && b.requests < 1.0) wait = std::max(wait, (1.0 - b.requests) * 60.0 / rpm_);
  if (tpm_ > 0) {
    // A prompt bigger than a whole minute's budget is admitted once the bucket is full, so it
    // cannot be starved forever.
    double need = std::min(static_cast<double>(prompt_tokens), tpm_);
    if (b.tokens < need) wait = std::max(wait, (need - b.tokens) * 60.0 / tpm_);
  }
  if (wait > 0) {
    d.allowed = false;
    d.retry_after_s = wait;
    return d;
  }
  if (rpm_ > 0) b.requests -= 1.0;
  if (tpm_ > 0) b.tokens -= static_cast<double>(prompt_tokens);
  return d;
}

void RateLimiter::ChargeTokens(const std::string& key, int64_t tokens, SteadyClock::time_point now) {
  if (tpm_ <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = Refill(key, now);
  b.tokens -= static_cast<double>(tokens);
}

ConcurrencyLimiter::ConcurrencyLimiter(int64_t max_running, int64_t max_queue)
    : max_running_(max_running), max_queue_(max_queue) {}

ConcurrencyLimiter::Result ConcurrencyLimiter::Acquire(std::function<void()> on_admit, uint64_t* ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ < max_running_ && waiters_.empty()) {
    ++running_;
    return Result::kAdmitted;
  }
  if (static_cast<int64_t>(waiters_.size()) >= max_queue_) return Result::kRejected;
  uint64_t t = next_ticket_++;
  if (ticket != nullptr) *ticket = t;
  waiters_.emplace_back(t, std::move(on_admit));
  return Result::kQueued;
}

bool ConcurrencyLimiter::Cancel(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->first == ticket) {
      waiters_.erase(it);
      return true;
    }
  }
  return false;
}

void ConcurrencyLimiter::Release() {
  std::function<void()> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!waiters_.empty()) {
      next = std::move(waiters_.front().second);  // the slot passes straight to the waiter
      waiters_.pop_front();
    } else if (running_ > 0) {
      --running_;
    }
  }
  if (next) next();
}

int64_t ConcurrencyLimiter::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int64_t ConcurrencyLimiter::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(waiters_.size());
}

}  // namespace tessera
