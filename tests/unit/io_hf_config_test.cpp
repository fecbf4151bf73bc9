// tessera tests: Hugging Face config loading: the fixture's config (checked against Python's json),
// the text_config merge of multimodal wrappers, optional files, and malformed input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/hf_config.h"
#include "expect_error.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteFile;

using testing::ExpectError;

TEST(IoHfConfig, FixtureAgreesWithPython) {
  const std::string dir = DataPath("fixtures/models/qwen3_moe");
  auto r = RunCommand(testing::Python3() + " -c \"import json,sys; c=json.load(open(sys.argv[1]+'/config.json')); "
                      "g=json.load(open(sys.argv[1]+'/generation_config.json')); "
                      "print(json.dumps({'arch': c['architectures'][0], 'type': c['model_type'], "
                      "'keys': len(c), 'gen_keys': len(g), 'hidden': c['hidden_size']}))\" " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto py = nlohmann::json::parse(r.out);
  HfModelDir m = LoadHfModelDir(dir);
  EXPECT_EQ(m.Architecture(), py["arch"].get<std::string>());
  EXPECT_EQ(m.ModelType(), py["type"].get<std::string>());
  EXPECT_EQ(m.config.size(), py["keys"].get<size_t>());
  EXPECT_EQ(m.text_config, m.config);  // no text_config: the merge is the config itself
  EXPECT_EQ(m.text_config["hidden_size"], py["hidden"]);
  EXPECT_EQ(m.generation_config.size(), py["gen_keys"].get<size_t>());
  EXPECT_TRUE(m.tokenizer_config.is_object());
  EXPECT_TRUE(m.tokenizer_config.empty());  // the fixture has no tokenizer_config.json
  EXPECT_EQ(m.dir, dir);
}

TEST(IoHfConfig, NestedTextConfigMerges) {
  std::string dir = ScratchDir("io-cfg-nested");
  WriteFile(dir + "/config.json", R"({
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "tie_word_embeddings": false,
    "hidden_size": 1,
    "vision_config": {"depth": 2},
    "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_experts": 256}
  })");
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  HfModelDir m = LoadHfModelDir(dir);
  EXPECT_EQ(m.Architecture(), "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(m.ModelType(), "qwen3_5_moe_text");
  EXPECT_EQ(m.text_config["hidden_size"], 2048);          // text_config wins
  EXPECT_EQ(m.text_config["num_experts"], 256);
  EXPECT_EQ(m.text_config["tie_word_embeddings"], false);  // top level kept
  EXPECT_FALSE(m.text_config.contains("text_config"));
  EXPECT_EQ(m.config["hidden_size"], 1);  // config stays as written
  EXPECT_EQ(m.config["text_config"]["hidden_size"], 2048);
  EXPECT_EQ(m.tokenizer_config["eos_token"], "<|im_end|>");
  EXPECT_TRUE(m.generation_config.empty());
}

TEST(IoHfConfig, MissingConfig) {
  std::string dir = ScratchDir("io-cfg-missing");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kNotFound, {dir + "/config.json"});
  ExpectError([&] { ReadJsonFile(dir + "/nope.json"); }, ErrorKind::kNotFound, {dir + "/nope.json"});
}

TEST(IoHfConfig, MalformedConfigNamesFileAndByte) {
  std::string dir = ScratchDir("io-cfg-bad");
  WriteFile(dir + "/config.json", "{\"a\": 1,\n \"b\": }");
  // The offset must be the one Python's json reports for the same file.
  auto r = RunCommand(testing::Python3() + " -c \"import json,sys\ntry: json.load(open(sys.argv[1]))\n"
                      "except json.JSONDecodeError as e: print(e.pos)\" " + dir + "/config.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string pos = r.out.substr(0, r.out.find('\n'));
  ASSERT_FALSE(pos.empty());
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/config.json", "at byte " + pos + ":"});
  WriteFile(dir + "/config.json", "");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/config.json", "invalid JSON"});
  WriteFile(dir + "/config.json", "[1, 2]");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/config.json", "not a JSON object"});
  WriteFile(dir + "/config.json", R"({"text_config": 3})");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/config.json", "text_config"});
}

TEST(IoHfConfig, MalformedOptionalFiles) {
  std::string dir = ScratchDir("io-cfg-opt");
  WriteFile(dir + "/config.json", R"({"model_type": "qwen3_moe"})");
  WriteFile(dir + "/generation_config.json", "{oops}");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/generation_config.json"});
  WriteFile(dir + "/generation_config.json", "{}");
  WriteFile(dir + "/tokenizer_config.json", "\"str\"");
  ExpectError([&] { LoadHfModelDir(dir); }, ErrorKind::kCorrupt, {dir + "/tokenizer_config.json", "not a JSON object"});
  WriteFile(dir + "/tokenizer_config.json", "{}");
  HfModelDir m = LoadHfModelDir(dir);
  EXPECT_EQ(m.Architecture(), "");  // absent
  EXPECT_EQ(m.ModelType(), "qwen3_moe");
}

TEST(IoHfConfig, PathHelpers) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(JoinPath("a", "/abs"), "/abs");
  std::string dir = ScratchDir("io-cfg-paths");
  EXPECT_FALSE(FileExists(dir));  // a directory is not a file
  EXPECT_FALSE(FileExists(dir + "/x"));
  WriteFile(dir + "/x", "1");
  EXPECT_TRUE(FileExists(dir + "/x"));
}

}  // namespace
}  // namespace tessera
