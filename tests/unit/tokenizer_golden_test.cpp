// tessera tests: the tokenizer against goldens written by HF `tokenizers` (Qwen3 fixture, the tiny
// byte-level fixture, and tests/data/tokenizers/<name>_golden.json from tools/make_tokenizer_golden.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> LoadNpm(const std::string& pkg, std::string* skip_reason) {
  std::string dir = testing::NpmTokenizerDir(pkg);
  if (!fs::exists(dir + "/tokenizer.json")) {
    *skip_reason = dir + " is missing: run scripts/fetch_test_data.sh";
    return nullptr;
  }
  return Tokenizer::FromDir(dir);
}

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// Checks every "encode" case of a golden file: ids, and decoding of the golden ids.
void CheckEncodeCases(const Tokenizer& tok, const json& cases, const std::string& name) {
  ASSERT_TRUE(cases.is_array());
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    std::string text = c.at("text").get<std::string>();
    bool add_special = c.value("add_special_tokens", false);
    SCOPED_TRACE(name + ": " + text.substr(0, 80));
    EXPECT_EQ(tok.Encode(text, add_special), Ids(c.at("ids")));
    if (c.contains("decoded")) {
      EXPECT_EQ(tok.Decode(Ids(c.at("ids")), c.value("skip_special_tokens", false)),
                c.at("decoded").get<std::string>());
    }
    if (c.contains("decoded_skip_special")) {
      EXPECT_EQ(tok.Decode(Ids(c.at("ids")), true), c.at("decoded_skip_special").get<std::string>());
    }
  }
}

TEST(TokenizerGolden, Qwen3EncodeAndChat) {
  std::string reason;
  auto tok = LoadNpm("tokenizer-qwen3", &reason);
  if (!tok) GTEST_SKIP() << reason;
  json g = json::parse(testing::ReadFile(testing::DataPath("fixtures/tokenizers/qwen3_golden.json")));
  const json& q = g.at("qwen3");
  ASSERT_EQ(q.at("encode").size(), 17u);
  CheckEncodeCases(*tok, q.at("encode"), "qwen3");
  ASSERT_FALSE(q.at("chat").empty());
  for (const auto& c : q.at("chat")) {
    std::string rendered = c.at("rendered").get<std::string>();
    SCOPED_TRACE(rendered.substr(0, 80));
    EXPECT_EQ(tok->Encode(rendered), Ids(c.at("ids")));
    EXPECT_EQ(tok->Decode(Ids(c.at("ids"))), rendered);
  }
}

TEST(TokenizerGolden, BytesFixture) {
  std::string dir = testing::DataPath("fixtures/tokenizers/bytes");
  auto tok = Tokenizer::FromDir(dir);
  json g = json::parse(testing::ReadFile(dir + "/golden.json"));
  CheckEncodeCases(*tok, g.at("encode"), "bytes");
  for (const auto& c : g.at("chat")) {
    std::string rendered = c.at("rendered").get<std::string>();
    EXPECT_EQ(tok->Encode(rendered), Ids(c.at("ids")));
  }
  EXPECT_EQ(tok->vocab_size(), 264);
  EXPECT_EQ(tok->config().eos_token, "<|im_end|>");
  EXPECT_EQ(tok->config().mask_token, "<|MASK|>");
  EXPECT_EQ(tok->TokenToId("<|MASK|>"), std::optional<int32_t>(263));
  EXPECT_FALSE(tok->config().chat_template.empty());
}

// Goldens for the other tokenizers are produced on a machine with HF tokenizers by
// tools/make_tokenizer_golden.py and committed under tests/data/tokenizers/.
class NpmGolden : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(NpmGolden, MatchesHfTokenizers) {
  auto [pkg, name] = GetParam();
  std::string golden = testing::DataPath(std::string("tokenizers/") + name + "_golden.json");
  if (!fs::exists(golden))
    GTEST_SKIP() << golden << " is missing: run tools/make_tokenizer_golden.py on a machine with "
                 << "HF tokenizers and commit its output";
  std::string reason;
  auto tok = LoadNpm(pkg, &reason);
  if (!tok) GTEST_SKIP() << reason;
  json g = json::parse(testing::ReadFile(golden));
  CheckEncodeCases(*tok, g.at("encode"), name);
}

INSTANTIATE_TEST_SUITE_P(All, NpmGolden,
                         ::testing::Values(std::make_pair("tokenizer-qwen3", "qwen3"),
                                           std::make_pair("tokenizer-llama3", "llama3"),
                                           std::make_pair("tokenizer-deepseek_v3", "deepseek_v3"),
                                           std::make_pair("tokenizer-gptoss", "gptoss")),
                         [](const auto& info) { return std::string(info.param.second); });

// Small BPE tokenizers trained by tools/make_tokenizer_golden.py with the components the real
// tokenizers do not use (normalizers, split behaviours, Metaspace, byte_fallback, unk, added-token
// lstrip/rstrip/single_word/normalized flags, TemplateProcessing, decoders, no decoder).
class SyntheticGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SyntheticGolden, MatchesHfTokenizers) {
  std::string name = GetParam();
  std::string golden = testing::DataPath("tokenizers/" + name + "_golden.json");
  std::string dir = testing::DataPath("tokenizers/synthetic/" + name);
  if (!fs::exists(golden) || !fs::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << golden << " or " << dir << " is missing: run tools/make_tokenizer_golden.py";
  auto tok = Tokenizer::FromDir(dir);
  json g = json::parse(testing::ReadFile(golden));
  CheckEncodeCases(*tok, g.at("encode"), name);
  // Streaming the golden ids one at a time adds up to the golden decoding (these decoders strip
  // or replace at token starts, unlike ByteLevel).
  for (const auto& c : g.at("encode")) {
    std::vector<int32_t> ids = Ids(c.at("ids"));
    for (bool skip : {false, true}) {
      IncrementalDecoder dec(*tok, skip);
      std::string all;
      for (int32_t id : ids) all += dec.Push(id);
      all += dec.Flush();
      EXPECT_EQ(all, c.at(skip ? "decoded_skip_special" : "decoded").get<std::string>())
          << name << " streaming, skip_special=" << skip << ": " << c.at("text");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SyntheticGolden,
                         ::testing::Values("synth_bytelevel", "synth_metaspace_fallback",
                                           "synth_splits", "synth_whitespace"));

}  // namespace
}  // namespace tessera
