// tessera tests: IncrementalDecoder's keep list: with skip_special_tokens, the special tokens listed
// keep their text and the others are dropped (what the engine does for a chat format's markers, such
// as Gemma 4's <|tool_call>), on the real Qwen3 tokenizer (<|im_end|> and <|endoftext|> are special,
// <think> is an added token that is not).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip, std::vector<int32_t> keep) {
  IncrementalDecoder dec(tok, skip, std::move(keep));
  std::string out;
  for (int32_t id : ids) out += dec.Push(id);
  return out + dec.Flush();
}

TEST(IncrementalDecoderKeep, KeptSpecialTokensStayOthersGo) {
  const std::string dir = testing::NpmTokenizerDir("tokenizer-qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << dir << " missing: run scripts/fetch_test_data.sh";
  std::unique_ptr<Tokenizer> tok = Tokenizer::FromDir(dir);
  const int32_t im_end = *tok->TokenToId("<|im_end|>");
  const int32_t eot = *tok->TokenToId("<|endoftext|>");
  ASSERT_TRUE(tok->IsSpecial(im_end) && tok->IsSpecial(eot));
  const std::vector<int32_t> ids = tok->Encode("Hi<|im_end|> there<|endoftext|>!<think>x é");
  EXPECT_EQ(Stream(*tok, ids, true, {}), "Hi there!<think>x é");
  EXPECT_EQ(Stream(*tok, ids, true, {im_end}), "Hi<|im_end|> there!<think>x é");
  EXPECT_EQ(Stream(*tok, ids, true, {eot, im_end}), "Hi<|im_end|> there<|endoftext|>!<think>x é");
  EXPECT_EQ(Stream(*tok, ids, false, {im_end}), "Hi<|im_end|> there<|endoftext|>!<think>x é");
  // A bad id is still an error (and forgotten).
  IncrementalDecoder dec(*tok, true, {im_end});
  EXPECT_THROW(dec.Push(-1), Error);
  EXPECT_THROW(dec.Push(static_cast<int32_t>(tok->vocab_size())), Error);
  EXPECT_EQ(dec.Push(im_end), "<|im_end|>");
}

}  // namespace
}  // namespace tessera
