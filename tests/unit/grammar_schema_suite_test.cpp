// tessera tests: the schema suite (tests/data/grammar/schema_suite.json: tool definitions and
// extraction tasks with nesting, enums, patterns, formats, numeric bounds, $ref, anyOf / oneOf and
// recursion). Random walks over the Qwen3 vocabulary must end in documents that parse as JSON and
// that Python's `jsonschema` (tests/tools/validate_json_schema.py) finds valid. A missing python3 or
// jsonschema fails the test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "grammar/random_walk.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using nlohmann::ordered_json;

// Walks every `stride`-th schema of the suite over `vocab` and has the Python validator check the
// documents.
void CheckSuite(const std::shared_ptr<const grammar::TokenVocabulary>& vocab, int walks, int max_free_steps,
                const std::string& scratch, size_t stride = 1) {
  ordered_json suite = ordered_json::parse(testing::ReadFile(testing::DataPath("grammar/schema_suite.json")));
  ASSERT_GE(suite.size(), 50u);
  grammar::GrammarCompiler compiler(vocab);
  std::mt19937_64 rng(2024);
  ordered_json cases = ordered_json::array();
  size_t documents = 0;
  std::set<std::string> distinct;
  for (size_t i = 0; i < suite.size(); i += stride) {
    const ordered_json& entry = suite[i];
    const std::string name = entry["name"];
    SCOPED_TRACE(name);
    std::shared_ptr<const grammar::CompiledGrammar> g;
    ASSERT_NO_THROW(g = compiler.Compile(grammar::GrammarFormat::kJson, entry["schema"].dump()));
    ordered_json docs = ordered_json::array();
    for (int walk = 0; walk < walks; ++walk) {
      grammar::RandomWalkOptions opts;
      opts.min_free_steps = 5 + max_free_steps * walk / 4;
      opts.max_free_steps = 5 + max_free_steps * (walk + 1) / 2;
      opts.max_steps = 20000;
      grammar::RandomWalkResult r = grammar::RandomWalk(g, opts, &rng);
      ASSERT_TRUE(r.complete) << r.failure << " after: " << r.text;
      docs.push_back(r.text);
      distinct.insert(r.text);
      ++documents;
    }
    cases.push_back({{"name", name}, {"schema", entry["schema"]}, {"documents", docs}});
  }
  EXPECT_GT(distinct.size(), documents * 3 / 4);  // walks explore, not repeat

  std::string file = testing::ScratchDir(scratch) + "/cases.json";
  testing::WriteFile(file, cases.dump(1));
  testing::CommandResult r = testing::RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                                                 "/tests/tools/validate_json_schema.py " + file);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(std::to_string(documents) + " documents checked, 0 invalid"), std::string::npos) << r.out;
}

// Under the sanitizers every 3rd schema: compiling each schema against the 151k-token vocabulary
// and walking it took 130 s there for all 60 (160-370 s in ctest -j2 runs). Every schema still
// compiles and walks under the sanitizers in ByteLevelWalksValidateWithPythonJsonschema below; the
// release build walks all 60 here.
#ifdef TESSERA_SANITIZED
constexpr size_t kQwen3SchemaStride = 3;
#else
constexpr size_t kQwen3SchemaStride = 1;
#endif

TEST(GrammarSchemaSuite, RandomWalksValidateWithPythonJsonschema) {
  QWEN3_OR_SKIP(vocab);
  CheckSuite(vocab, 4, 80, "schema_suite", kQwen3SchemaStride);
}

// The same schemas one byte a token: walks reach escapes, digits and UTF-8 sequences byte by byte
// (and this runs even without the npm tokenizer data).
TEST(GrammarSchemaSuite, ByteLevelWalksValidateWithPythonJsonschema) {
  CheckSuite(testing::ByteVocabulary(), 3, 400, "schema_suite_bytes");
}

// The validator itself must reject what the schemas forbid (a check of the checker).
TEST(GrammarSchemaSuite, ValidatorRejectsInvalidDocuments) {
  ordered_json cases = ordered_json::array();
  cases.push_back(
      {{"name", "bad"},
       {"schema", ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"integer","maximum":3},
                      "d":{"type":"string","format":"date"}},"required":["a"]})")},
       {"documents", {R"j({"a":4})j", R"j({"a":1,"d":"2024-02-30"})j", R"j({"a":1,"a":2})j", "{\"a\":1", "{}"}}});
  std::string dir = testing::ScratchDir("schema_suite_bad");
  testing::WriteFile(dir + "/cases.json", cases.dump());
  testing::CommandResult r = testing::RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                                                 "/tests/tools/validate_json_schema.py " + dir + "/cases.json");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("5 documents checked, 5 invalid"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tessera
