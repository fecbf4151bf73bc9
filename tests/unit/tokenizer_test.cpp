// tessera tests: tokenizer self-consistency on the four real tokenizers (round trips, facts read
// from the vocab files themselves, streaming detokenization) and error handling of bad files.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kPackages[] = {"tokenizer-qwen3", "tokenizer-llama3", "tokenizer-deepseek_v3",
                           "tokenizer-gptoss"};

// Loading a 10-30 MB tokenizer.json takes a while: load each once per test binary.
struct Loaded {
  std::unique_ptr<Tokenizer> tok;
  json raw;  // tokenizer.json as parsed by nlohmann, the independent source of vocab facts
};
const Loaded* Load(const std::string& pkg) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(pkg);
  if (it != cache.end()) return &it->second;
  std::string dir = testing::NpmTokenizerDir(pkg);
  if (!fs::exists(dir + "/tokenizer.json")) return nullptr;
  Loaded l;
  l.tok = Tokenizer::FromDir(dir);
  l.raw = json::parse(testing::ReadFile(dir + "/tokenizer.json"));
  return &cache.emplace(pkg, std::move(l)).first->second;
}

#define LOAD_OR_SKIP(var, pkg)                                                              \
  const Loaded* var = Load(pkg);                                                            \
  if (!var) GTEST_SKIP() << testing::NpmTokenizerDir(pkg)                                   \
                         << "/tokenizer.json is missing: run scripts/fetch_test_data.sh"

