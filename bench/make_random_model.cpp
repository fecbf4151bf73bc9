// tessera bench tool: writes a checkpoint directory with random bf16 weights for a chosen
// qwen3_moe or qwen3_5_moe configuration (config.json, generation_config.json, safetensors, sharded
// with model.safetensors.index.json on request), so benchmarks can run a mid-size or full-size
// model that cannot be downloaded here. The tensor list is the loader's own ExpectedTensors() of the
// config as parsed back from the written config.json, so the checkpoint always loads.
//
// Values follow the scale of Hugging Face initialisation: projections ~ N(0, initializer_range),
// norms near 1 (near 0 for the (1 + w) norms of the hybrid family), A_log = log(U(1, 16)),
// dt_bias near 1, conv1d ~ U(-1/sqrt(K), 1/sqrt(K)). Nothing is all zeros. The normal draws use an
// Irwin-Hall sum of four uniforms (mean 0, same variance) from a splitmix64 stream: a few ns per
// value, so a 2-billion-parameter checkpoint takes seconds to generate rather than minutes.
//
// Usage: make_random_model --out DIR [--family qwen3_moe|qwen3_5_moe] [--hidden 1024]
//          [--layers 24] [--experts 64] [--top-k 8] [--moe-inter 384] [--inter 3072]
//          [--vocab 32000] [--heads 16] [--kv-heads 4] [--head-dim 64] [--shared-inter N]
//          [--linear-key-heads 8] [--linear-value-heads 16] [--linear-key-dim 64]
//          [--linear-value-dim 64] [--conv-kernel 4] [--full-attn-interval 4] [--std 0.02]
//          [--seed 1] [--shard-bytes N]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/model_config.h"

namespace {

using namespace tessera;
using json = nlohmann::json;

struct Options {
  std::string out;
  std::string family = "qwen3_moe";
  int64_t hidden = 1024, layers = 24, experts = 64, top_k = 8, moe_inter = 384, inter = 3072;
  int64_t vocab = 32000, heads = 16, kv_heads = 4, head_dim = 64;
  int64_t shared_inter = -1;  // -1: moe_inter (qwen3_5_moe only)
  int64_t linear_key_heads = 8, linear_value_heads = 16, linear_key_dim = 64, linear_value_dim = 64;
  int64_t conv_kernel = 4, full_attn_interval = 4;
  double std = 0.02;
  uint64_t seed = 1;
  size_t shard_bytes = 0;
};

[[noreturn]] void Usage(const std::string& why) {
  fmt::print(stderr,
             "make_random_model: {}\n"
             "usage: make_random_model --out DIR [--family qwen3_moe|qwen3_5_moe] [--hidden N] [--layers N]\n"
             "  [--experts N] [--top-k N] [--moe-inter N] [--inter N] [--vocab N] [--heads N] [--kv-heads N]\n"
             "  [--head-dim N] [--shared-inter N] [--linear-key-heads N] [--linear-value-heads N]\n"
             "  [--linear-key-dim N] [--linear-value-dim N] [--conv-kernel N] [--full-attn-interval N]\n"
             "  [--std X] [--seed N] [--shard-bytes N]\n",
             why);
  std::exit(2);
}

int64_t ParseInt(std::string_view flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0)
    Usage(fmt::format("{} needs a non-negative integer, got \"{}\"", flag, text));
  return v;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  const std::map<std::string_view, int64_t*> ints = {
      {"--hidden", &o.hidden},           {"--layers", &o.layers},
      {"--experts", &o.experts},         {"--top-k", &o.top_k},
      {"--moe-inter", &o.moe_inter},     {"--inter", &o.inter},
      {"--vocab", &o.vocab},             {"--heads", &o.heads},
      {"--kv-heads", &o.kv_heads},       {"--head-dim", &o.head_dim},
      {"--shared-inter", &o.shared_inter}, {"--linear-key-heads", &o.linear_key_heads},
      {"--linear-value-heads", &o.linear_value_heads}, {"--linear-key-dim", &o.linear_key_dim},
      {"--linear-value-dim", &o.linear_value_dim}, {"--conv-kernel", &o.conv_kernel},
      {"--full-attn-interval", &o.full_attn_interval}};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") Usage("help");
    if (i + 1 >= argc) Usage(fmt::format("{} needs a value (or is unknown)", a));
    const char* v = argv[++i];
    if (auto it = ints.find(a); it != ints.end()) {
      *it->second = ParseInt(a, v);
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--family") {
      o.family = v;
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(ParseInt(a, v));
    } else if (a == "--shard-bytes") {
      o.shard_bytes = static_cast<size_t>(ParseInt(a, v));
    } else if (a == "--std") {
      o.std = std::atof(v);
      if (!(o.std > 0)) Usage("--std must be positive");
    } else {
      Usage(fmt::format("unknown option {}", a));
    }
  }
  if (o.out.empty()) Usage("--out DIR is required");
  if (o.family != "qwen3_moe" && o.family != "qwen3_5_moe")
    Usage(fmt::format("--family must be qwen3_moe or qwen3_5_moe, got \"{}\"", o.family));
  if (o.shared_inter < 0) o.shared_inter = o.moe_inter;
  return o;
}

