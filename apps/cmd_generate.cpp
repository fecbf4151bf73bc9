// tessera CLI: `tessera generate`: one request through the engine (the same path the server
// uses), autoregressive or block-diffusion, streaming text to stdout; --output-ids, --trace,
// --stats and --show-steps expose what the decoder did.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/diffusion_defaults.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

struct GenerateFlags {
  std::string model, prompt, chat, system, ids, trace;
  int64_t max_tokens = 128, min_tokens = 0;
  std::optional<float> temperature, top_p;  // default: generation_config.json, else 0.7 / 1
  float min_p = 0.0f;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  bool ignore_eos = false, output_ids = false, stats = false, show_steps = false, no_think = false;
  int threads = 0;
  std::string device = "cpu", load_format = "auto";
  std::string kv_cache_dtype = "f32";  // LoadOptions::kv_cache_dtype
  std::string activation_precision = "f32";  // LoadOptions::activation_precision
  std::string quantization = "none";   // LoadOptions::quantization
  int tensor_parallel_size = 1;
  // Diffusion.
  bool diffusion = false;
  std::optional<int64_t> block_size, steps, max_edit_steps;
  std::optional<int32_t> mask_token_id;
  std::string policy;
  std::optional<float> threshold, edit_threshold;
  // Canvas diffusion (DiffusionGemma): the sampler's knobs over generation_config.json's.
  std::optional<int64_t> canvas_length, max_denoising_steps, stability_threshold;
  std::optional<double> entropy_bound, t_min, t_max, confidence_threshold;
  bool AnyCanvasKnob() const {
    return canvas_length || max_denoising_steps || stability_threshold || entropy_bound || t_min || t_max ||
           confidence_threshold;
  }
};