// Independent UTF-8 validator (RFC 3629), so the test does not trust the code under test.
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// GPT-2's bytes_to_unicode, written from its definition.
std::string ByteChar(int b) {
  std::vector<int> bs;
  for (int x = '!'; x <= '~'; ++x) bs.push_back(x);
  for (int x = 0xA1; x <= 0xAC; ++x) bs.push_back(x);
  for (int x = 0xAE; x <= 0xFF; ++x) bs.push_back(x);
  int cp = -1, n = 0;
  for (int x = 0; x < 256; ++x) {
    bool in = std::find(bs.begin(), bs.end(), x) != bs.end();
    int c = in ? x : 256 + n++;
    if (x == b) cp = c;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<std::string> RoundTripTexts() {
  std::vector<std::string> v = {
      "", " ", "  ", "\n", "\t\t\n  \r\n", "a", "Hello, world!", "  leading and trailing   ",
      "I'm sure they'll say it's John's DOG'S toy; we've we'd",
      "def f(x):\n    return x ** 2  # square\n\n\n",
      "int main() { std::vector<int> v{1, 2, 3}; return v[0]; }",
      "1234567890123456789 and 3.14159 and -0.5e-10",
      "请部署模型，然后测试一下性能。", "日本語のテキスト、カタカナ。", "한국어 문장입니다.",
      "Emoji: 😀😃😄 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🤖", "Привет мир! مرحبا שלום γειά",
      "<|im_start|>user\nhi<|im_end|>", "<|endoftext|><|endoftext|>", "text<think>x</think>",
      "<｜begin▁of▁sentence｜>hi<｜User｜>", "<|start|>user<|message|>hi<|end|>",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
      "     many     spaces     ", "\u00a0nbsp\u3000ideographic\u2003em", "x = a<b && c>d || e<=f;",
      std::string(1000, 'a'), std::string(500, ' ') + "x", std::string(300, '\n'),
      "https://example.com/a/b?c=d&e=f#g", "{\"json\": [1, 2.5, null, true]}",
  };
  // Random strings drawn from a mixed alphabet (fixed seed: the same strings every run).
  const std::vector<std::string> alphabet = {"a", "B", "z", " ", "  ", "\n", "\t", "0", "7", "'s",
                                             "'", ".", ",", "!", "中", "文", "😀", "é", "ß", "Ω",
                                             "ж", "\u00a0", "<", "|", ">", "_", "-", "\r\n", "が"};
  std::mt19937 rng(12345);
  for (int k = 0; k < 60; ++k) {
    std::string s;
    int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  return v;
}

class RealTokenizer : public ::testing::TestWithParam<const char*> {};

TEST_P(RealTokenizer, DecodeOfEncodeIsIdentity) {
  LOAD_OR_SKIP(l, GetParam());
  for (const std::string& text : RoundTripTexts()) {
    SCOPED_TRACE(text.substr(0, 60));
    std::vector<int32_t> ids = l->tok->Encode(text);
    EXPECT_EQ(l->tok->Decode(ids), text);
    if (!text.empty()) {
      EXPECT_FALSE(ids.empty());
    }
  }
  // A large text (about 100 KB) round-trips too.
  std::string big;
  for (int i = 0; big.size() < 100000; ++i)
    big += "Paragraph " + std::to_string(i) + ": 混合文本 with code `x += " + std::to_string(i * 7919) +
           ";` and emoji 🚀.\n";
  EXPECT_EQ(l->tok->Decode(l->tok->Encode(big)), big);
}

TEST_P(RealTokenizer, VocabFactsFromTheFile) {
  LOAD_OR_SKIP(l, GetParam());
  const Tokenizer& tok = *l->tok;
  const json& vocab = l->raw["model"]["vocab"];
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) max_id = std::max<int64_t>(max_id, it.value());
  for (const auto& a : l->raw["added_tokens"]) max_id = std::max<int64_t>(max_id, a["id"]);
  EXPECT_EQ(tok.vocab_size(), max_id + 1);

  // Every added token: found inline as one id, special flag, both lookup directions.
  for (const auto& a : l->raw["added_tokens"]) {
    std::string content = a["content"];
    int32_t id = a["id"];
    SCOPED_TRACE(content);
    EXPECT_EQ(tok.TokenToId(content), std::optional<int32_t>(id));
    EXPECT_EQ(tok.IdToToken(id), content);
    EXPECT_EQ(tok.IsSpecial(id), a["special"].get<bool>());
    EXPECT_EQ(tok.Encode(content), std::vector<int32_t>{id});
    EXPECT_EQ(tok.Decode({id}), content);
    EXPECT_EQ(tok.Decode({id}, /*skip_special_tokens=*/true), a["special"].get<bool>() ? "" : content);
  }
  // Every single byte that is not whitespace/letter-digit-split sensitive encodes to the vocab
  // entry of its byte-level character.
  for (int b = 0; b < 128; ++b) {
    std::string s(1, static_cast<char>(b));
    SCOPED_TRACE(b);
    ASSERT_TRUE(vocab.contains(ByteChar(b)));
    EXPECT_EQ(tok.Encode(s), std::vector<int32_t>{vocab[ByteChar(b)].get<int32_t>()});
  }
  // Common words that are single tokens in the file encode to exactly that token.
  int checked = 0;
  for (std::string w : {"Hello", "the", "Ġthe", "Ġworld", "Ġmodel", "ĠĠĠ", "Ġ=", "ing", "Ċ"}) {
    if (!vocab.contains(w)) continue;
    std::string text;  // undo the byte-level mapping of the two characters used above
    for (size_t i = 0; i < w.size();) {
      if (w.compare(i, 2, "Ġ") == 0) text += ' ', i += 2;
      else if (w.compare(i, 2, "Ċ") == 0) text += '\n', i += 2;
      else text += w[i++];
    }
    SCOPED_TRACE(w);
    EXPECT_EQ(tok.Encode(text), std::vector<int32_t>{vocab[w].get<int32_t>()});
    ++checked;
  }
  EXPECT_GE(checked, 5);
  // Lookups agree with the file for a spread of ids.
  int n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it, ++n) {
    if (n % 997) continue;
    EXPECT_EQ(tok.TokenToId(it.key()), std::optional<int32_t>(it.value().get<int32_t>()));
    EXPECT_EQ(tok.IdToToken(it.value().get<int32_t>()), it.key());
  }
  EXPECT_EQ(tok.IdToToken(-1), "");
  EXPECT_EQ(tok.IdToToken(static_cast<int32_t>(tok.vocab_size())), "");
  EXPECT_FALSE(tok.TokenToId("definitely not a token \x01\x02").has_value());
}

// TokenBytes (what grammar-constrained decoding matches) against the vocab file: every entry's
// string mapped back through GPT-2's byte alphabet (ByteChar above, written from its definition),
// added tokens as their content, and the bytes of an encoded text adding up to the text exactly.
TEST_P(RealTokenizer, TokenBytesAreTheRawBytesOfEachToken) {
  LOAD_OR_SKIP(l, GetParam());
  const Tokenizer& tok = *l->tok;
  if (l->raw["decoder"].value("type", "") != "ByteLevel") GTEST_SKIP() << "not a byte-level decoder";
  std::map<std::string, int> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[ByteChar(b)] = b;
  const json& vocab = l->raw["model"]["vocab"];
  int partial_utf8 = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& s = it.key();
    if (tok.IsAdded(it.value().get<int32_t>())) continue;  // some files list added tokens in the vocab too
    std::string want;
    for (size_t i = 0; i < s.size();) {
      size_t n = 1;
      while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
      auto f = byte_of.find(s.substr(i, n));
      ASSERT_NE(f, byte_of.end()) << "vocab entry outside the byte alphabet: " << s;
      want += static_cast<char>(f->second);
      i += n;
    }
    int32_t id = it.value();
    ASSERT_EQ(tok.TokenBytes(id), want) << "id " << id;
    if (!ValidUtf8(want)) ++partial_utf8;
  }
  EXPECT_GT(partial_utf8, 0);  // such tokens exist, and TokenBytes keeps their bytes
  for (const auto& a : l->raw["added_tokens"]) {
    EXPECT_TRUE(tok.IsAdded(a["id"].get<int32_t>()));
    EXPECT_EQ(tok.TokenBytes(a["id"].get<int32_t>()), a["content"].get<std::string>());
  }
  EXPECT_FALSE(tok.IsAdded(tok.Encode("hello")[0]));
  for (const std::string& text : RoundTripTexts()) {
    std::string joined;
    for (int32_t id : tok.Encode(text)) joined += tok.TokenBytes(id);
    EXPECT_EQ(joined, text);
  }
  EXPECT_THROW(tok.TokenBytes(-1), Error);
  EXPECT_THROW(tok.TokenBytes(static_cast<int32_t>(tok.vocab_size())), Error);
}

