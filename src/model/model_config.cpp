// tessera model: parsing of HF config.json into ModelConfig (see model_config.h).
#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/config_json.h"

namespace tessera {

using json = nlohmann::json;
using config_json::AddTokenIds;
using config_json::GetBool;
using config_json::GetInt;
using config_json::GetNumber;
using config_json::Lookup;
using config_json::RequirePositive;

std::string ModelConfig::WeightFormat() const {
  if (quant.quantized()) return quant.Describe();
  switch (load_quant) {
    case QuantKind::kFp8: return "fp8 per row (quantized at load)";
    case QuantKind::kInt8: return "int8 per row (quantized at load)";
    case QuantKind::kInt4: return fmt::format("int4 group {} (quantized at load)", kLoadInt4Group);
    case QuantKind::kNone: break;
  }
  return "bf16";
}

const char* FamilyName(ModelFamily f) {
  switch (f) {
    case ModelFamily::kQwen3Moe: return "qwen3_moe";
    case ModelFamily::kQwen3Next: return "qwen3_next";
    case ModelFamily::kQwen35Moe: return "qwen3_5_moe";
    case ModelFamily::kDiffusionGemma: return "diffusion_gemma";
  }
  return "?";
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::NumLayersOf(LayerKind kind) const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), kind);
}

int64_t ModelConfig::LinearConvDim() const {
  return 2 * linear_num_key_heads * linear_key_head_dim + linear_num_value_heads * linear_value_head_dim;
}

namespace {

// quantization_config's errors name the key, not the file: the file is added here, so that the CLI's
// one line says which checkpoint's config.json to fix.
QuantConfig QuantConfigOf(const json& config, const std::string& where) {
  try {
    return ParseQuantConfig(config);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", where, e.what()));
  }
}

}  // namespace

