// tessera tests: the content-safety stage (docs/CONTENT_SAFETY.md). The StreamFilter on its own
// (a phrase split at every byte, masks, UTF-8 never split, the held tail flushed at the end, the
// hold-back bounded); the YAML rules and their errors; and end to end through the fake-engine
// server: prompts blocked (400 or refusal), masked, flagged (metric); output blocked with
// finish_reason content_filter, streamed and not; and the /v1/moderations classifier against a
// loopback fake that flags, answers, fails or never answers (fail-open, fail-closed).
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <random>
#include <thread>

#include "core/error.h"
#include "server/content_filter.h"
#include "server/moderation_client.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;

ContentRuleConfig Rule(std::string name, std::string action, std::vector<std::string> words,
                       std::vector<std::string> patterns = {}, std::string applies_to = "both") {
  ContentRuleConfig r;
  r.name = std::move(name);
  r.category = r.name + "_cat";
  r.action = std::move(action);
  r.words = std::move(words);
  r.patterns = std::move(patterns);
  r.applies_to = std::move(applies_to);
  return r;
}

std::shared_ptr<const ContentRuleSet> Output(const std::vector<ContentRuleConfig>& rules) {
  return ContentRuleSet::Compile(rules, "***", ContentRuleSet::Stage::kOutput);
}

// Feeds `pieces` and returns everything the filter let out (Finish included).
std::string Feed(StreamFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += f.Push(p);
  return out + f.Finish();
}

bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// ---- the stream filter ----

// A rule whose word list compiled and whose second pattern does not: the compiled codes were
// leaked with the error (LeakSanitizer in the sanitizer build; fuzz/corpus/config/crash-rule-pattern-leak).
TEST(ContentFilter, BadPatternAfterGoodOnesIsAnErrorWithoutLeaking) {
  ContentRuleConfig r = Rule("r", "block", {"alpha", "beta"});
  r.patterns = {"\\d+", "(unclosed"};
  for (auto stage : {ContentRuleSet::Stage::kInput, ContentRuleSet::Stage::kOutput}) {
    try {
      ContentRuleSet::Compile({Rule("ok", "flag", {"x"}), r}, "***", stage);
      ADD_FAILURE() << "compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pattern 2"), std::string::npos) << e.what();
    }
  }
}

TEST(ContentFilter, BlockedPhraseSplitAtEveryByteNeverLeaks) {
  auto rules = Output({Rule("secret", "block", {"launch code"})});
  const std::string text = "Sure, the launch code is 1234.";
  const size_t at = text.find("launch code");
  // Two pieces split at every position, and one byte a piece.
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StreamFilter f(rules);
    std::string out = f.Push(text.substr(0, cut));
    EXPECT_EQ(out.find("launch"), std::string::npos) << "cut " << cut;  // never a prefix of the phrase...
    out += f.Push(text.substr(cut));
    out += f.Finish();
    EXPECT_TRUE(f.blocked()) << "cut " << cut;
    EXPECT_EQ(out, text.substr(0, at)) << "cut " << cut;  // ...and everything before it
    ASSERT_EQ(f.hits().size(), 1u);
    EXPECT_EQ(f.hits()[0].category, "secret_cat");
  }
  StreamFilter f(rules);
  std::string out;
  for (char c : text) {
    out += f.Push(std::string(1, c));
    EXPECT_EQ(out.find("launch c"), std::string::npos);
  }
  EXPECT_TRUE(f.blocked());
  EXPECT_EQ(out, text.substr(0, at));
  EXPECT_EQ(f.Push("more"), "");  // nothing after a block
  EXPECT_EQ(f.Finish(), "");
}

TEST(ContentFilter, MaskAcrossPiecesAndCaseInsensitiveWholeWords) {
  auto rules = Output({Rule("ssn", "mask", {}, {R"(\b\d{3}-\d{2}-\d{4}\b)"}), Rule("darn", "mask", {"darn"})});
  const std::string text = "id 123-45-6789, DARN it; darning is fine.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StreamFilter f(rules);
    EXPECT_EQ(Feed(f, {text.substr(0, cut), text.substr(cut)}), "id ***, *** it; darning is fine.") << cut;
    EXPECT_FALSE(f.blocked());
    EXPECT_EQ(f.hits().size(), 2u) << cut;
  }
  // A rule's own replacement.
  auto r = Rule("name", "mask", {"Bob"});
  r.replacement = "[name]";
  StreamFilter f(Output({r}));
  EXPECT_EQ(Feed(f, {"hi B", "ob!"}), "hi [name]!");
}

