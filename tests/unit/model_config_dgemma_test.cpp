// tessera model tests: DiffusionGemma config.json parsing (docs/DIFFUSION_GEMMA.md section 2): the
// published 26B-A4B shape with its per-layer attention (sliding / global head dims, KV heads,
// proportional RoPE), transformers' defaults for missing keys, the per_layer_config form of later
// transformers versions, the refusals, and that the Qwen families are untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/weight_census.h"
#include "test_util.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::DataPath;
using testing::ExpectError;
using testing::ScratchDir;
using testing::WriteFile;

// The text config convert_diffusion_gemma_weights.py writes for google/diffusiongemma-26B-A4B-it.
json PublishedText() {
  json layer_types = json::array();
  for (int r = 0; r < 5; ++r) {
    for (int i = 0; i < 5; ++i) layer_types.push_back("sliding_attention");
    layer_types.push_back("full_attention");
  }
  return json{{"model_type", "diffusion_gemma_text"},
              {"vocab_size", 262144},
              {"hidden_size", 2816},
              {"intermediate_size", 2112},
              {"num_hidden_layers", 30},
              {"layer_types", layer_types},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 8},
              {"num_global_key_value_heads", 2},
              {"head_dim", 256},
              {"global_head_dim", 512},
              {"use_bidirectional_attention", "vision"},
              {"num_experts", 128},
              {"moe_intermediate_size", 704},
              {"top_k_experts", 8},
              {"sliding_window", 1024},
              {"final_logit_softcapping", 30.0},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"max_position_embeddings", 262144},
              {"eos_token_id", 1},
              {"bos_token_id", 2},
              {"pad_token_id", 0},
              {"rope_parameters",
               {{"full_attention", {{"rope_theta", 1000000.0}, {"rope_type", "proportional"},
                                    {"partial_rotary_factor", 0.25}}},
                {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}}}};
}

json Top(const json& text) {
  return json{{"architectures", {"DiffusionGemmaForBlockDiffusion"}},
              {"model_type", "diffusion_gemma"},
              {"canvas_length", 256},
              {"tie_word_embeddings", true},
              {"eos_token_id", {1, 106}},
              {"vision_config", {{"model_type", "gemma4_vision"}, {"hidden_size", 1152}}},
              {"text_config", text}};
}

ModelConfig Parse(const std::string& name, const json& config, const json* generation = nullptr) {
  const std::string dir = ScratchDir("dgemma-config-" + name);
  WriteFile(dir + "/config.json", config.dump());
  if (generation) WriteFile(dir + "/generation_config.json", generation->dump());
  return ModelConfig::FromHf(LoadHfModelDir(dir));
}

