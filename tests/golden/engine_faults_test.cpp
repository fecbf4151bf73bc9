// tessera tests: the engine under faults (docs/RELIABILITY.md, "Faults"): a checkpoint file truncated
// under a loaded model (io/mapped_file.h's fault guard absorbs the SIGBUS; every request then fails as
// unavailable, naming the file, and the snapshot carries the fault), and clients that give up while
// queued behind a full batch (they leave the queue at the next step, not when a slot frees).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/engine.h"
#include "io/mapped_file.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using tessera::testing::DataPath;
namespace fs = std::filesystem;

struct Outcome {
  std::map<std::string, FinishReason> finished;
  std::map<std::string, GenerationEvent> errors;
  std::map<std::string, int64_t> tokens;
};

GenerationRequest Request(const std::string& id, int64_t max_tokens, Outcome* out) {
  GenerationRequest r;
  r.id = id;
  r.prompt = {5, 6, 7, 8, 9, 10};
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.on_event = [out, id](const GenerationEvent& ev) {
    if (ev.kind == GenerationEvent::Kind::kTokens) out->tokens[id] += static_cast<int64_t>(ev.tokens.size());
    if (ev.kind == GenerationEvent::Kind::kFinished) out->finished[id] = ev.finish_reason;
    if (ev.kind == GenerationEvent::Kind::kError) out->errors[id] = ev;
  };
  return r;
}

// Without the guard the second request's forward is a SIGBUS that ends the test binary.
TEST(EngineFaults, TruncatedWeightsFailEveryRequestAsUnavailableNamingTheFile) {
  const std::string dir = testing::ScratchDir("engine-faults-truncated") + "/model";
  fs::copy(DataPath("fixtures/models/qwen3_moe"), dir, fs::copy_options::recursive);
  InstallMappedFileFaultGuard();
  auto model = Model::Load(dir);
  EngineConfig ec;
  ec.max_num_seqs = 4;
  ec.num_pages = 64;
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  engine.Submit(Request("before", 4, &out));
  engine.RunUntilIdle();
  ASSERT_EQ(out.finished.count("before"), 1u);
  EXPECT_EQ(out.tokens["before"], 4);
  EXPECT_EQ(engine.Snapshot().fault, "");

  const uint64_t faults = MappedFileFaultCount();
  fs::resize_file(dir + "/model.safetensors", 16384);  // the header (8.6 KB) stays
  engine.Submit(Request("after", 4, &out));
  engine.Submit(Request("later", 4, &out));
  engine.RunUntilIdle();
  EXPECT_GT(MappedFileFaultCount(), faults);
  EXPECT_NE(MappedFileFaultPath().find("model.safetensors"), std::string::npos) << MappedFileFaultPath();
  for (const char* id : {"after", "later"}) {
    ASSERT_EQ(out.errors.count(id), 1u) << id;
    const GenerationEvent& ev = out.errors[id];
    EXPECT_TRUE(ev.unavailable) << id;
    EXPECT_FALSE(ev.invalid_request) << id;
    EXPECT_NE(ev.error.find(dir + "/model.safetensors was truncated"), std::string::npos) << ev.error;
    EXPECT_EQ(out.tokens[id], 0) << id << ": output computed from zeros went out";
  }
  EXPECT_NE(engine.Snapshot().fault.find("model.safetensors was truncated"), std::string::npos);
  // Still refused later: the weights stay wrong.
  engine.Submit(Request("again", 2, &out));
  engine.RunUntilIdle();
  ASSERT_EQ(out.errors.count("again"), 1u);
  EXPECT_TRUE(out.errors["again"].unavailable);
}

// A batch kept full by a long request while five queued clients give up: they leave at the next
// step (their Finish events come, tessera_num_requests_waiting drops to 0), not when a slot frees.
TEST(EngineFaults, CancelledQueuedRequestsLeaveWhileTheBatchIsFull) {
  auto model = Model::Load(DataPath("fixtures/models/qwen3_moe"));
  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.num_pages = 64;
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  engine.Submit(Request("long", 40, &out));
  ASSERT_TRUE(engine.Step());  // admitted: the batch is full
  std::vector<std::shared_ptr<std::atomic<bool>>> flags;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r = Request("gone" + std::to_string(i), 8, &out);
    flags.push_back(r.cancelled);
    engine.Submit(std::move(r));
  }
  ASSERT_TRUE(engine.Step());
  EXPECT_EQ(engine.Snapshot().requests_waiting, 5);
  for (auto& f : flags) f->store(true);
  ASSERT_TRUE(engine.Step());
  EXPECT_EQ(engine.Snapshot().requests_waiting, 0);
  EXPECT_EQ(engine.Snapshot().requests_running, 1);
  for (int i = 0; i < 5; ++i) {
    const std::string id = "gone" + std::to_string(i);
    ASSERT_EQ(out.finished.count(id), 1u) << id;
    EXPECT_EQ(out.finished[id], FinishReason::kCancelled);
  }
  EXPECT_EQ(out.finished.count("long"), 0u);
  engine.RunUntilIdle();
  EXPECT_EQ(out.tokens["long"], 40);
}

}  // namespace
}  // namespace tessera