// Streams ids one at a time: every piece is valid UTF-8 and the pieces add up to Decode(ids).
void CheckStreaming(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDecoder dec(tok, skip_special);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = dec.Push(id);
    EXPECT_TRUE(ValidUtf8(piece)) << "id " << id;
    all += piece;
  }
  std::string rest = dec.Flush();
  EXPECT_TRUE(ValidUtf8(rest));
  all += rest;
  EXPECT_EQ(all, tok.Decode(ids, skip_special));
}

TEST_P(RealTokenizer, IncrementalDecoding) {
  LOAD_OR_SKIP(l, GetParam());
  const Tokenizer& tok = *l->tok;
  int split_chars = 0;  // texts where some token holds only part of a character
  for (const std::string& text : RoundTripTexts()) {
    SCOPED_TRACE(text.substr(0, 60));
    std::vector<int32_t> ids = tok.Encode(text);
    for (int32_t id : ids)  // a token holding part of a character decodes (alone) to U+FFFD
      if (tok.Decode({id}).find("\xEF\xBF\xBD") != std::string::npos) ++split_chars;
    CheckStreaming(tok, ids, false);
    CheckStreaming(tok, ids, true);
  }
  EXPECT_GT(split_chars, 0) << "no text split a character across tokens: the test proves nothing";
  // Emoji spelled byte by byte (each byte its own token) are held back until complete.
  const json& vocab = l->raw["model"]["vocab"];
  std::string emoji = "\xF0\x9F\x98\x80";  // 😀
  IncrementalDecoder dec(tok);
  std::string got;
  for (size_t i = 0; i < emoji.size(); ++i) {
    std::string piece = dec.Push(vocab[ByteChar(static_cast<unsigned char>(emoji[i]))].get<int32_t>());
    if (i + 1 < emoji.size()) {
      EXPECT_EQ(piece, "") << "byte " << i;
    }
    got += piece;
  }
  EXPECT_EQ(got, emoji);
  EXPECT_EQ(dec.Flush(), "");
  // An incomplete character at the end comes out of Flush as U+FFFD; a stray continuation byte
  // followed by text is replaced and emitted.
  EXPECT_EQ(dec.Push(vocab[ByteChar(0xF0)].get<int32_t>()), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Push(vocab[ByteChar(0x98)].get<int32_t>()), "");
  EXPECT_EQ(dec.Push(vocab["a"].get<int32_t>()), "\xEF\xBF\xBD" "a");
  // A long run of bytes that never completes a character is not held back forever.
  std::string garbage;
  for (int i = 0; i < 40; ++i) garbage += dec.Push(vocab[ByteChar(0xF0)].get<int32_t>());
  EXPECT_TRUE(ValidUtf8(garbage));
  EXPECT_FALSE(garbage.empty());
  garbage += dec.Flush();
  std::string expected;
  for (int i = 0; i < 40; ++i) expected += "\xEF\xBF\xBD";
  EXPECT_EQ(garbage, expected);
  EXPECT_THROW(dec.Push(-5), Error);
  EXPECT_EQ(dec.Push(vocab["b"].get<int32_t>()), "b");  // the bad id was forgotten
}

