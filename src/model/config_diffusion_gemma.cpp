// tessera model: DiffusionGemma's config.json (model_type diffusion_gemma, the Gemma 4 MoE text model
// under text_config) into ModelConfig. The semantics are docs/DIFFUSION_GEMMA.md's (sections 2-3):
// sliding and global attention layers with their own head dims, KV heads and RoPE (default for
// sliding, "proportional" for global), V taken from K on global layers, a dense MLP beside the
// experts in every layer, gelu-tanh, sqrt(hidden) embedding scale, a tanh logit soft-cap. Missing
// optional keys take transformers' class defaults, as transformers itself does when loading.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"
#include "model/config_json.h"
#include "model/model_config.h"

namespace tessera {

namespace {

using json = nlohmann::json;
using namespace config_json;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";

struct LayerOverride {
  int64_t head_dim = 0, num_kv_heads = 0;  // 0: not overridden
};

// One layer type's RoPE from rope_parameters[type] (absent: transformers' defaults for the type).
RopeSpec ParseRope(const json& c, const char* type, int64_t head_dim, int64_t sliding_head_dim,
                   const std::string& where) {
  const std::string at = where + " rope_parameters." + type;
  const bool full = std::string(type) == kFull;
  json p = full ? json{{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}
                : json{{"rope_type", "default"}, {"rope_theta", 1e4}};
  if (const json* rp = Lookup(c, "rope_parameters")) {
    if (!rp->is_object()) Fail(ErrorKind::kCorrupt, "{}: \"rope_parameters\" must be an object", where);
    if (rp->contains("rope_theta") || rp->contains("rope_type"))  // one set for all layers: not Gemma 4's
      Fail(ErrorKind::kUnsupported, "{}: rope_parameters must be keyed by layer type ({}, {})", where, kSliding,
           kFull);
    if (const json* t = Lookup(*rp, type)) {
      if (!t->is_object()) Fail(ErrorKind::kCorrupt, "{}: must be an object, got {}", at, t->dump());
      p = *t;
    }
  }
  const std::string rope_type = GetString(p, "rope_type", "default", at);
  RopeSpec r;
  r.theta = GetNumber(p, "rope_theta", full ? 1e6 : 1e4, at);
  r.linear_factor = GetNumber(p, "factor", 1.0, at);
  if (!(r.theta > 0) || !(r.linear_factor > 0))
    Fail(ErrorKind::kCorrupt, "{}: rope_theta and factor must be positive", at);
  if (rope_type == "proportional") {
    // Rotated frequencies over the whole head dim, the rest zero (transformers' proportional RoPE).
    const double frac = GetNumber(p, "partial_rotary_factor", 1.0, at);
    if (!(frac > 0 && frac <= 1)) Fail(ErrorKind::kCorrupt, "{}: partial_rotary_factor must be in (0, 1]", at);
    r.rotated_pairs = static_cast<int64_t>(std::floor(frac * static_cast<double>(head_dim) / 2.0));
    r.pair_offset = head_dim / 2;
    r.freq_dim = head_dim;
  } else if (rope_type == "default") {
    // transformers' DiffusionGemma default RoPE spans config.head_dim (the sliding one) and ignores
    // partial_rotary_factor; on a layer of another head dim its tables do not fit the heads.
    if (head_dim != sliding_head_dim)
      Fail(ErrorKind::kUnsupported, "{}: rope_type \"default\" on a layer of head dim {} (head_dim is {})", at,
           head_dim, sliding_head_dim);
    if (r.linear_factor != 1.0) Fail(ErrorKind::kUnsupported, "{}: \"factor\" needs rope_type proportional", at);
    r.rotated_pairs = r.pair_offset = head_dim / 2;
    r.freq_dim = head_dim;
  } else {
    Fail(ErrorKind::kUnsupported, "{}: rope_type \"{}\" is not supported (default, proportional)", at, rope_type);
  }
  return r;
}

// per_layer_config {"<layer>": {"head_dim": d, "num_key_value_heads": k}}, as later transformers
// versions write the global layers' shapes instead of global_head_dim / num_global_key_value_heads.
std::map<int64_t, LayerOverride> ParsePerLayer(const json& c, int64_t num_layers, const std::string& where) {
  std::map<int64_t, LayerOverride> out;
  const json* plc = Lookup(c, "per_layer_config");
  if (!plc) return out;
  if (!plc->is_object()) Fail(ErrorKind::kCorrupt, "{}: \"per_layer_config\" must be an object", where);
  for (const auto& [k, v] : plc->items()) {
    const std::string at = where + " per_layer_config." + k;
    size_t used = 0;
    int64_t layer = -1;
    try {
      layer = std::stoll(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != k.size() || layer < 0 || layer >= num_layers)
      Fail(ErrorKind::kCorrupt, "{}: the key must be a layer index below {}", at, num_layers);
    if (!v.is_object()) Fail(ErrorKind::kCorrupt, "{}: must be an object, got {}", at, v.dump());
    out[layer] = {GetInt(v, "head_dim", 0, at), GetInt(v, "num_key_value_heads", 0, at)};
  }
  return out;
}

}  // namespace

void ParseDiffusionGemmaConfig(const HfModelDir& dir, const std::string& where, ModelConfig* out) {
  ModelConfig& m = *out;
  // text_config merged over the top level; the keys that only the top level means are read there.
  const json& c = dir.text_config;
  const json& top = dir.config;
  m.nested_language_model = false;  // weight names are this family's own (model.decoder.* ...)
  m.norm_style = RmsNormStyle::kScale;
  m.attn_output_gate = false;

  if (const std::string b = GetString(c, "use_bidirectional_attention", "", where); b == "all")
    Fail(ErrorKind::kUnsupported,
         "{}: use_bidirectional_attention \"all\" (a non-causal encoder, halved window) is not supported", where);
  else if (!b.empty() && b != "vision")
    Fail(ErrorKind::kCorrupt, "{}: use_bidirectional_attention must be \"vision\" or \"all\", got \"{}\"", where, b);
  if (const std::string act = GetString(c, "hidden_activation", "gelu_pytorch_tanh", where);
      act == "gelu_pytorch_tanh" || act == "gelu_tanh")
    m.hidden_act = Activation::kGeluTanh;
  else
    Fail(ErrorKind::kUnsupported, "{}: hidden_activation \"{}\" is not supported (gelu_pytorch_tanh)", where, act);

  m.vocab_size = GetInt(c, "vocab_size", where);
  m.hidden_size = GetInt(c, "hidden_size", where);
  m.num_layers = GetInt(c, "num_hidden_layers", where);
  m.num_heads = GetInt(c, "num_attention_heads", where);
  m.num_kv_heads = GetInt(c, "num_key_value_heads", 4, where);
  m.head_dim = GetInt(c, "head_dim", 256, where);
  m.rms_norm_eps = GetNumber(c, "rms_norm_eps", 1e-6, where);
  m.max_position_embeddings = GetInt(c, "max_position_embeddings", 131072, where);
  // transformers ties (lm_head and the encoder / decoder stacks) by the top level's key, default true.
  m.tie_word_embeddings = GetBool(top, "tie_word_embeddings", true, where);
  m.intermediate_size = GetInt(c, "intermediate_size", 9216, where);
  m.num_experts = GetInt(c, "num_experts", where);
  m.num_experts_per_tok = GetInt(c, "top_k_experts", where);
  m.moe_intermediate_size = GetInt(c, "moe_intermediate_size", where);
  m.norm_topk_prob = true;  // the router always renormalises its top-k
  m.decoder_sparse_step = 1;
  m.shared_expert_intermediate_size = 0;  // the dense MLP beside the experts is intermediate_size
  m.final_logit_softcap = GetNumber(c, "final_logit_softcapping", 30.0, where);
  m.canvas_length = GetInt(top, "canvas_length", 256, where);

  RequirePositive(m.vocab_size, "vocab_size", where);
  RequirePositive(m.hidden_size, "hidden_size", where);
  RequirePositive(m.num_layers, "num_hidden_layers", where);
  RequirePositive(m.num_heads, "num_attention_heads", where);
  RequirePositive(m.num_kv_heads, "num_key_value_heads", where);
  RequirePositive(m.head_dim, "head_dim", where);
  RequirePositive(m.intermediate_size, "intermediate_size", where);
  RequirePositive(m.num_experts, "num_experts", where);
  RequirePositive(m.num_experts_per_tok, "top_k_experts", where);
  RequirePositive(m.moe_intermediate_size, "moe_intermediate_size", where);
  RequirePositive(m.canvas_length, "canvas_length", where);
  if (m.num_experts_per_tok > m.num_experts)
    Fail(ErrorKind::kCorrupt, "{}: top_k_experts ({}) exceeds num_experts ({})", where, m.num_experts_per_tok,
         m.num_experts);
  if (!(m.final_logit_softcap > 0))
    Fail(ErrorKind::kCorrupt, "{}: final_logit_softcapping must be positive", where);
  // The scale as a real number; a bf16 model rounds it to bf16 first (docs/DIFFUSION_GEMMA.md 3.5).
  m.embedding_multiplier = std::sqrt(static_cast<double>(m.hidden_size));

  // Layer types: explicit, else 5 sliding then 1 global; the last layer is always global.
  std::vector<bool> sliding(m.num_layers);
  if (const json* lt = Lookup(c, "layer_types")) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != m.num_layers)
      Fail(ErrorKind::kCorrupt, "{}: layer_types must list {} entries", where, m.num_layers);
    for (int64_t i = 0; i < m.num_layers; ++i) {
      const json& e = (*lt)[i];
      if (e == kSliding) sliding[i] = true;
      else if (e == kFull) sliding[i] = false;
      else Fail(ErrorKind::kCorrupt, "{}: layer_types[{}] = {} is not a known layer type", where, i, e.dump());
    }
  } else {
    for (int64_t i = 0; i < m.num_layers; ++i) sliding[i] = (i + 1) % 6 != 0;
  }
  sliding[m.num_layers - 1] = false;  // as transformers forces it