// config.json as transformers 5 writes it for the family (flat text config for qwen3_5_moe).
json MakeConfig(const Options& o) {
  json c;
  const bool hybrid = o.family == "qwen3_5_moe";
  c["architectures"] = {hybrid ? "Qwen3_5MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  c["model_type"] = hybrid ? "qwen3_5_moe_text" : "qwen3_moe";
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  c["pad_token_id"] = nullptr;
  c["dtype"] = "bfloat16";
  c["hidden_act"] = "silu";
  c["hidden_size"] = o.hidden;
  c["initializer_range"] = o.std;
  c["max_position_embeddings"] = 32768;
  c["num_hidden_layers"] = o.layers;
  c["num_attention_heads"] = o.heads;
  c["num_key_value_heads"] = o.kv_heads;
  c["head_dim"] = o.head_dim;
  c["num_experts"] = o.experts;
  c["num_experts_per_tok"] = o.top_k;
  c["moe_intermediate_size"] = o.moe_inter;
  c["norm_topk_prob"] = true;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
  c["rms_norm_eps"] = 1e-6;
  c["tie_word_embeddings"] = false;
  c["use_cache"] = true;
  c["vocab_size"] = o.vocab;
  if (hybrid) {
    json types = json::array();
    for (int64_t i = 0; i < o.layers; ++i)
      types.push_back((i + 1) % o.full_attn_interval == 0 ? "full_attention" : "linear_attention");
    c["layer_types"] = types;
    c["linear_conv_kernel_dim"] = o.conv_kernel;
    c["linear_key_head_dim"] = o.linear_key_dim;
    c["linear_value_head_dim"] = o.linear_value_dim;
    c["linear_num_key_heads"] = o.linear_key_heads;
    c["linear_num_value_heads"] = o.linear_value_heads;
    c["shared_expert_intermediate_size"] = o.shared_inter;
    c["partial_rotary_factor"] = 0.25;
    c["rope_parameters"] = {{"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}, {"rope_type", "default"}};
  } else {
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    c["intermediate_size"] = o.inter;
    c["sliding_window"] = nullptr;
    c["use_sliding_window"] = false;
    c["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  }
  return c;
}

void WriteJson(const std::string& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) Fail(ErrorKind::kInvalidArgument, "cannot write {} (is --out a writable directory?)", path);
}

// splitmix64: a fast, well-mixed 64-bit stream; one draw feeds four 16-bit uniforms.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Approximately N(0, 1): sum of four U(0,1) has mean 2 and variance 1/3.
  float Normal() {
    const uint64_t r = Next();
    const float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
    return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

enum class Init { kNormal, kNearOne, kNearZero, kALog, kConv };

Init InitFor(const std::string& name, const ModelConfig& cfg) {
  auto ends = [&](std::string_view s) { return std::string_view(name).ends_with(s); };
  if (ends("A_log")) return Init::kALog;
  if (ends("dt_bias")) return Init::kNearOne;
  if (ends("conv1d.weight")) return Init::kConv;
  // The gated norm of a GDN layer multiplies by w itself; the other norms of the hybrid family by 1 + w.
  if (ends("linear_attn.norm.weight")) return Init::kNearOne;
  if (ends("norm.weight"))
    return cfg.norm_style == RmsNormStyle::kOnePlusScale ? Init::kNearZero : Init::kNearOne;
  return Init::kNormal;
}

uint64_t NameHash(const std::string& s) {  // FNV-1a: each tensor's stream depends on its name only
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = ParseArgs(argc, argv);
    std::filesystem::create_directories(o.out);
    WriteJson(JoinPath(o.out, "config.json"), MakeConfig(o));
    WriteJson(JoinPath(o.out, "generation_config.json"),
              json{{"bos_token_id", 1}, {"eos_token_id", 2}, {"do_sample", false}});
    // Parse back what was written: a config the loader rejects fails here, before any weights.
    const ModelConfig cfg = ModelConfig::FromHf(LoadHfModelDir(o.out));
    const std::vector<ExpectedTensor> expected = ExpectedTensors(cfg);

    // Remove checkpoint files of an earlier run with another layout (single file vs shards).
    for (const auto& e : std::filesystem::directory_iterator(o.out)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("model", 0) == 0 && (n.ends_with(".safetensors") || n.ends_with(".index.json")))
        std::filesystem::remove(e.path());
    }
    SafetensorsWriter writer(o.out, o.shard_bytes);
    writer.SetMetadata({{"format", "pt"}});
    size_t total = 0;
    for (const ExpectedTensor& t : expected) {
      writer.Add(t.name, DType::kBF16, t.shape);
      total += writer.tensors().back().nbytes();
    }
    fmt::print("{}: {} {} layers, {} tensors, {:.2f} GB of bf16 weights\n", o.out, FamilyName(cfg.family),
               cfg.num_layers, expected.size(), total / 1e9);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint16_t> buf(size_t{1} << 20);
    const std::vector<std::string> files = writer.Write([&](const TensorSpec& spec, const TensorSink& sink) {
      Rng rng{o.seed * 0x2545f4914f6cdd1dull ^ NameHash(spec.name)};
      const Init init = InitFor(spec.name, cfg);
      const float std_dev = static_cast<float>(o.std);
      const float conv_bound = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(cfg.linear_conv_kernel, 1)));
      size_t left = spec.nbytes() / 2;
      while (left > 0) {
        const size_t n = std::min(left, buf.size());
        for (size_t i = 0; i < n; ++i) {
          float v = 0;
          switch (init) {
            case Init::kNormal: v = std_dev * rng.Normal(); break;
            case Init::kNearOne: v = 1.0f + std_dev * rng.Normal(); break;
            case Init::kNearZero: v = std_dev * rng.Normal(); break;
            case Init::kALog: v = std::log(1.0f + 15.0f * rng.Uniform()); break;
            case Init::kConv: v = conv_bound * (2.0f * rng.Uniform() - 1.0f); break;
          }
          buf[i] = F32ToBf16(v);
        }
        sink(buf.data(), n * 2);
        left -= n;
      }
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("wrote {} file(s) in {:.1f} s:", files.size(), secs);
    for (size_t i = 0; i < files.size() && i < 4; ++i) fmt::print(" {}", files[i]);
    if (files.size() > 4) fmt::print(" ... {}", files.back());
    fmt::print("\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "make_random_model: {}\n", e.what());
    return 1;
  }
}
