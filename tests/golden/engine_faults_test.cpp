// tessera tests: the engine under faults (docs/RELIABILITY.md, "Faults"): a checkpoint file truncated
// under a loaded model (io/mapped_file.h's fault guard absorbs the SIGBUS; every request then fails as
// unavailable, naming the file, and the snapshot carries the fault), clients that give up while
// queued behind a full batch (they leave the queue at the next step, not when a slot frees), and, on
// a GPU, CUDA out of memory at load (an Error naming the bytes) and in a step (503-class, then served).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
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

// Takes the whole device through a backend of its own (chunks of 1 GiB, then halves down to the
// backend's smallest, 256 B, each until none passes: the driver serves small allocations from pages
// it already holds), so that the next allocation of a model's backend fails as with a GPU that other
// processes fill. Its destructor gives everything back (the backend's own teardown).
class DeviceHog {
 public:
  DeviceHog() : be_(MakeCudaBackend()) {
    for (size_t chunk = size_t{1} << 30; chunk >= 256; chunk /= 2)
      for (;;) {
        try {
          held_.push_back(be_->Allocate(chunk));
        } catch (const Error&) {
          break;
        }
      }
  }
  size_t chunks() const { return held_.size(); }

 private:
  std::unique_ptr<Backend> be_;
  std::vector<void*> held_;
};

int64_t DeviceFreeBytes() {
  int64_t free_b = 0, total_b = 0;
  MakeCudaBackend()->MemoryInfo(&free_b, &total_b);
  return free_b;
}

// Qwen3-Next-80B's shapes with dummy weights: 160 GB of bf16, beyond any one GPU (H100 80 GB, H200
// 141 GB). The load must fail with an Error (serve and generate exit with it, naming the checkpoint's
// size: apps/cli_common.cpp) that names the allocation and the device's free memory, not crash; and
// the memory it took must come back (a retry, or another model, can load).
TEST(EngineFaults, CudaOutOfMemoryAtLoadIsAnErrorNamingTheBytesOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  const int64_t free_before = DeviceFreeBytes();
  LoadOptions lo;
  lo.device = "cuda";
  lo.load_format = "dummy";
  try {
    Model::Load(DataPath("configs/qwen3-next-80b-a3b"), lo);
    ADD_FAILURE() << "160 GB of weights loaded on a device with " << free_before << " bytes free";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA out of memory allocating"), std::string::npos) << msg;
    EXPECT_NE(msg.find("device free"), std::string::npos) << msg;
  }
  EXPECT_GT(DeviceFreeBytes(), free_before * 9 / 10) << "the failed load kept its device memory";
  lo.load_format = "auto";
  EXPECT_NO_THROW(Model::Load(DataPath("fixtures/models/qwen3_moe"), lo));
}

// A step that cannot allocate its activations (the device filled after the model and its KV pool
// were placed): the running request ends with an error flagged unavailable (the server's 503, not a
// 400 blaming the request), naming the out-of-memory; the engine thread lives on and serves the next
// request once memory is back. The starved request's prompt is 1,024 tokens, so its buffers (hundreds
// of KiB each) are larger than any the load freed into the backend's cache, which a failed
// allocation gives back to the driver before its one retry.
TEST(EngineFaults, CudaOutOfMemoryInAStepFailsTheRequestAsUnavailableThenServesOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  LoadOptions lo;
  lo.device = "cuda";
  auto model = Model::Load(DataPath("fixtures/models/qwen3_moe"), lo);
  EngineConfig ec;
  ec.max_num_seqs = 4;
  ec.num_pages = 128;  // 2,048 tokens: the long prompt fits
  Engine engine(model.get(), nullptr, ec);
  engine.Start();
  // The request's last event (kFinished or kError), from the engine thread.
  auto run = [&](const std::string& id, size_t prompt_len) {
    auto done = std::make_shared<std::promise<GenerationEvent>>();
    auto fired = std::make_shared<std::atomic<bool>>(false);
    GenerationRequest r = Request(id, 4, nullptr);
    r.prompt.resize(prompt_len);
    for (size_t i = 0; i < prompt_len; ++i) r.prompt[i] = static_cast<int32_t>(5 + (i * 37) % 500);
    r.on_event = [done, fired](const GenerationEvent& ev) {
      if (ev.kind != GenerationEvent::Kind::kFinished && ev.kind != GenerationEvent::Kind::kError) return;
      if (!fired->exchange(true)) done->set_value(ev);
    };
    auto f = done->get_future();
    engine.Submit(std::move(r));
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << id << ": no end within 60 s";
      return GenerationEvent{};
    }
    return f.get();
  };
  {
    DeviceHog hog;
    ASSERT_GT(hog.chunks(), 0u);
    const GenerationEvent ev = run("starved", 1024);
    ASSERT_EQ(ev.kind, GenerationEvent::Kind::kError) << "the first step found its memory (nothing to test)";
    EXPECT_TRUE(ev.unavailable) << ev.error;
    EXPECT_FALSE(ev.server_fault) << ev.error;
    EXPECT_FALSE(ev.invalid_request) << ev.error;
    EXPECT_NE(ev.error.find("out of memory"), std::string::npos) << ev.error;
    EXPECT_NE(ev.error.find("retry later"), std::string::npos) << ev.error;
  }
  for (const char* id : {"after", "again"}) {
    const GenerationEvent ev = run(id, 6);
    EXPECT_EQ(ev.kind, GenerationEvent::Kind::kFinished) << id << ": " << ev.error;
    EXPECT_EQ(ev.finish_reason, FinishReason::kLength) << id;
  }
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
  engine.Stop();
}

}  // namespace
}  // namespace tessera