TEST(ContentFilter, Utf8IsNeverSplitAndMatchesAcrossASplitCharacter) {
  auto rules = Output({Rule("cafe", "block", {"café noir"}), Rule("flag", "flag", {"ÜBER"})});
  const std::string text = "un thé, über alles, 日本語 🙂 et un café noir";
  const size_t at = text.find("café noir");
  StreamFilter f(rules);
  std::string out;
  for (char c : text) {  // one byte a piece: most pieces are parts of characters
    std::string piece = f.Push(std::string(1, c));
    EXPECT_TRUE(ValidUtf8(piece)) << "piece ends inside a character";
    out += piece;
  }
  EXPECT_FALSE(f.blocked());  // "noir" ends the text: whether a letter follows is known at the end
  out += f.Finish();
  EXPECT_TRUE(f.blocked());
  EXPECT_EQ(out, text.substr(0, at));
  ASSERT_EQ(f.hits().size(), 2u);  // "über" caseless, then the block
  EXPECT_EQ(f.hits()[0].action, ContentAction::kFlag);
  // Without any match, everything comes out, in pieces of whole characters only.
  StreamFilter g(rules);
  out.clear();
  for (char c : std::string("日本語 🙂 é")) {
    std::string piece = g.Push(std::string(1, c));
    EXPECT_TRUE(ValidUtf8(piece));
    out += piece;
  }
  out += g.Finish();
  EXPECT_EQ(out, "日本語 🙂 é");
}

TEST(ContentFilter, HeldTailIsFlushedAtTheEnd) {
  auto rules = Output({Rule("secret", "block", {"launch code"})});
  StreamFilter f(rules);
  std::string out = f.Push("the launch co");
  EXPECT_EQ(out, "the ");
  EXPECT_EQ(f.held_bytes(), 9u);
  out += f.Finish();
  EXPECT_FALSE(f.blocked());
  EXPECT_EQ(out, "the launch co");
  // A whole word at the very end is decided at Finish (its lookahead needs the end of text).
  StreamFilter g(rules);
  out = g.Push("say launch code");
  EXPECT_EQ(out, "say ");
  EXPECT_EQ(g.Finish(), "");
  EXPECT_TRUE(g.blocked());
  // Text that cannot start a match is never held.
  StreamFilter h(rules);
  EXPECT_EQ(h.Push("hello world"), "hello world");
  EXPECT_EQ(h.held_bytes(), 0u);
}

TEST(ContentFilter, FlagCountsOnceAndChangesNothing) {
  auto rules = Output({Rule("w", "flag", {"weather"})});
  const std::string text = "weather, weather and whether";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StreamFilter f(rules);
    EXPECT_EQ(Feed(f, {text.substr(0, cut), text.substr(cut)}), text);
    EXPECT_EQ(f.hits().size(), 2u) << cut;
  }
}

TEST(ContentFilter, HoldBackIsBoundedByMaxMatchBytes) {
  auto r = Rule("long", "block", {}, {"BEGIN.*END"});
  r.max_match_bytes = 32;
  auto rules = Output({r});
  StreamFilter f(rules);
  std::string out = f.Push("x BEGIN ");
  for (int i = 0; i < 50; ++i) {
    out += f.Push("abc ");
    EXPECT_LE(f.held_bytes(), 31u);
  }
  out += f.Finish();
  EXPECT_FALSE(f.blocked());
  // Within the bound a match split over pieces is caught.
  StreamFilter g(rules);
  EXPECT_EQ(Feed(g, {"x BEG", "IN a E", "ND y"}), "x ");
  EXPECT_TRUE(g.blocked());
}

TEST(ContentFilter, StreamingEqualsScanningTheWholeText) {
  // Property: however a text is cut into pieces, the stream gives what one scan of the whole text
  // gives (matches within their bound), and no piece ends inside a character.
  auto rule_pat = Rule("num", "mask", {}, {R"(\d{2}-\d{2})"});
  rule_pat.max_match_bytes = 5;
  auto rules = Output({Rule("stop", "block", {"zap zap"}), rule_pat, Rule("f", "flag", {"zé"})});
  const std::vector<std::string> atoms = {"z", "a", "p", " ", "é", "1", "-", "日", "zap", "zé", "12-34"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) text += atoms[rng() % atoms.size()];
    ContentScan whole = ScanContent(rules, text);
    StreamFilter f(rules);
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
      size_t n = 1 + rng() % 6;
      std::string piece = f.Push(text.substr(pos, n));
      ASSERT_TRUE(ValidUtf8(piece)) << text;
      out += piece;
      pos += n;
    }
    out += f.Finish();
    ASSERT_EQ(out, whole.text) << "text '" << text << "'";
    ASSERT_EQ(f.blocked(), whole.blocked) << text;
    ASSERT_EQ(f.hits().size(), whole.hits.size()) << text;
  }
}