TEST(DiffusionGemmaConfig, PublishedShape) {
  const json gen = {{"eos_token_id", {1, 106, 50}}, {"max_denoising_steps", 48}};
  const ModelConfig m = Parse("published", Top(PublishedText()), &gen);
  EXPECT_EQ(m.family, ModelFamily::kDiffusionGemma);
  EXPECT_STREQ(FamilyName(m.family), "diffusion_gemma");
  EXPECT_EQ(m.architecture, "DiffusionGemmaForBlockDiffusion");
  EXPECT_EQ(m.vocab_size, 262144);
  EXPECT_EQ(m.hidden_size, 2816);
  EXPECT_EQ(m.num_layers, 30);
  EXPECT_EQ(m.num_heads, 16);
  EXPECT_EQ(m.intermediate_size, 2112);
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.num_experts_per_tok, 8);
  EXPECT_EQ(m.moe_intermediate_size, 704);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.hidden_act, Activation::kGeluTanh);
  EXPECT_EQ(m.norm_style, RmsNormStyle::kScale);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_FALSE(m.nested_language_model);
  EXPECT_FALSE(m.diffusion);  // not the masked block decoder
  EXPECT_EQ(m.canvas_length, 256);
  EXPECT_DOUBLE_EQ(m.final_logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(m.embedding_multiplier, std::sqrt(2816.0));
  EXPECT_EQ(m.eos_token_ids, (std::vector<int64_t>{1, 50, 106}));
  EXPECT_EQ(m.mask_token_id, -1);
  ASSERT_EQ(m.attention_layers.size(), 30u);
  ASSERT_EQ(m.layer_kinds.size(), 30u);
  for (int64_t i = 0; i < 30; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(m.layer_kinds[i], LayerKind::kFullAttention);  // softmax attention everywhere
    const AttentionLayerSpec& a = m.attention_layers[i];
    if ((i + 1) % 6 != 0) {  // sliding: W 1024, d 256, 8 KV heads, full RoPE theta 1e4
      EXPECT_EQ(a.sliding_window, 1024);
      EXPECT_EQ(a.head_dim, 256);
      EXPECT_EQ(a.num_kv_heads, 8);
      EXPECT_FALSE(a.value_from_key);
      EXPECT_DOUBLE_EQ(a.rope.theta, 1e4);
      EXPECT_EQ(a.rope.rotated_pairs, 128);
      EXPECT_EQ(a.rope.pair_offset, 128);
      EXPECT_EQ(a.rope.freq_dim, 256);
    } else {  // global: d 512, 2 KV heads, V = K, 64 rotated pairs (i, i + 256) at theta^(-2i/512)
      EXPECT_EQ(a.sliding_window, 0);
      EXPECT_EQ(a.head_dim, 512);
      EXPECT_EQ(a.num_kv_heads, 2);
      EXPECT_TRUE(a.value_from_key);
      EXPECT_DOUBLE_EQ(a.rope.theta, 1e6);
      EXPECT_EQ(a.rope.rotated_pairs, 64);
      EXPECT_EQ(a.rope.pair_offset, 256);
      EXPECT_EQ(a.rope.freq_dim, 512);
      EXPECT_DOUBLE_EQ(a.rope.linear_factor, 1.0);
    }
  }
  // The architecture's own tensor list (arch/diffusion_gemma.cpp): the saved layout under
  // model.decoder.*, global layers without v_proj, fused experts, both stacks' layer_scalar.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ExpectedTensor& t : ExpectedTensors(m)) shapes[t.name] = t.shape;
  EXPECT_EQ(shapes.at("model.decoder.embed_tokens.weight"), (std::vector<int64_t>{262144, 2816}));
  EXPECT_EQ(shapes.at("model.decoder.layers.0.self_attn.v_proj.weight"), (std::vector<int64_t>{8 * 256, 2816}));
  EXPECT_EQ(shapes.count("model.decoder.layers.5.self_attn.v_proj.weight"), 0u);
  EXPECT_EQ(shapes.at("model.decoder.layers.5.self_attn.k_proj.weight"), (std::vector<int64_t>{2 * 512, 2816}));
  EXPECT_EQ(shapes.at("model.decoder.layers.5.self_attn.q_proj.weight"), (std::vector<int64_t>{16 * 512, 2816}));
  EXPECT_EQ(shapes.at("model.decoder.layers.3.experts.gate_up_proj"), (std::vector<int64_t>{128, 2 * 704, 2816}));
  EXPECT_EQ(shapes.at("model.encoder.language_model.layers.29.layer_scalar"), (std::vector<int64_t>{1}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied
  // KV per token: 25 sliding layers x 2 x 8 x 256 + 5 global layers x 2 x 2 x 512 f32 values.
  EXPECT_EQ(Model::KvBytesPerToken(m, DType::kF32), (25 * 2 * 8 * 256 + 5 * 2 * 2 * 512) * 4);
  // The tensor list against the model card's counts (25.2B total, 3.8B active): 25.25B and 3.84B (the
  // decoder-only self-conditioning MLP, 18M, counted as active).
  const WeightCensus census = WeightCensus::Of(m);
  EXPECT_NEAR(census.total / 1e9, 25.25, 0.01);
  EXPECT_NEAR(census.ActiveParams() / 1e9, 3.84, 0.01);
  EXPECT_EQ(census.embedding, 262144.0 * 2816);
  EXPECT_EQ(census.moe_layers, 30);
}

TEST(DiffusionGemmaConfig, TransformersDefaultsForMissingKeys) {
  // Only the keys without a usable class default; 8 layers: sliding except 5 (6th) and 7 (forced last).
  const json text = {{"model_type", "diffusion_gemma_text"}, {"vocab_size", 512}, {"hidden_size", 64},
                     {"num_hidden_layers", 8}, {"num_attention_heads", 4}, {"num_experts", 8},
                     {"top_k_experts", 2}, {"moe_intermediate_size", 32}};
  const ModelConfig m = Parse("defaults", {{"model_type", "diffusion_gemma"}, {"text_config", text}});
  ASSERT_EQ(m.attention_layers.size(), 8u);
  for (int64_t i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const bool global = i == 5 || i == 7;
    const AttentionLayerSpec& a = m.attention_layers[i];
    EXPECT_EQ(a.sliding_window, global ? 0 : 512);
    EXPECT_EQ(a.head_dim, global ? 512 : 256);
    EXPECT_EQ(a.num_kv_heads, 4);  // num_global_key_value_heads unset: num_key_value_heads (4)
    EXPECT_EQ(a.value_from_key, global);
    EXPECT_EQ(a.rope.rotated_pairs, global ? 64 : 128);
  }
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.canvas_length, 256);
  EXPECT_EQ(m.intermediate_size, 9216);
  EXPECT_DOUBLE_EQ(m.final_logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(m.embedding_multiplier, 8.0);
  EXPECT_EQ(m.bos_token_id, 2);
}

TEST(DiffusionGemmaConfig, PerLayerConfigAndTinyFixtureShape) {
  // The fixture script's shape A in the per_layer_config form, untied, proportional factor 0.25 of 32.
  json text = {{"model_type", "diffusion_gemma_text"}, {"vocab_size", 512}, {"hidden_size", 64},
               {"intermediate_size", 128}, {"num_hidden_layers", 4},
               {"layer_types", {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}},
               {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
               {"per_layer_config", {{"1", {{"head_dim", 32}, {"num_key_value_heads", 1}}},
                                     {"3", {{"head_dim", 32}, {"num_key_value_heads", 1}}}}},
               {"num_experts", 8}, {"top_k_experts", 2}, {"moe_intermediate_size", 32}, {"sliding_window", 8}};
  json top = Top(text);
  top["tie_word_embeddings"] = false;
  top["canvas_length"] = 16;
  const ModelConfig m = Parse("per-layer", top);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_EQ(m.canvas_length, 16);
  ASSERT_EQ(m.attention_layers.size(), 4u);
  EXPECT_EQ(m.attention_layers[0].sliding_window, 8);
  EXPECT_EQ(m.attention_layers[0].head_dim, 16);
  EXPECT_EQ(m.attention_layers[0].rope.rotated_pairs, 8);
  for (int i : {1, 3}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(m.attention_layers[i].head_dim, 32);
    EXPECT_EQ(m.attention_layers[i].num_kv_heads, 1);
    EXPECT_EQ(m.attention_layers[i].rope.rotated_pairs, 4);  // floor(0.25 * 32 / 2)
    EXPECT_EQ(m.attention_layers[i].rope.pair_offset, 16);
    EXPECT_EQ(m.attention_layers[i].rope.freq_dim, 32);
  }
}

TEST(DiffusionGemmaConfig, Refusals) {
  auto with = [](const char* key, const json& value) {
    json t = PublishedText();
    t[key] = value;
    return Top(t);
  };
  auto parse = [](const json& c) { return [c] { Parse("refusal", c); }; };
  ExpectError(parse(with("use_bidirectional_attention", "all")), ErrorKind::kUnsupported,
              {"config.json", "use_bidirectional_attention"});
  ExpectError(parse(with("hidden_activation", "silu")), ErrorKind::kUnsupported, {"hidden_activation", "silu"});
  ExpectError(parse(with("top_k_experts", 200)), ErrorKind::kCorrupt, {"top_k_experts", "num_experts"});
  ExpectError(parse(with("sliding_window", 0)), ErrorKind::kCorrupt, {"sliding_window", "must be positive"});
  ExpectError(parse(with("moe_intermediate_size", -4)), ErrorKind::kCorrupt,
              {"moe_intermediate_size", "must be positive, got -4"});
  ExpectError(parse(with("num_global_key_value_heads", 3)), ErrorKind::kCorrupt, {"layer 5", "KV heads"});
  ExpectError(parse(with("layer_types", json::array({"sliding_attention"}))), ErrorKind::kCorrupt,
              {"layer_types", "30"});
  ExpectError(parse(with("layer_types", json(std::vector<std::string>(30, "linear_attention")))),
              ErrorKind::kCorrupt, {"layer_types[0]"});
  ExpectError(parse(with("rope_parameters", {{"full_attention", {{"rope_type", "yarn"}}}})), ErrorKind::kUnsupported,
              {"rope_parameters.full_attention", "yarn"});
  ExpectError(parse(with("rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}})),
              ErrorKind::kUnsupported, {"keyed by layer type"});
  ExpectError(parse(with("per_layer_config", {{"x", {{"head_dim", 64}}}})), ErrorKind::kCorrupt,
              {"per_layer_config.x", "layer index"});
  json no_experts = PublishedText();
  no_experts.erase("num_experts");
  ExpectError(parse(Top(no_experts)), ErrorKind::kCorrupt, {"num_experts"});
}

TEST(DiffusionGemmaConfig, QwenFamiliesHaveNoPerLayerShapes) {
  for (const char* fam : {"qwen3_moe", "qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(fam);
    const ModelConfig m = ModelConfig::FromHf(LoadHfModelDir(DataPath(std::string("fixtures/models/") + fam)));
    EXPECT_TRUE(m.attention_layers.empty());
    EXPECT_EQ(m.hidden_act, Activation::kSilu);
    EXPECT_DOUBLE_EQ(m.embedding_multiplier, 1.0);
    EXPECT_DOUBLE_EQ(m.final_logit_softcap, 0.0);
    EXPECT_EQ(m.canvas_length, 0);
  }
}

}  // namespace
}  // namespace tessera