// Random code points from all planes (no surrogates): no crash, valid UTF-8 out, and an exact round
// trip for the tokenizers without a normalizer (Qwen3 applies NFC, which may change the text).
TEST_P(RealTokenizer, RandomCodePointsRoundTrip) {
  LOAD_OR_SKIP(l, GetParam());
  bool normalizes = !l->raw["normalizer"].is_null() && l->raw["normalizer"]["type"] != "Sequence";
  std::mt19937 rng(777);
  for (int k = 0; k < 200; ++k) {
    std::string s;
    int len = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) {
      uint32_t r = rng() % 100, cp;
      if (r < 40) cp = 0x20 + rng() % 0x60;
      else if (r < 70) cp = 0x80 + rng() % 0x800;
      else if (r < 90) cp = 0x800 + rng() % (0x10000 - 0x800);
      else cp = 0x10000 + rng() % 0x100000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    ASSERT_TRUE(ValidUtf8(s));
    std::string back = l->tok->Decode(l->tok->Encode(s));
    EXPECT_TRUE(ValidUtf8(back));
    if (!normalizes) {
      EXPECT_EQ(back, s);
    }
  }
  // Random ids decode to valid UTF-8 without crashing.
  for (int k = 0; k < 200; ++k) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 8; ++i) ids.push_back(static_cast<int32_t>(rng() % l->tok->vocab_size()));
    std::string text;
    try {
      text = l->tok->Decode(ids);
    } catch (const Error&) {
      continue;  // an id without a token (a hole in the id space) is a clean error
    }
    EXPECT_TRUE(ValidUtf8(text));
  }
}

