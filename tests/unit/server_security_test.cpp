// tessera tests: constant-time key compare, API key store, CIDR matching (IPv4, IPv6, mapped),
// the token-bucket rate limiter (driven by an explicit clock) and the concurrency limiter.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "server/security.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(ServerSecurity, ConstantTimeEqual) {
  EXPECT_TRUE(ConstantTimeEqual("sk-abc", "sk-abc"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
  EXPECT_FALSE(ConstantTimeEqual("sk-abc", "sk-abd"));
  EXPECT_FALSE(ConstantTimeEqual("sk-abc", "sk-ab"));
  EXPECT_FALSE(ConstantTimeEqual("sk-abc", "sk-abcd"));
  EXPECT_FALSE(ConstantTimeEqual("", "x"));
  std::string a(1000, 'a'), b = a;
  b[999] = 'b';
  EXPECT_FALSE(ConstantTimeEqual(a, b));
  EXPECT_TRUE(ConstantTimeEqual(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEqual(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ServerSecurity, KeyStoreSources) {
  std::string dir = testing::ScratchDir("server_keys");
  testing::WriteFile(dir + "/keys", "# team keys\nsk-file-1\n\n  sk-file-2  \n# sk-commented\n");
  setenv("TESSERA_API_KEY", "sk-env", 1);
  ApiKeyStore s = ApiKeyStore::Load({"sk-config"}, dir + "/keys");
  unsetenv("TESSERA_API_KEY");
  EXPECT_EQ(s.size(), 4u);
  for (const char* k : {"sk-config", "sk-file-1", "sk-file-2", "sk-env"})
    EXPECT_TRUE(s.Match(k).has_value()) << k;
  EXPECT_FALSE(s.Match("sk-commented").has_value());
  EXPECT_FALSE(s.Match("# team keys").has_value());
  EXPECT_FALSE(s.Match("sk-file").has_value());
  EXPECT_FALSE(s.Match("").has_value());
  // The id names the key without revealing it.
  auto id = s.Match("sk-file-1");
  EXPECT_EQ(id->rfind("key-", 0), 0u);
  EXPECT_EQ(id->size(), 16u);
  EXPECT_EQ(id->find("sk-file-1"), std::string::npos);
  EXPECT_NE(*s.Match("sk-file-1"), *s.Match("sk-file-2"));
  EXPECT_THROW(ApiKeyStore::Load({}, dir + "/nope"), Error);
  EXPECT_FALSE(ApiKeyStore::Load({}, "", false).enabled());
}

TEST(ServerSecurity, BearerToken) {
  EXPECT_EQ(BearerToken("Bearer sk-1"), "sk-1");
  EXPECT_EQ(BearerToken("bearer   sk-1  "), "sk-1");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer"), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(ServerSecurity, CidrIPv4) {
  IpAllowList l({"10.0.0.0/8", "192.168.1.7", "172.16.0.0/12"});
  EXPECT_TRUE(l.Allowed("10.1.2.3"));
  EXPECT_TRUE(l.Allowed("10.255.255.255"));
  EXPECT_FALSE(l.Allowed("11.0.0.0"));
  EXPECT_TRUE(l.Allowed("192.168.1.7"));
  EXPECT_FALSE(l.Allowed("192.168.1.8"));
  EXPECT_TRUE(l.Allowed("172.31.255.1"));
  EXPECT_FALSE(l.Allowed("172.32.0.1"));
  EXPECT_TRUE(l.Allowed("::ffff:10.9.9.9"));  // IPv4-mapped (dual-stack sockets)
  EXPECT_FALSE(l.Allowed("::1"));
  EXPECT_FALSE(l.Allowed("not-an-ip"));
  EXPECT_TRUE(IpAllowList({}).Allowed("1.2.3.4"));
  EXPECT_TRUE(IpAllowList({"0.0.0.0/0"}).Allowed("8.8.8.8"));
  EXPECT_FALSE(IpAllowList({"0.0.0.0/0"}).Allowed("2001:db8::1"));
}

TEST(ServerSecurity, CidrIPv6) {
  IpAllowList l({"2001:db8::/32", "::1", "fe80::/10"});
  EXPECT_TRUE(l.Allowed("2001:db8:ffff::1"));
  EXPECT_FALSE(l.Allowed("2001:db9::1"));
  EXPECT_TRUE(l.Allowed("::1"));
  EXPECT_FALSE(l.Allowed("::2"));
  EXPECT_TRUE(l.Allowed("fe80::1%eth0"));
  EXPECT_TRUE(l.Allowed("febf::1"));  // fe80::/10 spans fe80..febf
  EXPECT_FALSE(l.Allowed("fec0::1"));
  EXPECT_FALSE(l.Allowed("127.0.0.1"));
  IpAllowList odd({"2001:db8:8000::/33"});
  EXPECT_TRUE(odd.Allowed("2001:db8:8000::1"));
  EXPECT_FALSE(odd.Allowed("2001:db8:7fff::1"));
}

TEST(ServerSecurity, CidrRejectsBadText) {
  for (const char* bad : {"10.0.0.0/33", "::/129", "10.0.0/8", "abc", "10.0.0.0/", "10.0.0.0/x", "[::1]/128"})
    EXPECT_THROW(CidrRange::Parse(bad), Error) << bad;
}

TEST(ServerSecurity, RateLimiterRequestsPerMinute) {
  RateLimiter r(3, 0);
  auto t0 = SteadyClock::now();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r.Admit("k", 10, t0).allowed) << i;
  auto d = r.Admit("k", 10, t0);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_s, 20.0, 1e-6);       // 3/min: one request every 20 s
  EXPECT_TRUE(r.Admit("other", 10, t0).allowed);  // per key
  EXPECT_FALSE(r.Admit("k", 10, t0 + std::chrono::seconds(19)).allowed);
  EXPECT_TRUE(r.Admit("k", 10, t0 + std::chrono::seconds(20)).allowed);
}

TEST(ServerSecurity, RateLimiterTokensPerMinute) {
  RateLimiter r(0, 600);  // 10 tokens a second
  auto t0 = SteadyClock::now();
  EXPECT_TRUE(r.Admit("k", 500, t0).allowed);
  r.ChargeTokens("k", 200, t0);  // completion: bucket now at -100
  auto d = r.Admit("k", 50, t0);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_s, 15.0, 1e-6);  // needs 150 more tokens at 10/s
  EXPECT_TRUE(r.Admit("k", 50, t0 + std::chrono::seconds(15)).allowed);
  // A prompt larger than the whole budget waits for a full bucket, not forever.
  RateLimiter big(0, 100);
  EXPECT_TRUE(big.Admit("k", 1000, t0).allowed);
  EXPECT_FALSE(big.Admit("k", 1000, t0 + std::chrono::seconds(60)).allowed);
}

// Without API keys the limiter keys on the client address: one bucket per address ever seen
// was kept for good, so clients from many addresses (an IPv6 /64) grew it without bound.
TEST(ServerSecurity, RateLimiterForgetsIdleKeys) {
  RateLimiter r(60, 6000);
  auto t0 = SteadyClock::now();
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(r.Admit("ip:10.0." + std::to_string(i), 10, t0).allowed);
  // A minute later every idle bucket is full again, the same as a new one: nothing to keep.
  auto t1 = t0 + std::chrono::seconds(61);
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(r.Admit("ip:10.1." + std::to_string(i), 10, t1).allowed);
  EXPECT_LT(r.tracked_keys(), 30000u);  // about the 20000 of the last minute, not all 40000
  // Forgetting a full bucket changes no decision: a busy key is still limited.
  RateLimiter s(2, 0);
  EXPECT_TRUE(s.Admit("k", 1, t0).allowed);
  EXPECT_TRUE(s.Admit("k", 1, t0).allowed);
  for (int i = 0; i < 20000; ++i) s.Admit("ip:" + std::to_string(i), 1, t0 + std::chrono::seconds(1));
  EXPECT_FALSE(s.Admit("k", 1, t0 + std::chrono::seconds(2)).allowed);
}

TEST(ServerSecurity, ConcurrencyLimiter) {
  ConcurrencyLimiter c(2, 1);
  int admitted_late = 0;
  uint64_t t1 = 0, t2 = 0;
  EXPECT_EQ(c.Acquire([] {}, nullptr), ConcurrencyLimiter::Result::kAdmitted);
  EXPECT_EQ(c.Acquire([] {}, nullptr), ConcurrencyLimiter::Result::kAdmitted);
  EXPECT_EQ(c.Acquire([&] { ++admitted_late; }, &t1), ConcurrencyLimiter::Result::kQueued);
  EXPECT_EQ(c.Acquire([] {}, &t2), ConcurrencyLimiter::Result::kRejected);
  EXPECT_EQ(c.running(), 2);
  EXPECT_EQ(c.waiting(), 1);
  c.Release();  // the slot passes to the waiter
  EXPECT_EQ(admitted_late, 1);
  EXPECT_EQ(c.running(), 2);
  EXPECT_EQ(c.waiting(), 0);
  EXPECT_EQ(c.Acquire([&] { ++admitted_late; }, &t2), ConcurrencyLimiter::Result::kQueued);
  EXPECT_TRUE(c.Cancel(t2));
  EXPECT_FALSE(c.Cancel(t2));
  c.Release();
  c.Release();
  EXPECT_EQ(admitted_late, 1);
  EXPECT_EQ(c.running(), 0);
}

}  // namespace
}  // namespace tessera