TEST(ContentFilter, WithoutHoldBackASplitPhraseLeaks) {
  // The test hook shows what the hold-back is for: the same split as above gets through.
  auto rules = Output({Rule("secret", "block", {"launch code"})});
  StreamFilter f(rules);
  f.set_hold_back_for_test(false);
  std::string out = Feed(f, {"the launch co", "de is"});
  EXPECT_NE(out.find("launch co"), std::string::npos);
}

TEST(ContentFilter, StagesAndScan) {
  std::vector<ContentRuleConfig> rules = {Rule("in", "block", {"alpha"}, {}, "input"),
                                          Rule("out", "mask", {"beta"}, {}, "output")};
  auto in = ContentRuleSet::Compile(rules, "***", ContentRuleSet::Stage::kInput);
  ContentScan s = ScanContent(in, "alpha beta");
  EXPECT_TRUE(s.blocked);
  s = ScanContent(in, "beta");
  EXPECT_EQ(s.text, "beta");  // the output rule does not apply to prompts
  auto out = Output(rules);
  s = ScanContent(out, "alpha beta");
  EXPECT_FALSE(s.blocked);
  EXPECT_EQ(s.text, "alpha ***");
}

// ---- configuration ----

TEST(ContentFilterConfig, YamlRulesParseAndBadOnesNameTheRule) {
  ServerConfig c = ParseServerConfig(R"(
content_safety:
  enabled: true
  input_block: refusal
  rules:
    - name: pii
      category: privacy
      applies_to: output
      action: mask
      patterns: ['\d{3}-\d{2}-\d{4}']
      max_match_bytes: 11
      replacement: "[redacted]"
    - name: slurs
      action: block
      words: [foo, "bar baz"]
)");
  ValidateServerConfig(c);
  ASSERT_EQ(c.content_safety.rules.size(), 2u);
  EXPECT_EQ(c.content_safety.rules[0].category, "privacy");
  EXPECT_EQ(c.content_safety.rules[0].max_match_bytes, 11);
  EXPECT_EQ(c.content_safety.rules[1].words.size(), 2u);
  EXPECT_EQ(c.content_safety.input_block, "refusal");
  const std::string eff = EffectiveConfigString(c);
  EXPECT_NE(eff.find("content_safety.rules: [pii (mask, output), slurs (block, both)]"), std::string::npos) << eff;
  EXPECT_EQ(eff.find("bar baz"), std::string::npos);  // the words stay out of the log

  auto error_of = [](const std::string& yaml) -> std::string {
    try {
      ValidateServerConfig(ParseServerConfig(yaml));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string e = error_of("content_safety:\n  rules:\n    - {name: bad_re, action: block, patterns: ['a(b']}\n");
  EXPECT_NE(e.find("bad_re"), std::string::npos) << e;
  EXPECT_NE(e.find("a(b"), std::string::npos) << e;
  EXPECT_NE(e.find("does not compile"), std::string::npos) << e;
  e = error_of("content_safety:\n  rules:\n    - {name: r, action: block, word: [x]}\n");
  EXPECT_NE(e.find("content_safety.rules[0].word"), std::string::npos) << e;
  e = error_of("content_safety:\n  rules:\n    - {name: r, action: zap, words: [x]}\n");
  EXPECT_NE(e.find("'r'"), std::string::npos) << e;
  EXPECT_NE(e.find("zap"), std::string::npos) << e;
  e = error_of("content_safety:\n  rules:\n    - {name: r, action: block}\n");
  EXPECT_NE(e.find("neither words nor patterns"), std::string::npos) << e;
  e = error_of("content_safety:\n  rules:\n    - {name: r, action: flag, words: [x]}\n    - {name: r, action: flag, "
               "words: [y]}\n");
  EXPECT_NE(e.find("used by another rule"), std::string::npos) << e;
  e = error_of("content_safety:\n  rules:\n    - {name: r, action: block, words: [x], replacement: '#'}\n");
  EXPECT_NE(e.find("mask only"), std::string::npos) << e;
  e = error_of("content_safety:\n  classifier_url: https://moderation.example/v1/moderations\n");
  EXPECT_NE(e.find("content_safety.classifier_url"), std::string::npos) << e;
  e = error_of("content_safety:\n  classifier_failure: maybe\n");
  EXPECT_NE(e.find("content_safety.classifier_failure"), std::string::npos) << e;
  // Flags set the section's keys too.
  ServerConfig f;
  SetConfigValue(f, "content_safety.enabled", "true");
  SetConfigValue(f, "content_safety.classifier_url", "http://127.0.0.1:9/v1/moderations");
  ValidateServerConfig(f);
  EXPECT_TRUE(f.content_safety.enabled);
}

TEST(ContentFilterConfig, HttpUrls) {
  HttpUrl u = ParseHttpUrl("http://mod.local:8080/v1/moderations");
  EXPECT_EQ(u.host, "mod.local");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.target, "/v1/moderations");
  u = ParseHttpUrl("http://[::1]");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.target, "/");
  EXPECT_THROW(ParseHttpUrl("http://h:99999/"), Error);
  EXPECT_THROW(ParseHttpUrl("ftp://h/"), Error);
  EXPECT_THROW(ParseHttpUrl("http://user:pw@h/"), Error);
}