TEST_P(RealTokenizer, ConcurrentEncodeMatchesSerial) {
  LOAD_OR_SKIP(l, GetParam());
  std::vector<std::string> texts = RoundTripTexts();
  std::vector<std::vector<int32_t>> serial;
  for (const auto& t : texts) serial.push_back(l->tok->Encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (l->tok->Encode(texts[(i + k) % texts.size()]) != serial[(i + k) % texts.size()])
            ++mismatches[k];
    });
  }
  for (auto& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

INSTANTIATE_TEST_SUITE_P(All, RealTokenizer, ::testing::ValuesIn(kPackages),
                         [](const auto& info) {
                           std::string s = info.param;
                           return s.substr(s.find('-') + 1);
                         });

TEST(TokenizerConfigTest, SpecialTokensAndTemplates) {
  LOAD_OR_SKIP(q, "tokenizer-qwen3");
  EXPECT_EQ(q->tok->config().eos_token, "<|im_end|>");
  EXPECT_EQ(q->tok->config().pad_token, "<|endoftext|>");
  EXPECT_EQ(q->tok->config().bos_token, "");  // null in the file
  EXPECT_EQ(q->tok->eos_id(), std::optional<int32_t>(151645));
  EXPECT_FALSE(q->tok->bos_id().has_value());
  EXPECT_NE(q->tok->config().chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(q->tok->config().named_chat_templates.at("default"), q->tok->config().chat_template);
  EXPECT_FALSE(q->tok->config().add_bos_token);
  LOAD_OR_SKIP(d, "tokenizer-deepseek_v3");
  // DeepSeek writes its special tokens as {"__type": "AddedToken", "content": ...} objects.
  EXPECT_EQ(d->tok->config().bos_token, "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(d->tok->config().eos_token, "<｜end▁of▁sentence｜>");
  EXPECT_EQ(d->tok->bos_id(), std::optional<int32_t>(0));
  EXPECT_TRUE(d->tok->config().add_bos_token);
  EXPECT_TRUE(d->tok->config().raw.contains("model_max_length"));
}

// ---- bad files ----

std::string BytesDir() { return testing::DataPath("fixtures/tokenizers/bytes"); }
std::string BytesJson() { return testing::ReadFile(BytesDir() + "/tokenizer.json"); }

void ExpectError(const std::function<void()>& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

json Modified(const std::function<void(json&)>& f) {
  json j = json::parse(BytesJson());
  f(j);
  return j;
}

TEST(TokenizerErrors, BadFilesAreErrors) {
  ExpectError([] { Tokenizer::FromDir("/nonexistent/dir"); }, ErrorKind::kNotFound, "/nonexistent/dir");
  std::string empty = testing::ScratchDir("tok_empty");
  ExpectError([&] { Tokenizer::FromDir(empty); }, ErrorKind::kNotFound, "tokenizer.json");
  ExpectError([] { Tokenizer::FromJson("{\"model\": ", ""); }, ErrorKind::kCorrupt, "malformed JSON");
  ExpectError([] { Tokenizer::FromJson("[1, 2]", ""); }, ErrorKind::kCorrupt, "tokenizer.json");
  ExpectError([] { Tokenizer::FromJson(BytesJson(), "{not json"); }, ErrorKind::kCorrupt,
              "tokenizer_config.json");
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = Modified([&](json& t) { t["model"]["type"] = type; });
    ExpectError([&] { Tokenizer::FromJson(j.dump(), ""); }, ErrorKind::kUnsupported, type);
  }
  json bad_merge = Modified([](json& t) { t["model"]["merges"] = json::array({"a zzz"}); });
  ExpectError([&] { Tokenizer::FromJson(bad_merge.dump(), ""); }, ErrorKind::kCorrupt, "zzz");
  json bad_merge2 = Modified([](json& t) { t["model"]["merges"] = json::array({"abc"}); });
  ExpectError([&] { Tokenizer::FromJson(bad_merge2.dump(), ""); }, ErrorKind::kCorrupt, "merge #0");
  json bad_pre = Modified([](json& t) { t["pre_tokenizer"] = {{"type", "CharDelimiterSplit"}}; });
  ExpectError([&] { Tokenizer::FromJson(bad_pre.dump(), ""); }, ErrorKind::kUnsupported,
              "CharDelimiterSplit");
  json bad_regex = Modified([](json& t) {
    t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  });
  ExpectError([&] { Tokenizer::FromJson(bad_regex.dump(), ""); }, ErrorKind::kUnsupported, "(unclosed");
  json bad_norm = Modified([](json& t) { t["normalizer"] = {{"type", "Precompiled"}}; });
  ExpectError([&] { Tokenizer::FromJson(bad_norm.dump(), ""); }, ErrorKind::kUnsupported, "Precompiled");
  json no_model = Modified([](json& t) { t.erase("model"); });
  ExpectError([&] { Tokenizer::FromJson(no_model.dump(), ""); }, ErrorKind::kCorrupt, "model");
  // A post-processor naming an id no token has (fuzz/corpus/tokenizer/crash-postprocessor-id).
  json bad_post = json::parse(BytesJson());
  bad_post["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"[CLS]", 99999}}, {"sep", {"[SEP]", 1}}};
  ExpectError([&] { Tokenizer::FromJson(bad_post.dump(), ""); }, ErrorKind::kCorrupt, "post_processor adds id 99999");
  json bad_vocab = Modified([](json& t) { t["model"]["vocab"]["x"] = "seven"; });
  ExpectError([&] { Tokenizer::FromJson(bad_vocab.dump(), ""); }, ErrorKind::kCorrupt, "vocab");
  ExpectError([] { Tokenizer::FromJson(BytesJson(), R"({"chat_template": 5})"); }, ErrorKind::kCorrupt,
              "chat_template");
  ExpectError([] { Tokenizer::FromJson(BytesJson(), R"({"eos_token": 5})"); }, ErrorKind::kCorrupt,
              "eos_token");
}

TEST(TokenizerErrors, BadInputIsAnError) {
  auto tok = Tokenizer::FromDir(BytesDir());
  ExpectError([&] { tok->Decode({-1}); }, ErrorKind::kInvalidArgument, "-1");
  ExpectError([&] { tok->Decode({72, 264}); }, ErrorKind::kInvalidArgument, "264");
  ExpectError([&] { tok->Encode("ok \xC3( bad"); }, ErrorKind::kInvalidArgument, "UTF-8");
  ExpectError([&] { tok->Encode("\xED\xA0\x80"); }, ErrorKind::kInvalidArgument, "UTF-8");  // surrogate
  EXPECT_EQ(tok->Decode({}), "");
  EXPECT_TRUE(tok->Encode("").empty());
  // Bytes that are not UTF-8 decode to U+FFFD, one per maximal invalid subsequence.
  EXPECT_EQ(tok->Decode({0xE4, 0xBD, 'a', 0x80}), "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD");
}

TEST(TokenizerConfigTest, TemplateListAndJinjaOverride) {
  std::string cfg = R"({"chat_template": [{"name": "default", "template": "D"},
                                           {"name": "tool_use", "template": "T"}],
                        "bos_token": {"content": "<|im_start|>", "lstrip": false},
                        "add_bos_token": true})";
  auto t = Tokenizer::FromJson(BytesJson(), cfg);
  EXPECT_EQ(t->config().chat_template, "D");
  EXPECT_EQ(t->config().named_chat_templates.at("tool_use"), "T");
  EXPECT_EQ(t->config().bos_token, "<|im_start|>");
  EXPECT_EQ(t->bos_id(), std::optional<int32_t>(257));
  EXPECT_TRUE(t->config().add_bos_token);
  std::string dir = testing::ScratchDir("tok_jinja");
  testing::WriteFile(dir + "/tokenizer.json", BytesJson());
  testing::WriteFile(dir + "/tokenizer_config.json", cfg);
  testing::WriteFile(dir + "/chat_template.jinja", "{{ messages }}");
  auto t2 = Tokenizer::FromDir(dir);
  EXPECT_EQ(t2->config().chat_template, "{{ messages }}");
  EXPECT_EQ(t2->config().named_chat_templates.at("tool_use"), "T");
  // No tokenizer_config.json at all is fine: an empty config.
  std::string dir3 = testing::ScratchDir("tok_noconfig");
  testing::WriteFile(dir3 + "/tokenizer.json", BytesJson());
  auto t3 = Tokenizer::FromDir(dir3);
  EXPECT_EQ(t3->config().chat_template, "");
  EXPECT_TRUE(t3->config().raw.is_object());
}

TEST(TokenizerMerges, ListAndStringFormsAgree) {
  // The same two merges written as "a b" strings and as [a, b] lists give the same tokenizer.
  auto make = [](bool list_form) {
    json t = json::parse(BytesJson());
    t["model"]["vocab"]["he"] = 300;
    t["model"]["vocab"]["hel"] = 301;
    if (list_form) t["model"]["merges"] = json::array({json::array({"h", "e"}), json::array({"he", "l"})});
    else t["model"]["merges"] = json::array({"h e", "he l"});
    return Tokenizer::FromJson(t.dump(), "");
  };
  auto a = make(false), b = make(true);
  EXPECT_EQ(a->Encode("hello"), (std::vector<int32_t>{301, 'l', 'o'}));
  EXPECT_EQ(b->Encode("hello"), a->Encode("hello"));
  EXPECT_EQ(a->vocab_size(), 302);
  EXPECT_EQ(a->Decode({301, 'l', 'o'}), "hello");
}

// A SentencePiece-style byte-fallback tokenizer: ByteFallback decodes a run of <0xXX> tokens as a
// whole, and one invalid byte turns every byte of the run into U+FFFD, text that was already valid
// included (as HF does). A model can write such a run; streaming must give what Decode gives, so
// the run is held back until it ends. (fuzz/corpus/tokenizer/crash-bytefallback-run: the stream
// gave "z\u00e9" then U+FFFD while Decode gave U+FFFD only.)
TEST(TokenizerStreaming, ByteFallbackRunTurnedInvalidMatchesDecode) {
  json vocab = {{"<unk>", 0}, {"a", 1}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 2 + b;
  json t = {{"version", "1.0"},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}}},
            {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
                       {"vocab", vocab}, {"merges", json::array()}}}};
  auto tok = Tokenizer::FromJson(t.dump(), "");
  auto byte = [](int b) { return 2 + b; };
  // "a", then the byte tokens of "z", of e-acute (C3 A9), then F4 28 (0x28 cannot continue F4), "a".
  const std::vector<int32_t> ids = {1, byte(0x7A), byte(0xC3), byte(0xA9), byte(0xF4), byte(0x28), 1};
  const std::string whole = tok->Decode(ids);
  std::string five_fffd;
  for (int i = 0; i < 5; ++i) five_fffd += "\xEF\xBF\xBD";
  EXPECT_EQ(whole, "a" + five_fffd + "a");
  for (bool flush_early : {false, true}) {
    IncrementalDecoder dec(*tok);
    std::string streamed;
    const size_t n = flush_early ? ids.size() - 1 : ids.size();  // end inside the run: Flush decides
    for (size_t i = 0; i < n; ++i) streamed += dec.Push(ids[i]);
    streamed += dec.Flush();
    EXPECT_EQ(streamed, tok->Decode(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n))))
        << "flush_early " << flush_early;
  }
}

}  // namespace
}  // namespace tessera