ModelConfig ModelConfig::FromHf(const HfModelDir& dir) {
  const std::string where = JoinPath(dir.dir, "config.json");
  const json& c = dir.text_config;
  if (!c.is_object()) Fail(ErrorKind::kCorrupt, "{}: the top level must be a JSON object", where);
  ModelConfig m;
  m.architecture = dir.Architecture();
  m.model_type = dir.ModelType();
  const std::string& t = m.model_type;
  if (t == "qwen3_moe" || t == "sdar_moe" || t == "sdar") {
    m.family = ModelFamily::kQwen3Moe;
    m.diffusion = (t != "qwen3_moe");
  } else if (t == "qwen3_next") {
    m.family = ModelFamily::kQwen3Next;
  } else if (t == "qwen3_5_moe" || t == "qwen3_5_moe_text" || t == "clover_moe") {
    m.family = ModelFamily::kQwen35Moe;
    m.diffusion = (t == "clover_moe");
  } else if (t == "diffusion_gemma" || t == "diffusion_gemma_text") {
    // Gemma 4 layers differ from the Qwen families in almost every key: their own parser.
    m.family = ModelFamily::kDiffusionGemma;
    m.quant = QuantConfigOf(dir.config, where);
    ParseDiffusionGemmaConfig(dir, where, &m);
    return m;
  } else {
    Fail(ErrorKind::kUnsupported,
         "{}: unknown architecture (model_type \"{}\", architectures \"{}\"); supported model_type: "
         "qwen3_moe, qwen3_next, qwen3_5_moe, qwen3_5_moe_text, sdar, sdar_moe, clover_moe, diffusion_gemma",
         where, t, m.architecture);
  }
  // Qwen3.5 conditional-generation checkpoints nest the text model's weights.
  m.quant = QuantConfigOf(dir.config, where);
  m.nested_language_model = dir.config.contains("text_config") ||
                            m.architecture.find("ForConditionalGeneration") != std::string::npos;

  m.vocab_size = GetInt(c, "vocab_size", where);
  m.hidden_size = GetInt(c, "hidden_size", where);
  m.num_layers = GetInt(c, "num_hidden_layers", where);
  m.num_heads = GetInt(c, "num_attention_heads", where);
  m.num_kv_heads = GetInt(c, "num_key_value_heads", m.num_heads, where);
  if (m.num_heads <= 0) Fail(ErrorKind::kCorrupt, "{}: num_attention_heads must be positive", where);
  m.head_dim = GetInt(c, "head_dim", m.hidden_size / m.num_heads, where);
  m.rms_norm_eps = GetNumber(c, "rms_norm_eps", 1e-6, where);
  m.max_position_embeddings = GetInt(c, "max_position_embeddings", 32768, where);
  m.tie_word_embeddings = GetBool(c, "tie_word_embeddings", false, where);

  // RoPE: transformers 5 writes rope_parameters; older configs write rope_theta at the top.
  m.rope_theta = GetNumber(c, "rope_theta", 10000.0, where);
  m.partial_rotary_factor = GetNumber(c, "partial_rotary_factor", 1.0, where);
  if (const json* rp = Lookup(c, "rope_parameters"); rp && rp->is_object()) {
    m.rope_theta = GetNumber(*rp, "rope_theta", m.rope_theta, where + " rope_parameters");
    m.partial_rotary_factor =
        GetNumber(*rp, "partial_rotary_factor", m.partial_rotary_factor, where + " rope_parameters");
    if (const json* rt = Lookup(*rp, "rope_type"); rt && rt->is_string() && *rt != "default")
      Fail(ErrorKind::kUnsupported, "{}: rope_type \"{}\" is not supported (only \"default\")",
           where, rt->get<std::string>());
  }
  if (const json* rs = Lookup(c, "rope_scaling"); rs && rs->is_object()) {
    auto type = rs->value("rope_type", rs->value("type", std::string("default")));
    if (type != "default" && !rs->contains("mrope_section"))
      Fail(ErrorKind::kUnsupported, "{}: rope_scaling type \"{}\" is not supported", where, type);
  }
  m.rotary_dim = static_cast<int64_t>(std::llround(m.head_dim * m.partial_rotary_factor));
  m.rotary_dim -= m.rotary_dim % 2;

  const bool hybrid = m.family != ModelFamily::kQwen3Moe;
  m.norm_style = hybrid ? RmsNormStyle::kOnePlusScale : RmsNormStyle::kScale;
  m.attn_output_gate = hybrid ? GetBool(c, "attn_output_gate", true, where) : false;

  // Layer kinds: explicit layer_types, else every full_attention_interval-th layer is full.
  m.layer_kinds.assign(m.num_layers, LayerKind::kFullAttention);
  if (hybrid) {
    if (const json* lt = Lookup(c, "layer_types")) {
      if (!lt->is_array() || static_cast<int64_t>(lt->size()) != m.num_layers)
        Fail(ErrorKind::kCorrupt, "{}: layer_types must list {} entries", where, m.num_layers);
      for (int64_t i = 0; i < m.num_layers; ++i) {
        const auto& e = (*lt)[i];
        if (e == "linear_attention") m.layer_kinds[i] = LayerKind::kLinearAttention;
        else if (e == "full_attention") m.layer_kinds[i] = LayerKind::kFullAttention;
        else Fail(ErrorKind::kCorrupt, "{}: layer_types[{}] = {} is not a known layer type", where, i, e.dump());
      }
    } else {
      int64_t interval = GetInt(c, "full_attention_interval", 4, where);
      if (interval <= 0) Fail(ErrorKind::kCorrupt, "{}: full_attention_interval must be positive", where);
      for (int64_t i = 0; i < m.num_layers; ++i)
        m.layer_kinds[i] = (i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
    }
    m.linear_conv_kernel = GetInt(c, "linear_conv_kernel_dim", where);
    m.linear_key_head_dim = GetInt(c, "linear_key_head_dim", where);
    m.linear_value_head_dim = GetInt(c, "linear_value_head_dim", where);
    m.linear_num_key_heads = GetInt(c, "linear_num_key_heads", where);
    m.linear_num_value_heads = GetInt(c, "linear_num_value_heads", where);
    if (m.linear_num_key_heads <= 0 || m.linear_num_value_heads % m.linear_num_key_heads != 0)
      Fail(ErrorKind::kCorrupt, "{}: linear_num_value_heads must be a positive multiple of linear_num_key_heads", where);
  }

  m.num_experts = GetInt(c, "num_experts", GetInt(c, "num_local_experts", 0, where), where);
  m.num_experts_per_tok = GetInt(c, "num_experts_per_tok", 0, where);
  m.moe_intermediate_size = GetInt(c, "moe_intermediate_size", 0, where);
  m.shared_expert_intermediate_size = hybrid ? GetInt(c, "shared_expert_intermediate_size", 0, where) : 0;
  m.norm_topk_prob = GetBool(c, "norm_topk_prob", true, where);
  m.decoder_sparse_step = GetInt(c, "decoder_sparse_step", 1, where);
  m.intermediate_size = GetInt(c, "intermediate_size", 0, where);
  if (const json* mo = Lookup(c, "mlp_only_layers")) {
    if (!mo->is_array()) Fail(ErrorKind::kCorrupt, "{}: mlp_only_layers must be a list", where);
    for (const auto& e : *mo) {
      if (!e.is_number_integer()) Fail(ErrorKind::kCorrupt, "{}: mlp_only_layers must hold integers", where);
      m.mlp_only_layers.push_back(e.get<int64_t>());
    }
  }

  // Token ids: eos from both configs (generation_config may list several).
  AddTokenIds(Lookup(c, "eos_token_id"), &m.eos_token_ids, where, "eos_token_id");
  if (!Lookup(c, "eos_token_id")) AddTokenIds(Lookup(dir.config, "eos_token_id"), &m.eos_token_ids, where, "eos_token_id");
  AddTokenIds(Lookup(dir.generation_config, "eos_token_id"), &m.eos_token_ids,
              JoinPath(dir.dir, "generation_config.json"), "eos_token_id");
  std::sort(m.eos_token_ids.begin(), m.eos_token_ids.end());
  m.eos_token_ids.erase(std::unique(m.eos_token_ids.begin(), m.eos_token_ids.end()), m.eos_token_ids.end());
  m.bos_token_id = GetInt(c, "bos_token_id", -1, where);
  m.mask_token_id = GetInt(c, "mask_token_id", GetInt(dir.config, "mask_token_id", -1, where), where);
  if (m.mask_token_id < 0)
    m.mask_token_id = GetInt(dir.generation_config, "mask_token_id", -1, JoinPath(dir.dir, "generation_config.json"));
  m.block_size = GetInt(c, "block_size", GetInt(dir.config, "block_size", 0, where), where);

  // Consistency checks that would otherwise surface as out-of-bounds reads.
  RequirePositive(m.vocab_size, "vocab_size", where);
  RequirePositive(m.hidden_size, "hidden_size", where);
  RequirePositive(m.num_layers, "num_hidden_layers", where);
  RequirePositive(m.num_kv_heads, "num_key_value_heads", where);
  RequirePositive(m.head_dim, "head_dim", where);
  if (m.num_heads % m.num_kv_heads != 0)
    Fail(ErrorKind::kCorrupt, "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
         where, m.num_heads, m.num_kv_heads);
  if (m.num_experts > 0) {
    RequirePositive(m.num_experts_per_tok, "num_experts_per_tok", where);
    RequirePositive(m.moe_intermediate_size, "moe_intermediate_size", where);
    if (m.num_experts_per_tok > m.num_experts)
      Fail(ErrorKind::kCorrupt, "{}: num_experts_per_tok ({}) exceeds num_experts ({})", where,
           m.num_experts_per_tok, m.num_experts);
  }
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (!m.IsMoeLayer(l) && m.intermediate_size <= 0)
      Fail(ErrorKind::kCorrupt, "{}: layer {} is dense but intermediate_size is not set", where, l);
  return m;
}

}  // namespace tessera