// ---- a fake /v1/moderations endpoint (loopback) ----

class FakeModeration {
 public:
  enum class Mode { kClean, kFlagged, kError500, kGarbage, kHang };
  FakeModeration() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeModeration() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/moderations"; }
  std::atomic<Mode> mode{Mode::kClean};
  std::atomic<int> calls{0};
  std::string last_body() {
    std::lock_guard<std::mutex> l(mu_);
    return last_body_;
  }
  std::string last_head() {
    std::lock_guard<std::mutex> l(mu_);
    return last_head_;
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      Serve(c);
      ::close(c);
    }
  }
  void Serve(int c) {
    std::string req;
    char buf[4096];
    size_t need = std::string::npos;
    while (!stop_) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
      size_t head = req.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      if (need == std::string::npos) {
        size_t cl = req.find("Content-Length: ");
        if (cl == std::string::npos) cl = req.find("content-length: ");
        need = head + 4 + (cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16)));
      }
      if (req.size() >= need) break;
    }
    ++calls;
    {
      std::lock_guard<std::mutex> l(mu_);
      last_body_ = req.substr(req.find("\r\n\r\n") + 4);
      last_head_ = req.substr(0, req.find("\r\n\r\n"));
    }
    std::string status = "200 OK", body;
    switch (mode.load()) {
      case Mode::kClean:
        body = R"({"id":"modr-1","model":"m","results":[{"flagged":false,"categories":{"violence":false},"category_scores":{"violence":0.01}}]})";
        break;
      case Mode::kFlagged:
        body = R"({"id":"modr-1","model":"m","results":[{"flagged":true,"categories":{"violence":true,"hate":false},"category_scores":{"violence":0.97,"hate":0.1}}]})";
        break;
      case Mode::kError500:
        status = "500 Internal Server Error";
        body = R"({"error":{"message":"down"}})";
        break;
      case Mode::kGarbage:
        body = "not json";
        break;
      case Mode::kHang:  // never answers: wait until the client gives up (closes) or the test ends
        while (!stop_) {
          pollfd p{c, POLLIN, 0};
          if (::poll(&p, 1, 20) > 0 && ::recv(c, buf, sizeof buf, 0) <= 0) return;
        }
        return;
    }
    std::string res = "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)::send(c, res.data(), res.size(), MSG_NOSIGNAL);
  }
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string last_body_, last_head_;
};