  const int64_t window = GetInt(c, "sliding_window", 512, where);
  RequirePositive(window, "sliding_window", where);
  const std::map<int64_t, LayerOverride> per_layer = ParsePerLayer(c, m.num_layers, where);
  const int64_t global_head_dim = GetInt(c, "global_head_dim", 512, where);
  const int64_t global_kv = GetInt(c, "num_global_key_value_heads", m.num_kv_heads, where);
  const RopeSpec sliding_rope = ParseRope(c, kSliding, m.head_dim, m.head_dim, where);
  m.layer_kinds.assign(m.num_layers, LayerKind::kFullAttention);  // every layer is softmax attention
  m.attention_layers.clear();
  for (int64_t i = 0; i < m.num_layers; ++i) {
    AttentionLayerSpec a;
    if (sliding[i]) {
      a.sliding_window = window;
      a.head_dim = m.head_dim;
      a.num_kv_heads = m.num_kv_heads;
      a.rope = sliding_rope;
    } else {
      auto it = per_layer.find(i);
      a.head_dim = it != per_layer.end() && it->second.head_dim > 0 ? it->second.head_dim : global_head_dim;
      a.num_kv_heads = it != per_layer.end() && it->second.num_kv_heads > 0 ? it->second.num_kv_heads : global_kv;
      a.value_from_key = true;
      a.rope = ParseRope(c, kFull, a.head_dim, m.head_dim, where);
    }
    const std::string at = fmt::format("{}: layer {} ({})", where, i, sliding[i] ? kSliding : kFull);
    if (a.head_dim <= 0 || a.head_dim % 2 != 0)
      Fail(ErrorKind::kCorrupt, "{}: head dim {} must be positive and even", at, a.head_dim);
    if (a.num_kv_heads <= 0 || m.num_heads % a.num_kv_heads != 0)
      Fail(ErrorKind::kCorrupt, "{}: num_attention_heads ({}) must be a multiple of its KV heads ({})", at,
           m.num_heads, a.num_kv_heads);
    m.attention_layers.push_back(a);
  }
  // The generic fields describe the sliding layers (the majority), for code that reads only them.
  m.rope_theta = sliding_rope.theta;
  m.partial_rotary_factor = 1.0;
  m.rotary_dim = m.head_dim;

  // eos: the top level's list (the -it converter writes [1, 106]), the text config's, and
  // generation_config.json's ([1, 106, 50]).
  AddTokenIds(Lookup(top, "eos_token_id"), &m.eos_token_ids, where, "eos_token_id");
  if (const json* tc = Lookup(top, "text_config"); tc && tc->is_object())
    AddTokenIds(Lookup(*tc, "eos_token_id"), &m.eos_token_ids, where, "text_config.eos_token_id");
  AddTokenIds(Lookup(dir.generation_config, "eos_token_id"), &m.eos_token_ids,
              JoinPath(dir.dir, "generation_config.json"), "eos_token_id");
  std::sort(m.eos_token_ids.begin(), m.eos_token_ids.end());
  m.eos_token_ids.erase(std::unique(m.eos_token_ids.begin(), m.eos_token_ids.end()), m.eos_token_ids.end());
  m.bos_token_id = GetInt(c, "bos_token_id", 2, where);
  m.mask_token_id = -1;  // uniform-state diffusion has no mask token
  m.diffusion = false;
  m.block_size = 0;
}

}  // namespace tessera
