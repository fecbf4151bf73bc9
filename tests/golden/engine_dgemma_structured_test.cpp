// tessera engine tests: structured output on a canvas-diffusion model (DiffusionGemma's uniform-state
// canvases, engine_canvas.cpp ConstrainCanvasRows). The tiny numpy DiffusionGemma checkpoint (random
// weights) with the byte tokenizer: its end ids are remapped to the tokenizer's <|im_end|> (the
// checkpoint's own, 1 / 106 / 50, are byte tokens there and would be stop ids the JSON text could never
// use). Every output of a sample of the schema suite that ends must parse and validate with Python's
// jsonschema (tests/tools/validate_json_schema.py); choices and regexes match exactly; max_tokens inside
// a structure is "length" with a proper prefix; and the same requests without the grammar do not parse
// (the constraint is what makes them valid).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "dgemma_checkpoint.h"
#include "backend/backend.h"
#include "engine/engine.h"
#include "engine_outcome.h"
#include "schema_suite_check.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using grammar::GrammarFormat;
using nlohmann::ordered_json;
using testing::DataPath;
using testing::Outcome;

constexpr int32_t kImEnd = 258;  // <|im_end|> of tests/data/fixtures/tokenizers/bytes

// The tiny checkpoint with its end ids (config.json, its text_config, generation_config.json) set to
// <|im_end|>; the weights are the same files.
std::string CheckpointWithByteTokenizerEnds() {
  static const std::string dir = [] {
    const std::string src = testing::DgemmaSelfcheckDir();
    const std::string out = testing::ScratchDir("dgemma_tiny_structured");
    for (const auto& e : std::filesystem::directory_iterator(src)) {
      if (!e.is_regular_file()) continue;
      std::filesystem::copy_file(e.path(), out + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
    for (const char* name : {"config.json", "generation_config.json"}) {
      const std::string path = out + "/" + name;
      if (!std::filesystem::exists(path)) continue;
      ordered_json j = ordered_json::parse(testing::ReadFile(path));
      j["eos_token_id"] = ordered_json::array({kImEnd});
      if (j.contains("text_config")) j["text_config"]["eos_token_id"] = kImEnd;
      testing::WriteFile(path, j.dump(1));
    }
    return out;
  }();
  return dir;
}

struct Fixtures {
  explicit Fixtures(const std::string& device) {
    LoadOptions lo;
    lo.device = device;
    model = Model::Load(CheckpointWithByteTokenizerEnds(), lo);
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok = Tokenizer::FromDir(DataPath("fixtures/tokenizers/bytes"));
};
Fixtures& Shared() {
  static Fixtures f("cpu");
  return f;
}
// The same checkpoint on the GPU (loaded by the *OnCuda test only, which skips without a device).
Fixtures& SharedCuda() {
  static Fixtures f("cuda");
  return f;
}

EngineConfig Config() {
  EngineConfig cfg;
  cfg.page_size = 16;
  cfg.max_num_seqs = 64;
  cfg.kv_cache_bytes = 256ll << 20;
  cfg.max_model_len = 4096;
  cfg.canvas.max_denoising_steps = 4;  // a short schedule: the test is about the constraint, not quality
  return cfg;
}

struct Job {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: free
  uint64_t seed = 0;
  int64_t max_tokens = 0;
  bool ignore_eos = false;
};

std::vector<Outcome> RunJobs(Engine& engine, const std::vector<Job>& jobs) {
  const auto prompt = testing::DgemmaPromptIds();
  std::vector<Outcome> outs(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    GenerationRequest r = testing::MakeCollectingRequest(prompt, jobs[i].max_tokens, &outs[i]);
    r.sampling.temperature = 1.f;
    r.sampling.seed = jobs[i].seed;
    r.sampling.ignore_eos = jobs[i].ignore_eos;
    r.grammar = jobs[i].grammar;
    engine.Submit(std::move(r));
  }
  engine.RunUntilIdle();
  for (const Outcome& o : outs) EXPECT_TRUE(o.finished && o.error.empty()) << o.error;
  return outs;
}

#ifdef TESSERA_SANITIZED
constexpr size_t kSchemaStride = 12;
#else
constexpr size_t kSchemaStride = 4;
#endif
constexpr int64_t kMaxTokens = 1024;

void CheckSchemaSuite(Fixtures& f, const std::string& scratch) {
  Engine engine(f.model.get(), f.tok.get(), Config());
  ordered_json suite = ordered_json::parse(testing::ReadFile(DataPath("grammar/schema_suite.json")));
  std::vector<Job> jobs;
  std::vector<size_t> schema_of;
  for (size_t i = 0; i < suite.size(); i += kSchemaStride) {
    auto g = engine.CompileGrammar(GrammarFormat::kJson, suite[i]["schema"].dump());
    for (uint64_t s = 0; s < 2; ++s) {
      jobs.push_back({g, 1000 * i + s, kMaxTokens, false});
      schema_of.push_back(i);
    }
  }
  std::vector<Outcome> outs = RunJobs(engine, jobs);
  const size_t complete = testing::ExpectSuiteOutputsValidate(suite, schema_of, outs,
                                                              std::vector<int64_t>(jobs.size(), kMaxTokens), scratch);
  std::printf("%zu of %zu outputs complete\n", complete, outs.size());
  EXPECT_GE(complete * 100, outs.size() * 75) << complete << " of " << outs.size() << " complete";
}

TEST(EngineCanvasStructuredOutput, SchemaSuiteValidates) { CheckSchemaSuite(Shared(), "engine_canvas_so"); }

// The suite on the GPU backend: the canvas forward and its logits are the device's, the rows masked on
// the host (ConstrainCanvasRows); outputs differ from the CPU's but must validate the same way.
TEST(EngineCanvasStructuredOutput, SchemaSuiteValidatesOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  CheckSchemaSuite(SharedCuda(), "engine_canvas_so_cuda");
}

TEST(EngineCanvasStructuredOutput, ChoicesRegexesAndTheEndOfTheOutput) {
  Fixtures& f = Shared();
  Engine engine(f.model.get(), f.tok.get(), Config());
  auto choice = engine.CompileGrammar(GrammarFormat::kChoice, R"(["red", "green", "blue sky"])");
  // Longer than a canvas (16): the structure spans canvases, so a commit must leave the grammar
  // where the next canvas's rows continue.
  auto regex = engine.CompileGrammar(GrammarFormat::kRegex, "[a-f]{10,20}-[0-9]{8}");
  std::vector<Job> jobs;
  for (uint64_t s = 0; s < 6; ++s) {
    jobs.push_back({choice, s, 100, false});
    jobs.push_back({regex, s, 100, false});
    jobs.push_back({choice, s, 100, true});  // complete: ends without an end token
  }
  std::vector<Outcome> outs = RunJobs(engine, jobs);
  std::set<std::string> seen;
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string& t = outs[k].text;
    EXPECT_EQ(outs[k].reason, FinishReason::kStop) << t;
    if (jobs[k].grammar == choice) {
      EXPECT_TRUE(t == "red" || t == "green" || t == "blue sky") << t;
      seen.insert(t);
    } else {
      EXPECT_TRUE(std::regex_match(t, std::regex("[a-f]{10,20}-[0-9]{8}"))) << t;
      EXPECT_GT(outs[k].stats.steps_per_block.size(), 1u) << "spans canvases";
    }
  }
  EXPECT_GE(seen.size(), 2u) << "random sampling: not one answer";
  // max_tokens inside the structure: "length", and the text is a proper prefix.
  auto schema = engine.CompileGrammar(GrammarFormat::kJson,
                                      R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})");
  for (const Outcome& o : RunJobs(engine, {{schema, 7, 5, false}, {schema, 8, 5, false}})) {
    EXPECT_EQ(o.reason, FinishReason::kLength);
    EXPECT_EQ(o.tokens.size(), 5u);
    EXPECT_EQ(o.text.substr(0, 1), "{") << o.text;
  }
}

// The counter-check: the same schema requests without their grammar produce no valid JSON at all
// on this random model, so the suite above validates because of the constraint.
TEST(EngineCanvasStructuredOutput, WithoutTheGrammarTheOutputIsNotJson) {
  Fixtures& f = Shared();
  Engine engine(f.model.get(), f.tok.get(), Config());
  std::vector<Job> jobs;
  for (uint64_t s = 0; s < 4; ++s) jobs.push_back({nullptr, s, 64, false});
  for (const Outcome& o : RunJobs(engine, jobs)) EXPECT_FALSE(nlohmann::json::accept(o.text)) << o.text;
}

}  // namespace
}  // namespace tessera