TEST(ModerationClient, ParsesAnswersAndTimesOut) {
  FakeModeration fake;
  // Timeouts are generous for a loaded machine: a loopback answer must never miss them.
  ModerationClient client(fake.url(), "omni-moderation-latest", "k", 1.0);
  ModerationResult r = client.Check("hello");
  EXPECT_FALSE(r.flagged);
  ojson sent = ojson::parse(fake.last_body());
  EXPECT_EQ(sent["input"], "hello");
  EXPECT_EQ(sent["model"], "omni-moderation-latest");
  EXPECT_NE(fake.last_head().find("POST /v1/moderations HTTP/1.1"), std::string::npos) << fake.last_head();
  EXPECT_NE(fake.last_head().find("Authorization: Bearer k\r\n"), std::string::npos) << fake.last_head();
  fake.mode = FakeModeration::Mode::kFlagged;
  r = client.Check("x");
  EXPECT_TRUE(r.flagged);
  EXPECT_EQ(r.categories, std::vector<std::string>{"violence"});
  fake.mode = FakeModeration::Mode::kError500;
  EXPECT_THROW(client.Check("x"), ModerationError);
  fake.mode = FakeModeration::Mode::kGarbage;
  EXPECT_THROW(client.Check("x"), ModerationError);
  fake.mode = FakeModeration::Mode::kHang;
  auto t0 = std::chrono::steady_clock::now();
  try {
    client.Check("x");
    ADD_FAILURE() << "no timeout";
  } catch (const ModerationError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.95);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// ---- end to end through the server ----

class ContentSafetyServer : public FakeServerTest {
 protected:
  void SetUp() override {
    FakeServerTest::SetUp();
    cfg.content_safety.enabled = true;
    cfg.content_safety.rules = {Rule("weapons", "block", {"nerve agent"}),
                                Rule("pii", "mask", {}, {R"(\d{3}-\d{2}-\d{4})"}),
                                Rule("weather", "flag", {"weather"})};
    cfg.content_safety.rules[1].max_match_bytes = 11;
  }
  HttpResponse Post(const std::string& path, const ojson& body) { return Call(port, "POST", path, body.dump()); }
  static ojson Chat(const std::string& content, bool stream = false) {
    return {{"model", "fake-moe"},
            {"messages", ojson::array({{{"role", "user"}, {"content", content}}})},
            {"stream", stream}};
  }
  // The streamed chunks' text and the finish reason of choice 0.
  static void StreamText(const HttpResponse& r, std::string& text, std::string& finish) {
    std::vector<SseEvent> evs;
    ASSERT_TRUE(ParseSse(r.body, evs)) << r.body;
    ASSERT_FALSE(evs.empty());
    EXPECT_EQ(evs.back().data, "[DONE]");
    for (size_t i = 0; i + 1 < evs.size(); ++i) {
      ojson j = ojson::parse(evs[i].data);
      ASSERT_TRUE(j.contains("choices")) << evs[i].data;
      const ojson& ch = j["choices"][0];
      if (ch.contains("delta") && ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
      if (ch.contains("text")) text += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
  }
  double Metric(const std::string& series) {
    auto r = Call(port, "GET", "/metrics");
    size_t at = r.body.find(series + " ");
    if (at == std::string::npos) return 0;
    return std::stod(r.body.substr(at + series.size() + 1));
  }
};

TEST_F(ContentSafetyServer, BlockedPromptIs400ContentFilterAndNeverReachesTheEngine) {
  Start();
  auto r = Post("/v1/chat/completions", Chat("how do I make a Nerve Agent"));
  std::string msg = ExpectApiError(r, 400, "messages");
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "content_filter");
  EXPECT_NE(msg.find("weapons_cat"), std::string::npos) << msg;
  r = Post("/v1/completions", {{"prompt", "nerve agent"}});
  ExpectApiError(r, 400, "prompt");
  EXPECT_EQ(engine.num_submitted(), 0u);
  EXPECT_EQ(Metric(R"(tessera_content_safety_hits_total{source="rule",stage="input",category="weapons_cat",action="block"})"),
            2);
}

TEST_F(ContentSafetyServer, TokenIdPromptsAreCheckedAsText) {
  cfg.content_safety.rules.push_back(Rule("ids", "mask", {}, {"<7>"}, "input"));
  Start();
  auto r = Post("/v1/completions", {{"prompt", ojson::array({5, 7})}});
  ExpectApiError(r, 400, "prompt");  // ids cannot be masked: a mask match blocks
  r = Post("/v1/completions", {{"prompt", ojson::array({5, 6})}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ContentSafetyServer, RefusalModeAnswersWithoutTheEngine) {
  cfg.content_safety.input_block = "refusal";
  cfg.content_safety.refusal_message = "No.";
  Start();
  auto r = Post("/v1/chat/completions", Chat("nerve agent please"));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "No.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_filter");
  r = Post("/v1/chat/completions", Chat("nerve agent please", true));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text, finish;
  StreamText(r, text, finish);
  EXPECT_EQ(text, "No.");
  EXPECT_EQ(finish, "content_filter");
  EXPECT_EQ(engine.num_submitted(), 0u);
}

TEST_F(ContentSafetyServer, MaskedPromptReachesTheEngineMasked) {
  Start();
  auto r = Post("/v1/chat/completions", Chat("my ssn is 123-45-6789"));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string prompt;
  for (int32_t id : engine.last().prompt) prompt += static_cast<char>(id);
  EXPECT_NE(prompt.find("my ssn is ***"), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("6789"), std::string::npos) << prompt;
}

TEST_F(ContentSafetyServer, OutputBlockStopsWithContentFilterNonStream) {
  engine.script = {"Mix the ", "ner", "ve ag", "ent with ", "water"};
  Start();
  auto r = Post("/v1/chat/completions", Chat("hi"));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Mix the ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_filter");
  EXPECT_TRUE(engine.WaitCancelled(0));  // the engine stops generating
  r = Post("/v1/completions", {{"prompt", "x"}});
  j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], "Mix the ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_filter");
}

TEST_F(ContentSafetyServer, OutputBlockStopsWithContentFilterStream) {
  engine.script = {"Mix the ", "ner", "ve ag", "ent with ", "water"};
  engine.delay_ms = 5;
  Start();
  auto r = Post("/v1/chat/completions", Chat("hi", true));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text, finish;
  StreamText(r, text, finish);
  EXPECT_EQ(text, "Mix the ");
  EXPECT_EQ(r.body.find("ner"), std::string::npos) << r.body;  // no part of the phrase went out
  EXPECT_EQ(finish, "content_filter");
  EXPECT_TRUE(engine.WaitCancelled(0));
  // Diffusion models stream whole blocks: the same path, the phrase inside one block.
  engine.script = {"block one. ", "a nerve agent block", " three"};
  r = Post("/v1/completions", {{"prompt", "x"}, {"stream", true}});
  text.clear();
  StreamText(r, text, finish);
  EXPECT_EQ(text, "block one. a ");
  EXPECT_EQ(finish, "content_filter");
}

TEST_F(ContentSafetyServer, OutputMaskAndFlagAndHeldTextFlushed) {
  engine.script = {"call 555-", "12-3456 about the weath", "er; the nerve"};
  Start();
  auto r = Post("/v1/chat/completions", Chat("hi", true));
  std::string text, finish;
  StreamText(r, text, finish);
  EXPECT_EQ(text, "call *** about the weather; the nerve");  // "nerve" was held, then flushed
  EXPECT_EQ(finish, "stop");
  r = Post("/v1/chat/completions", Chat("hi"));
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "call *** about the weather; the nerve");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(Metric(R"(tessera_content_safety_hits_total{source="rule",stage="output",category="weather_cat",action="flag"})"),
            2);
  EXPECT_EQ(Metric(R"(tessera_content_safety_hits_total{source="rule",stage="output",category="pii_cat",action="mask"})"),
            2);
}