// A canvas-diffusion model's sampler settings: generation_config.json's, then the flags (each checked
// as a request's field is, before the model loads); the masked-diffusion flags do not apply.
CanvasSamplerParams CanvasParams(const GenerateFlags& f, const HfModelDir& dir, const ModelConfig& mc) {
  if (f.diffusion || f.policy.size() || f.threshold || f.edit_threshold || f.max_edit_steps || f.mask_token_id)
    throw UsageError(fmt::format("{} is a canvas-diffusion model: --diffusion, --policy, --threshold, "
                                 "--edit-threshold, --max-edit-steps and --mask-token-id do not apply",
                                 FamilyName(mc.family)));
  if (f.block_size || f.steps)
    throw UsageError(fmt::format("{} is a canvas-diffusion model: use --canvas-length and --max-denoising-steps "
                                 "instead of --block-size and --steps",
                                 FamilyName(mc.family)));
  // --show-steps draws each step's canvas (its argmax); the trace's format is masked diffusion's.
  if (!f.trace.empty()) throw UsageError("--trace is not available for canvas-diffusion models yet");
  CanvasSamplerParams p =
      CanvasSamplerParams::FromGenerationConfig(dir.generation_config, dir.dir + "/generation_config.json");
  if (f.canvas_length) {
    if (*f.canvas_length < 1 || *f.canvas_length > mc.canvas_length)
      throw UsageError(fmt::format("--canvas-length must be in [1, {}] (the model's canvas), got {}",
                                   mc.canvas_length, *f.canvas_length));
    p.canvas_length = *f.canvas_length;
  }
  if (f.max_denoising_steps) p.max_denoising_steps = *f.max_denoising_steps;
  if (f.stability_threshold) p.stability_threshold = *f.stability_threshold;
  if (f.entropy_bound) p.entropy_bound = *f.entropy_bound;
  if (f.t_min) p.t_min = *f.t_min;
  if (f.t_max) p.t_max = *f.t_max;
  if (f.confidence_threshold) p.confidence_threshold = *f.confidence_threshold;
  try {
    p.Validate("canvas sampler flags");
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return p;
}

// Renders --show-steps: the committed text stays, the block being denoised is drawn after it and
// redrawn in place (cursor saved / restored) after every step.
class StepView {
 public:
  StepView(const Tokenizer* tok, int32_t mask) : tok_(tok), mask_(mask) {}
  void Draw(const DiffusionStepView& v) {
    std::string line = "\0337\033[2m[block @" + std::to_string(v.block_start) + " step " +
                       std::to_string(v.step + 1) + "]\033[22m ";
    for (size_t i = 0; i < v.block_tokens.size(); ++i) {
      int32_t t = v.block_tokens[i];
      int64_t pos = v.block_start + static_cast<int64_t>(i);
      bool fresh = std::find(v.unmasked.begin(), v.unmasked.end(), pos) != v.unmasked.end();
      if (t == mask_) {
        line += "\u2591";
      } else {
        std::string piece = tok_ ? tok_->Decode({t}) : "<" + std::to_string(t) + ">";
        for (char& c : piece)
          if (c == '\n') c = ' ';
        line += fresh ? "\033[1;32m" + piece + "\033[0m" : piece;
      }
    }
    line += "\033[K\0338";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  void Clear() {
    std::fputs("\0337\033[K\0338", stderr);
    std::fflush(stderr);
  }

 private:
  const Tokenizer* tok_;
  int32_t mask_;
};

int RunGenerate(GenerateFlags& f) {
  int sources = !f.prompt.empty() + !f.chat.empty() + !f.ids.empty();
  if (sources != 1) throw UsageError("give exactly one of --prompt, --chat or --ids");
  // The CPU backend keeps an f32 cache (Model::Load would refuse too, but only after reading the model).
  if (f.kv_cache_dtype != "f32" && f.device == "cpu")
    throw UsageError("--kv-cache-dtype " + f.kv_cache_dtype +
                     " needs --device cuda (the CPU backend keeps an f32 KV cache)");
  if (f.activation_precision == "bf16" && f.device == "cpu")
    throw UsageError("--activation-precision bf16 needs --device cuda (the CPU backend multiplies f32 activations)");
  if (f.threads > 0) ThreadPool::SetGlobalThreads(f.threads);
  if (f.model.empty()) f.model = DemoModelDir();
  HfModelDir dir = LoadHfModelDir(f.model);
  auto tokenizer = LoadTokenizerIfPresent(f.model);
  std::vector<int32_t> prompt;
  if (!f.ids.empty()) {
    prompt = ParseIdList(f.ids, "--ids");
  } else {
    if (!tokenizer) throw UsageError(f.model + " has no tokenizer.json: use --ids");
    if (!f.chat.empty()) {
      const auto& tc = tokenizer->config();
      if (tc.chat_template.empty())
        throw UsageError(f.model + " has no chat template: use --prompt for raw text");
      ChatTemplate tmpl(tc.chat_template);
      ChatTemplateInputs in;
      in.messages = nlohmann::ordered_json::array();
      if (!f.system.empty()) in.messages.push_back({{"role", "system"}, {"content", f.system}});
      in.messages.push_back({{"role", "user"}, {"content", f.chat}});
      in.add_generation_prompt = true;
      in.extra_kwargs = nlohmann::ordered_json::object();
      if (f.no_think) in.extra_kwargs["enable_thinking"] = false;
      in.bos_token = tc.bos_token;
      in.eos_token = tc.eos_token;
      prompt = tokenizer->Encode(tmpl.Render(in), false);
    } else {
      prompt = tokenizer->Encode(f.prompt, true);
    }
  }

  // Canvas-diffusion flags are checked before the (maybe large) model loads.
  const ModelConfig pre = ModelConfig::FromHf(dir);
  std::optional<CanvasSamplerParams> canvas;
  if (pre.canvas_length > 0)
    canvas = CanvasParams(f, dir, pre);
  else if (f.AnyCanvasKnob())
    throw UsageError("--canvas-length, --max-denoising-steps, --entropy-bound, --t-min, --t-max, "
                     "--stability-threshold and --confidence-threshold apply to canvas-diffusion models "
                     "(DiffusionGemma) only");

  LoadOptions lo;
  lo.device = f.device;
  lo.load_format = f.load_format;
  lo.tensor_parallel_size = f.tensor_parallel_size;
  lo.kv_cache_dtype = f.kv_cache_dtype;
  lo.quantization = f.quantization;
  lo.activation_precision = f.activation_precision;
  auto model = LoadModelForCli(f.model, lo);
  const ModelConfig& mc = model->config();
  for (int32_t t : prompt)
    if (t >= mc.vocab_size)
      throw UsageError(fmt::format("--ids: token id {} is out of range [0, {})", t, mc.vocab_size));

  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.collect_expert_stats = f.stats;
  ec.force_diffusion = f.diffusion;
  ec.max_model_len = mc.max_position_embeddings;
  const int64_t kv_per_token = Model::KvBytesPerToken(mc, model->KvCacheDType());
  ec.kv_cache_bytes =
      std::min<int64_t>(kv_per_token * (static_cast<int64_t>(prompt.size()) + f.max_tokens + 256), 8ll << 30);
  GenerationRequest req;
  req.id = "cli";
  req.prompt = prompt;
  auto& sp = req.sampling;
  sp.max_tokens = f.max_tokens;
  sp.min_tokens = f.min_tokens;
  const SamplingDefaults model_defaults = SamplingDefaultsFromHf(dir);
  sp.temperature = f.temperature.value_or(model_defaults.temperature.value_or(0.7f));
  sp.top_k = f.top_k.value_or(model_defaults.top_k.value_or(0));
  sp.top_p = f.top_p.value_or(model_defaults.top_p.value_or(1.0f));
  sp.min_p = f.min_p;
  sp.seed = f.seed;
  sp.stop = f.stop;
  sp.repetition_penalty = f.repetition_penalty;
  sp.presence_penalty = f.presence_penalty;
  sp.frequency_penalty = f.frequency_penalty;
  sp.ignore_eos = f.ignore_eos;
  if (canvas) {  // DiffusionGemma: its sampler's knobs, and no temperature of its own
    ec.canvas = *canvas;
    if (!f.temperature) sp.temperature = 1.0f;
  }
  const bool diffusion = mc.diffusion || f.diffusion;
  if (!diffusion && (f.block_size || f.steps || !f.policy.empty() || f.threshold || f.mask_token_id))
    throw UsageError("diffusion settings given for an autoregressive model: add --diffusion to run it as one");
  if (diffusion) {
    DiffusionOverrides o;
    o.block_size = f.block_size;
    o.steps = f.steps;
    o.mask_token_id = f.mask_token_id;
    if (!f.policy.empty()) o.policy = ParseDiffusionPolicy(f.policy);
    o.threshold = f.threshold;
    o.edit_threshold = f.edit_threshold;
    o.max_edit_steps = f.max_edit_steps;
    req.diffusion = ResolveDiffusionParams(mc, dir, tokenizer.get(), o, ec.max_model_len);
    ec.default_diffusion = *req.diffusion;
    // Room for the prompt, the output rounded up to whole blocks and one block of scratch.
    ec.kv_cache_bytes += kv_per_token * 3 * req.diffusion->block_size;
  }
  req.emit_steps = f.show_steps || !f.trace.empty();

  Engine engine(model.get(), tokenizer.get(), ec);
  // Without a tokenizer (--ids on a bare checkpoint) there is no text to print: the ids are the output.
  const bool output_ids = f.output_ids || !tokenizer;
  const bool print_text = !output_ids;
  std::optional<StepView> view;
  if (f.show_steps && isatty(2)) view.emplace(tokenizer.get(), req.diffusion ? req.diffusion->mask_token_id : -1);
  nlohmann::json trace = nlohmann::json::array();
  GenerationEvent finished;
  std::string error;
  req.on_event = [&](const GenerationEvent& ev) {
    switch (ev.kind) {
      case GenerationEvent::Kind::kTokens:
        if (view) view->Clear();
        if (print_text) {
          std::fputs(ev.text.c_str(), stdout);
          std::fflush(stdout);
        }
        break;
      case GenerationEvent::Kind::kDiffusionStep: {
        if (view) view->Draw(ev.step);
        nlohmann::json toks = nlohmann::json::array();
        for (int64_t p : ev.step.unmasked) toks.push_back(ev.step.block_tokens[p - ev.step.block_start]);
        trace.push_back({{"block_start", ev.step.block_start},
                         {"step", ev.step.step},
                         {"unmasked", ev.step.unmasked},
                         {"tokens", toks},
                         {"conf", ev.step.conf}});
        break;
      }
      case GenerationEvent::Kind::kFinished:
        finished = ev;
        break;
      case GenerationEvent::Kind::kError:
        error = ev.error;
        break;
    }
  };
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  if (view) view->Clear();
  if (!error.empty()) throw UsageError(error);
  if (print_text) std::fputs("\n", stdout);
  std::fflush(stdout);  // before --stats writes to stderr, so that the two do not share a line
  if (output_ids) std::printf("%s\n", IdsToJson(finished.raw_output).c_str());
  if (!f.trace.empty()) {
    std::ofstream out(f.trace);
    if (!out) Fail(ErrorKind::kNotFound, "cannot write the trace to {}", f.trace);
    out << trace.dump(1) << "\n";
  }
  if (f.stats) {
    const RequestStats& s = finished.stats;
    std::fprintf(stderr, "finish_reason: %s\n", FinishReasonName(finished.finish_reason));
    std::fprintf(stderr, "prompt tokens: %lld, completion tokens: %lld, generated (raw): %zu\n",
                 static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.completion_tokens),
                 finished.raw_output.size());
    std::fprintf(stderr, "forwards: %lld, tokens per forward (TPF): %.3f\n", static_cast<long long>(s.forwards),
                 s.forwards ? static_cast<double>(finished.raw_output.size()) / s.forwards : 0.0);
    if (!s.steps_per_block.empty()) {
      std::string spb;
      for (int64_t v : s.steps_per_block) spb += (spb.empty() ? "" : ",") + std::to_string(v);
      std::fprintf(stderr, "denoising steps per block: [%s]\n", spb.c_str());
    }
    if (s.expert_layer_steps > 0)
      std::fprintf(stderr, "distinct experts per MoE layer per forward: sum %lld over %lld layer-forwards, mean %.2f of %lld\n",
                   static_cast<long long>(s.expert_distinct_sum), static_cast<long long>(s.expert_layer_steps),
                   static_cast<double>(s.expert_distinct_sum) / s.expert_layer_steps,
                   static_cast<long long>(mc.num_experts));
    std::fprintf(stderr, "time: %.3f s total, %.3f s to first token, %.1f tokens/s\n", s.total_seconds,
                 s.first_token_seconds,
                 s.total_seconds > 0 ? finished.raw_output.size() / s.total_seconds : 0.0);
  }
  return 0;
}

}  // namespace

