// tessera tests: a lazy (trigger-activated) grammar in GrammarConstraint, token by token, over a small
// BPE-like vocabulary: free text unmasked, the trigger's opening and closing forced, and the token that
// ends the structure and begins the closing in one piece ("}\n" before "</tool_call>", as a BPE model
// writes a call's last bytes) allowed exactly where the structure can end there. Without that token
// the demo model, refused its own ending, wrote whitespace and stray text after strict calls.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/grammar_constraint.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

// Printable ASCII and "\n" as single tokens, then the merged and special tokens, then the stop.
struct Vocab {
  std::vector<std::string> tokens;
  int32_t newline = -1, merged = -1, brace_brace_newline = -1, open = -1, close = -1, stop = -1;
  int32_t Id(char c) const { return static_cast<int32_t>(c - 0x20); }
};

const Vocab& TheVocab() {
  static const Vocab v = [] {
    Vocab v;
    for (int c = 0x20; c < 0x7F; ++c) v.tokens.emplace_back(1, static_cast<char>(c));
    v.newline = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("\n");
    v.merged = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("}\n");
    v.brace_brace_newline = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("}}\n");
    v.open = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("<tool_call>");
    v.close = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("</tool_call>");
    v.stop = static_cast<int32_t>(v.tokens.size()), v.tokens.push_back("</s>");
    return v;
  }();
  return v;
}

class GrammarTrigger : public ::testing::Test {
 protected:
  void SetUp() override {
    const Vocab& v = TheVocab();
    static grammar::GrammarCompiler compiler(
        grammar::TokenVocabulary::FromTokenBytes(v.tokens, {v.stop}, {v.open, v.close}));
    auto trigger = std::make_shared<tessera::GrammarTrigger>();
    trigger->trigger_ids = {v.open};
    trigger->opening = {v.newline};
    trigger->closing = {v.newline, v.close};
    constraint_ = std::make_unique<GrammarConstraint>(
        compiler.Compile(grammar::GrammarFormat::kJson,
                         R"({"type":"object","properties":{"a":{"type":"object"}},"required":["a"]})"),
        std::vector<int32_t>{}, false, trigger);
  }
  // The ids the constraint allows next (finite logits), and the whole row's verdict.
  std::vector<bool> Allowed(bool* ok = nullptr) {
    std::vector<float> row(TheVocab().tokens.size(), 0.f);
    const bool any = constraint_->MaskLogits(row.data(), static_cast<int64_t>(row.size()));
    if (ok) *ok = any;
    std::vector<bool> out(row.size());
    for (size_t i = 0; i < row.size(); ++i) out[i] = std::isfinite(row[i]);
    return out;
  }
  void Text(const std::string& s) {
    for (char c : s) ASSERT_TRUE(constraint_->Accept(TheVocab().Id(c))) << "at '" << c << "' of " << s;
  }
  std::unique_ptr<GrammarConstraint> constraint_;
};

TEST_F(GrammarTrigger, MergedEndingTokenClosesTheStructure) {
  const Vocab& v = TheVocab();
  // Free text: nothing masked, not active.
  std::vector<bool> a = Allowed();
  EXPECT_FALSE(constraint_->Active());
  EXPECT_TRUE(a[v.Id('x')] && a[v.merged] && a[v.stop]);
  Text("Sure.");
  ASSERT_TRUE(constraint_->Accept(v.open));
  // The opening is forced.
  a = Allowed();
  EXPECT_TRUE(constraint_->Active());
  EXPECT_TRUE(a[v.newline]);
  EXPECT_FALSE(a[v.Id('{')] || a[v.stop]);
  ASSERT_TRUE(constraint_->Accept(v.newline));
  Text("{\"a\":{");
  // Inside: "}}\n" (both ends, then the closing's first token) is allowed; the stop and the closing
  // tag are not. ("}\n" is plain JSON here: the inner end and whitespace.)
  a = Allowed();
  EXPECT_TRUE(a[v.Id('}')]);
  EXPECT_TRUE(a[v.brace_brace_newline]) << "'}}' ends it, then the closing's \\n";
  EXPECT_FALSE(a[v.stop] || a[v.close]);
  ASSERT_TRUE(constraint_->Accept(v.Id('}')));
  // Now one '}' ends it: the merged token is allowed and takes the closing's first token with it.
  a = Allowed();
  EXPECT_TRUE(a[v.Id('}')]);
  EXPECT_TRUE(a[v.merged]);
  EXPECT_FALSE(a[v.brace_brace_newline]);
  ASSERT_TRUE(constraint_->Accept(v.merged));
  // Only the rest of the closing.
  a = Allowed();
  EXPECT_TRUE(constraint_->Active());
  EXPECT_TRUE(a[v.close]);
  EXPECT_FALSE(a[v.newline] || a[v.stop] || a[v.Id('x')]);
  ASSERT_TRUE(constraint_->Accept(v.close));
  // Free again; an end token ends the output there.
  a = Allowed();
  EXPECT_FALSE(constraint_->Active());
  EXPECT_TRUE(a[v.stop] && a[v.Id('x')]);
  EXPECT_TRUE(constraint_->EndsAtLastMask(v.stop));
}

TEST_F(GrammarTrigger, PlainEndingTakesTheWholeClosing) {
  const Vocab& v = TheVocab();
  ASSERT_TRUE(constraint_->Accept(v.open));
  ASSERT_TRUE(constraint_->Accept(v.newline));
  Text("{\"a\":{}}");
  // Complete: the closing is due from its first token; the merged tokens would add a '}'.
  std::vector<bool> a = Allowed();
  EXPECT_TRUE(a[v.newline]);
  EXPECT_FALSE(a[v.merged] || a[v.brace_brace_newline] || a[v.Id('}')] || a[v.stop]);
  ASSERT_TRUE(constraint_->Accept(v.newline));
  ASSERT_TRUE(constraint_->Accept(v.close));
  EXPECT_FALSE(constraint_->Active());
}

TEST_F(GrammarTrigger, RefusesAMergedTokenWhereTheStructureCannotEnd) {
  const Vocab& v = TheVocab();
  ASSERT_TRUE(constraint_->Accept(v.open));
  ASSERT_TRUE(constraint_->Accept(v.newline));
  Text("{\"a\":");
  EXPECT_FALSE(Allowed()[v.merged]);
  EXPECT_FALSE(constraint_->Accept(v.merged));
}

}  // namespace
}  // namespace tessera
