// tessera engine: resolution of diffusion settings (see diffusion_defaults.h).
#include "engine/diffusion_defaults.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

std::optional<int64_t> IntKey(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::optional<double> NumberKey(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

DiffusionPolicy ParseDiffusionPolicy(const std::string& name) {
  if (name == "static") return DiffusionPolicy::kStatic;
  if (name == "threshold") return DiffusionPolicy::kThreshold;
  if (name == "editing") return DiffusionPolicy::kEditing;
  Fail(ErrorKind::kInvalidArgument, "unknown diffusion policy \"{}\" (expected static, threshold or editing)", name);
}

const char* DiffusionPolicyName(DiffusionPolicy p) {
  switch (p) {
    case DiffusionPolicy::kStatic: return "static";
    case DiffusionPolicy::kThreshold: return "threshold";
    case DiffusionPolicy::kEditing: return "editing";
  }
  return "?";
}

bool FamilySupportsDiffusion(ModelFamily family) {
  return family == ModelFamily::kQwen3Moe || family == ModelFamily::kQwen35Moe;
}

DiffusionParams ResolveDiffusionParams(const ModelConfig& cfg, const HfModelDir& dir, const Tokenizer* tokenizer,
                                       const DiffusionOverrides& o, int64_t max_model_len) {
  if (!FamilySupportsDiffusion(cfg.family))
    Fail(ErrorKind::kInvalidArgument,
         "{} (model_type \"{}\") has no block-diffusion variant; diffusion runs on qwen3_moe (SDAR) and "
         "qwen3_5_moe (Clover) checkpoints",
         FamilyName(cfg.family), cfg.model_type);
  const auto& gen = dir.generation_config;
  const auto& conf = dir.text_config;
  DiffusionParams p;

  // Mask token: flag, config.json, generation_config.json, the tokenizer's mask token.
  int64_t mask = -1;
  if (o.mask_token_id) mask = *o.mask_token_id;
  else if (cfg.mask_token_id >= 0) mask = cfg.mask_token_id;
  else if (tokenizer) {
    for (const char* name : {"<|MASK|>", "<|mask|>"})
      if (auto id = tokenizer->TokenToId(name)) { mask = *id; break; }
    if (mask < 0 && !tokenizer->config().mask_token.empty())
      if (auto id = tokenizer->TokenToId(tokenizer->config().mask_token)) mask = *id;
  }
  if (mask < 0)
    Fail(ErrorKind::kInvalidArgument,
         "no mask token for diffusion: give --mask-token-id N, or set \"mask_token_id\" in config.json or "
         "generation_config.json, or a mask token (<|MASK|>, <|mask|> or tokenizer_config.json mask_token) "
         "in the tokenizer");
  if (mask >= cfg.vocab_size)
    Fail(ErrorKind::kInvalidArgument, "mask token id {} is out of range [0, {})", mask, cfg.vocab_size);
  p.mask_token_id = static_cast<int32_t>(mask);

  int64_t block = o.block_size ? *o.block_size : cfg.block_size > 0 ? cfg.block_size : IntKey(gen, "block_size").value_or(0);
  if (!o.block_size && block <= 0 && !IntKey(gen, "block_size") && cfg.block_size <= 0)
    Fail(ErrorKind::kInvalidArgument,
         "no block size for diffusion: give {} N or set \"block_size\" in config.json or generation_config.json",
         o.block_size_flag);
  if (block <= 0 || block > max_model_len)
    Fail(ErrorKind::kInvalidArgument, "block size must be in [1, {}] (max_model_len), got {}", max_model_len, block);
  p.block_size = block;

  std::optional<int64_t> steps = o.steps;
  for (const char* key : {"steps", "denoising_steps", "diffusion_steps"}) {
    if (steps) break;
    steps = IntKey(gen, key);
    if (!steps) steps = IntKey(conf, key);
  }
  if (!steps)
    Fail(ErrorKind::kInvalidArgument,
         "no denoising step count: give {} N or set \"steps\" in generation_config.json", o.steps_flag);
  if (*steps <= 0) Fail(ErrorKind::kInvalidArgument, "steps must be at least 1, got {}", *steps);
  p.steps = *steps;

  p.policy = o.policy.value_or(DiffusionPolicy::kStatic);
  if (!o.policy && gen.is_object() && gen.contains("policy") && gen["policy"].is_string())
    p.policy = ParseDiffusionPolicy(gen["policy"].get<std::string>());
  p.threshold = o.threshold.value_or(static_cast<float>(NumberKey(gen, "threshold").value_or(0.9)));
  if (!(p.threshold > 0 && p.threshold <= 1))
    Fail(ErrorKind::kInvalidArgument, "threshold must be in (0, 1], got {}", p.threshold);
  p.edit_threshold = o.edit_threshold.value_or(static_cast<float>(NumberKey(gen, "edit_threshold").value_or(0.9)));
  if (!(p.edit_threshold > 0 && p.edit_threshold <= 1))
    Fail(ErrorKind::kInvalidArgument, "edit threshold must be in (0, 1], got {}", p.edit_threshold);
  p.max_edit_steps = o.max_edit_steps.value_or(IntKey(gen, "max_edit_steps").value_or(4));
  if (p.max_edit_steps < 0)
    Fail(ErrorKind::kInvalidArgument, "max edit steps must be >= 0, got {}", p.max_edit_steps);
  return p;
}

SamplingDefaults SamplingDefaultsFromHf(const HfModelDir& dir) {
  SamplingDefaults d;
  const auto& g = dir.generation_config;
  if (!g.is_object()) return d;
  if (g.contains("temperature") && g["temperature"].is_number()) d.temperature = g["temperature"].get<float>();
  if (g.contains("top_p") && g["top_p"].is_number()) d.top_p = g["top_p"].get<float>();
  if (g.contains("top_k") && g["top_k"].is_number_integer()) d.top_k = g["top_k"].get<int>();
  // transformers ignores temperature / top_p / top_k when do_sample is false: greedy.
  if (g.contains("do_sample") && g["do_sample"].is_boolean() && !g["do_sample"].get<bool>()) d.temperature = 0.0f;
  return d;
}

}  // namespace tessera