Subcommand AddGenerateCommand(CLI::App& root) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* app = root.add_subcommand("generate", "Generate text (autoregressive or block diffusion)");
  app->add_option("--model", f->model, "Model directory (HF checkpoint; default: the built-in demo model)")
      ->check(CLI::ExistingDirectory);
  app->add_option("--prompt", f->prompt, "Raw prompt text");
  app->add_option("--chat", f->chat, "A user message, rendered through the model's chat template");
  app->add_option("--system", f->system, "System message for --chat");
  app->add_flag("--no-think", f->no_think, "Render --chat with enable_thinking=false");
  app->add_option("--ids", f->ids, "Prompt token ids, e.g. 5,17,301");
  app->add_option("--max-tokens", f->max_tokens, "Maximum new tokens")->check(kPositiveNumber);
  app->add_option("--min-tokens", f->min_tokens, "Suppress end-of-sequence until this many tokens exist")
      ->check(kNonNegativeNumber);
  app->add_option("--temperature", f->temperature, "Sampling temperature (0 = greedy; default: generation_config.json, else 0.7)")->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-k", f->top_k, "Top-k (0 = off)")->check(kNonNegativeNumber);
  app->add_option("--top-p", f->top_p, "Top-p (1 = off)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--min-p", f->min_p, "Min-p (0 = off)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--seed", f->seed, "Random seed for sampling (default: a random one)")->check(kSeed);
  app->add_option("--stop", f->stop, "Stop string (repeatable)");
  app->add_option("--repetition-penalty", f->repetition_penalty, "HF repetition penalty (1 = off)")->check(kPositiveNumber);
  app->add_option("--presence-penalty", f->presence_penalty, "OpenAI presence penalty")->check(CLI::Range(-2.0, 2.0));
  app->add_option("--frequency-penalty", f->frequency_penalty, "OpenAI frequency penalty")->check(CLI::Range(-2.0, 2.0));
  app->add_flag("--ignore-eos", f->ignore_eos, "Keep generating past end-of-sequence tokens");
  app->add_flag("--output-ids", f->output_ids,
                "Print the generated ids as a JSON array instead of text (implied without a tokenizer.json); "
                "diffusion: whole blocks / canvases as transformers returns them, before the --max-tokens cut");
  app->add_option("--threads", f->threads, "CPU threads (default: all cores)")->check(kPositiveNumber);
  app->add_option("--device", f->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app->add_option("--load-format", f->load_format, "auto (the checkpoint) or dummy (random weights of config.json)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  app->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache element type: f32 (default) or bf16: half the KV bytes, twice the tokens; needs "
                  "--device cuda")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app->add_option("--quantization", f->quantization, "Quantize a bf16 checkpoint's Linear weights at load: none (default), fp8, int8 or int4")
      ->check(CLI::IsMember({"none", "fp8", "int8", "int4"}));
  app->add_option("--activation-precision", f->activation_precision,
                  "What the GPU's tensor-core products multiply: f32 (default, exact) or bf16 (activations rounded "
                  "to bf16; needs --device cuda)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app->add_option("--tensor-parallel-size", f->tensor_parallel_size,
                  "Ranks to shard the model over (GPUs with --device cuda; simulated ranks on the CPU)")
      ->check(CLI::Range(1, 64));
  app->add_flag("--stats", f->stats, "Print decoding counters after generation (stderr)");
  app->add_flag("--diffusion", f->diffusion, "Run a qwen3_moe / qwen3_5_moe backbone as a block-diffusion model");
  app->add_option("--block-size", f->block_size, "Diffusion block size");
  app->add_option("--steps", f->steps, "Denoising steps per block");
  app->add_option("--policy", f->policy, "Unmasking policy: static, threshold or editing")
      ->check(CLI::IsMember({"static", "threshold", "editing"}));
  app->add_option("--threshold", f->threshold, "Confidence threshold for threshold / editing policies");
  app->add_option("--edit-threshold", f->edit_threshold, "Editing policy: confidence needed to replace a token");
  app->add_option("--max-edit-steps", f->max_edit_steps, "Editing policy: extra steps per block");
  app->add_option("--mask-token-id", f->mask_token_id, "Mask token id (default: from the config or tokenizer)");
  app->add_option("--canvas-length", f->canvas_length,
                  "Canvas diffusion (DiffusionGemma): tokens per canvas (default and most: config.json's)");
  app->add_option("--max-denoising-steps", f->max_denoising_steps,
                  "Canvas diffusion: most denoising steps per canvas (default: generation_config.json)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app->add_option("--entropy-bound", f->entropy_bound, "Canvas diffusion: entropy budget of a step's accepted rows")
      ->check(kPositiveNumber);
  app->add_option("--t-min", f->t_min, "Canvas diffusion: temperature the steps anneal down to")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--t-max", f->t_max, "Canvas diffusion: temperature of a canvas's first step")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--stability-threshold", f->stability_threshold,
                  "Canvas diffusion: earlier argmax canvases a stop needs unchanged (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  app->add_option("--confidence-threshold", f->confidence_threshold,
                  "Canvas diffusion: mean entropy below which a stable canvas stops")
      ->check(kPositiveNumber);
  app->add_option("--trace", f->trace, "Write every denoising step to this JSON file");
  app->add_flag("--show-steps", f->show_steps, "Redraw the block (a canvas model: the canvas) being denoised after every step (terminal)");
  return {app, [f] { return RunGenerate(*f); }};
}

}  // namespace tessera
