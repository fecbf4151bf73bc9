// tessera CLI: `tessera logits`: one forward over given ids (causal, or block-causal with
// --block-size) writing the float32 logits [T, vocab] as .npy: the hook the golden checks use.
#include "cli_common.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "model/model.h"

namespace tessera {

namespace {

struct LogitsFlags {
  std::string model, ids, out, dtype = "f32", quantization = "none";
  int64_t block_size = 0;
  int threads = 0;
};

int RunLogits(const LogitsFlags& f) {
  std::vector<int32_t> ids = ParseIdList(f.ids, "--ids");
  if (f.threads > 0) ThreadPool::SetGlobalThreads(f.threads);
  if (f.dtype == "bf16" && !ForceGemmKernel("avx512bf16"))
    throw UsageError("--dtype bf16 needs a processor with AVX512-BF16 (this one computes in f32 only)");
  LoadOptions lo;
  lo.quantization = f.quantization;
  auto model = Model::Load(f.model, lo);
  const ModelConfig& mc = model->config();
  for (int32_t t : ids)
    if (t >= mc.vocab_size) throw UsageError(fmt::format("--ids: token id {} is out of range [0, {})", t, mc.vocab_size));
  if (f.block_size < 0) throw UsageError("--block-size must be positive");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t page = 16;
  model->AllocateCaches((n + page - 1) / page, page, 1);
  SequenceCache cache;
  for (int64_t p = 0; p < (n + page - 1) / page; ++p) cache.pages.push_back(static_cast<int32_t>(p));
  if (mc.NumLayersOf(LayerKind::kLinearAttention) > 0) {
    cache.state_slot = 0;
    model->ResetStateSlot(0);
  }
  Batch batch;
  Segment seg;
  seg.cache = &cache;
  seg.first_pos = 0;
  seg.tokens = ids;
  seg.commit_len = n;
  seg.block_size = f.block_size;
  for (int64_t i = 0; i < n; ++i) seg.logits_rows.push_back(static_cast<int32_t>(i));
  batch.segments.push_back(std::move(seg));
  ForwardResult r = model->Forward(batch);
  WriteNpyF32(f.out, {n, mc.vocab_size}, r.logits.data());
  return 0;
}

}  // namespace

Subcommand AddLogitsCommand(CLI::App& root) {
  auto f = std::make_shared<LogitsFlags>();
  CLI::App* app = root.add_subcommand("logits", "Run one forward over token ids and write the logits as .npy");
  app->add_option("--model", f->model, "Model directory")->required()->check(CLI::ExistingDirectory);
  app->add_option("--ids", f->ids, "Token ids, e.g. 5,17,301")->required();
  app->add_option("--out", f->out, "Output .npy file (float32, [T, vocab])")->required();
  app->add_option("--dtype", f->dtype, "Activation precision: f32 (default) or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app->add_option("--block-size", f->block_size, "Block-causal attention with this block size (diffusion models)")
      ->check(kPositiveNumber);
  app->add_option("--threads", f->threads, "CPU threads")->check(kPositiveNumber);
  app->add_option("--quantization", f->quantization, "Quantize a bf16 checkpoint's Linear weights at load: none (default), fp8, int8 or int4")
      ->check(CLI::IsMember({"none", "fp8", "int8", "int4"}));
  return {app, [f] { return RunLogits(*f); }};
}

}  // namespace tessera