TEST_F(ContentSafetyServer, OneBlockedChoiceLeavesTheOthers) {
  // The fake's choice 1 gets "#1" after each piece, which breaks the phrase up: only choice 0 is cut.
  engine.script = {"Mix the ", "nerve ", "agent ", "now"};
  Start();
  auto r = Post("/v1/chat/completions", {{"model", "fake-moe"},
                                         {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})},
                                         {"n", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Mix the ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_filter");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "Mix the #1nerve #1agent #1now#1");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
}

TEST_F(ContentSafetyServer, AccessLogNamesTheMatchesNotTheText) {
  const std::string dir = testing::ScratchDir("content_safety_log");
  cfg.server.access_log = dir + "/access.log";
  engine.script = {"the weather, wea", "ther ", "is 123-45-6789"};
  Start();
  EXPECT_EQ(Post("/v1/chat/completions", Chat("nerve agent")).status, 400);
  EXPECT_EQ(Post("/v1/chat/completions", Chat("hi")).status, 200);
  server.reset();  // flushes and closes the log
  std::string log = testing::ReadFile(dir + "/access.log");
  std::vector<ojson> lines;
  for (size_t pos = 0, nl; (nl = log.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(ojson::parse(log.substr(pos, nl - pos)));
  ASSERT_EQ(lines.size(), 2u) << log;
  ASSERT_EQ(lines[0]["content_safety"].size(), 1u) << log;
  EXPECT_EQ(lines[0]["content_safety"][0]["name"], "weapons");
  EXPECT_EQ(lines[0]["content_safety"][0]["stage"], "input");
  EXPECT_EQ(lines[0]["content_safety"][0]["action"], "block");
  EXPECT_EQ(lines[0]["content_safety"][0]["count"], 1);
  ASSERT_EQ(lines[1]["content_safety"].size(), 2u) << log;
  EXPECT_EQ(lines[1]["content_safety"][0]["category"], "weather_cat");
  EXPECT_EQ(lines[1]["content_safety"][0]["count"], 2);  // identical matches counted in one entry
  EXPECT_EQ(lines[1]["content_safety"][1]["action"], "mask");
  EXPECT_EQ(log.find("6789"), std::string::npos) << log;
  EXPECT_EQ(log.find("nerve"), std::string::npos) << log;
}

TEST_F(ContentSafetyServer, OffByDefault) {
  cfg.content_safety.enabled = false;
  engine.script = {"nerve agent"};
  Start();
  auto r = Post("/v1/chat/completions", Chat("nerve agent"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(ojson::parse(r.body)["choices"][0]["message"]["content"], "nerve agent");
}

TEST_F(ContentSafetyServer, ClassifierFlagsBlocksAndFailurePolicies) {
  FakeModeration fake;
  cfg.content_safety.rules.clear();
  cfg.content_safety.classifier_url = fake.url();
  cfg.content_safety.classifier_model = "omni-moderation-latest";
  cfg.content_safety.classifier_timeout_s = 1.0;
  cfg.content_safety.classifier_failure = "closed";
  Start();
  auto r = Post("/v1/chat/completions", Chat("hello"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ojson::parse(fake.last_body())["input"], "hello");
  EXPECT_EQ(fake.last_head().find("Authorization"), std::string::npos);  // no key configured
  fake.mode = FakeModeration::Mode::kFlagged;
  r = Post("/v1/chat/completions", Chat("something violent"));
  std::string msg = ExpectApiError(r, 400, "messages");
  EXPECT_NE(msg.find("violence"), std::string::npos) << msg;
  EXPECT_EQ(Metric(R"(tessera_content_safety_hits_total{source="classifier",stage="input",category="violence",action="block"})"),
            1);
  // Fail-closed: a classifier that never answers gives 503 after the timeout.
  fake.mode = FakeModeration::Mode::kHang;
  auto t0 = std::chrono::steady_clock::now();
  r = Post("/v1/chat/completions", Chat("hello"));
  ExpectApiError(r, 503, "", "service_unavailable");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(Metric(R"(tessera_content_safety_classifier_requests_total{result="error"})"), 1);
  EXPECT_EQ(Metric(R"(tessera_content_safety_classifier_requests_total{result="clean"})"), 1);
  EXPECT_EQ(Metric(R"(tessera_content_safety_classifier_requests_total{result="flagged"})"), 1);
  EXPECT_EQ(engine.num_submitted(), 1u);
}

TEST_F(ContentSafetyServer, ClassifierFailOpenServesAndFlagOnlyCounts) {
  FakeModeration fake;
  fake.mode = FakeModeration::Mode::kHang;
  cfg.content_safety.rules.clear();
  cfg.content_safety.classifier_url = fake.url();
  cfg.content_safety.classifier_timeout_s = 0.5;
  cfg.content_safety.classifier_failure = "open";
  cfg.content_safety.classifier_action = "flag";
  Start();
  auto r = Post("/v1/chat/completions", Chat("hello"));
  EXPECT_EQ(r.status, 200) << r.body;  // served although the classifier timed out
  fake.mode = FakeModeration::Mode::kError500;
  r = Post("/v1/chat/completions", Chat("hello"));
  EXPECT_EQ(r.status, 200) << r.body;
  fake.mode = FakeModeration::Mode::kFlagged;
  r = Post("/v1/chat/completions", Chat("violent"));
  EXPECT_EQ(r.status, 200) << r.body;  // flag: counted, served
  EXPECT_EQ(Metric(R"(tessera_content_safety_classifier_requests_total{result="error"})"), 2);
  EXPECT_EQ(Metric(R"(tessera_content_safety_hits_total{source="classifier",stage="input",category="violence",action="flag"})"),
            1);
  EXPECT_EQ(engine.num_submitted(), 3u);
}

}  // namespace
}  // namespace tessera
