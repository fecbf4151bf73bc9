// tessera model: checkpoint loading and accounting (see loader.h) and the expected-tensor list.
#include "model/loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "io/hf_config.h"
#include "model/arch/arch.h"

namespace tessera {

namespace {

// Groups a checkpoint may carry that a text-only forward never reads.
const char* const kKnownUnusedPrefixes[] = {"model.visual.", "visual.", "mtp.", "model.mtp.",
                                            "model.language_model.mtp."};

bool KnownUnused(const std::string& name) {
  for (const char* p : kKnownUnusedPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool IsFloat(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

std::string Layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

void AppendLayerTensors(const ModelConfig& c, int64_t i, std::vector<ExpectedTensor>* out) {
  const std::string p = Layer(i);
  const int64_t H = c.hidden_size;
  out->push_back({p + "input_layernorm.weight", {H}});
  out->push_back({p + "post_attention_layernorm.weight", {H}});
  if (c.layer_kinds[i] == LayerKind::kFullAttention) {
    const int64_t q_rows = c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
    out->push_back({p + "self_attn.q_proj.weight", {q_rows, H}});
    out->push_back({p + "self_attn.k_proj.weight", {c.num_kv_heads * c.head_dim, H}});
    out->push_back({p + "self_attn.v_proj.weight", {c.num_kv_heads * c.head_dim, H}});
    out->push_back({p + "self_attn.o_proj.weight", {H, c.num_heads * c.head_dim}});
    out->push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out->push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  } else {
    const std::string g = p + "linear_attn.";
    ArchFor(c.family).gdn_projection_tensors(c, g, out);
    out->push_back({g + "conv1d.weight", {c.LinearConvDim(), 1, c.linear_conv_kernel}});
    out->push_back({g + "A_log", {c.linear_num_value_heads}});
    out->push_back({g + "dt_bias", {c.linear_num_value_heads}});
    out->push_back({g + "norm.weight", {c.linear_value_head_dim}});
    out->push_back({g + "out_proj.weight", {H, c.linear_num_value_heads * c.linear_value_head_dim}});
  }
  if (c.IsMoeLayer(i)) {
    const int64_t I = c.moe_intermediate_size;
    out->push_back({p + "mlp.gate.weight", {c.num_experts, H}});
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      out->push_back({x + "gate_proj.weight", {I, H}});
      out->push_back({x + "up_proj.weight", {I, H}});
      out->push_back({x + "down_proj.weight", {H, I}});
    }
    if (const int64_t S = c.shared_expert_intermediate_size; S > 0) {
      out->push_back({p + "mlp.shared_expert.gate_proj.weight", {S, H}});
      out->push_back({p + "mlp.shared_expert.up_proj.weight", {S, H}});
      out->push_back({p + "mlp.shared_expert.down_proj.weight", {H, S}});
      out->push_back({p + "mlp.shared_expert_gate.weight", {1, H}});
    }
  } else {
    const int64_t I = c.intermediate_size;
    out->push_back({p + "mlp.gate_proj.weight", {I, H}});
    out->push_back({p + "mlp.up_proj.weight", {I, H}});
    out->push_back({p + "mlp.down_proj.weight", {H, I}});
  }
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (int64_t i = 0; i < c.num_layers; ++i) AppendLayerTensors(c, i, &out);
  out.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return out;
}

WeightLoader::WeightLoader(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
                           std::function<void(const std::string&)> log, Backend* be, bool dummy)
    : cfg_(cfg), dir_(dir), out_(out), log_(std::move(log)), be_(be), dummy_(dummy) {
  if (dummy_) {
    if (!be_) Fail(ErrorKind::kInvalidArgument, "dummy weights need a backend");
    prefix_ = "model.";
    for (const ExpectedTensor& t : ExpectedTensors(cfg_)) {
      expected_.insert(t.name);
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      total_bytes_ += static_cast<size_t>(n) * (t.shape.size() >= 2 && t.shape[1] != 1 ? 2 : 4);
    }
    return;
  }
  out_->reader = std::make_unique<CheckpointReader>(dir);
  if (OnDevice())
    for (const std::string& name : out_->reader->Names()) {
      const TensorView* v = out_->reader->Find(name);
      total_bytes_ += static_cast<size_t>(v->numel()) * 2;
    }
  // Nested Qwen3.5 checkpoints keep the text model under model.language_model.
  prefix_ = out_->reader->Find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
}

std::string WeightLoader::CheckpointName(const std::string& flat) const {
  if (prefix_ != "model." && flat.rfind("model.", 0) == 0) return prefix_ + flat.substr(6);
  return flat;
}

bool WeightLoader::Has(const std::string& flat) const {
  if (dummy_) return expected_.count(flat) > 0;
  return out_->reader->Find(CheckpointName(flat)) != nullptr;
}

void WeightLoader::Progress(size_t bytes) {
  done_bytes_ += bytes;
  if (total_bytes_ == 0) return;
  const int pct = static_cast<int>(std::min<size_t>(100, done_bytes_ * 100 / total_bytes_));
  if (pct == last_percent_) return;
  last_percent_ = pct;
  std::fprintf(stderr, "\rtessera: %s weights on %s: %.2f / %.2f GB (%d%%)%s", dummy_ ? "generating" : "loading",
               be_->Name(), done_bytes_ / 1e9, total_bytes_ / 1e9, pct, pct == 100 ? "\n" : "");
  std::fflush(stderr);
}

Tensor WeightLoader::ToDevice(const Tensor& host) {
  const int64_t n = host.numel();
  Tensor t;
  t.shape = host.shape;
  t.dtype = DType::kBF16;
  void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n) * 2);
  if (host.dtype == DType::kBF16) {
    be_->Upload(dst, host.data, static_cast<size_t>(n) * 2);
  } else {
    TESSERA_CHECK(host.dtype == DType::kF32);
    std::vector<uint16_t> tmp(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tmp[i] = F32ToBf16(host.f32()[i]);
    be_->Upload(dst, tmp.data(), tmp.size() * 2);
  }
  t.data = dst;
  Progress(static_cast<size_t>(n) * 2);
  return t;
}

const float* WeightLoader::ToDeviceF32(const float* host, int64_t n) {
  void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n) * 4);
  be_->Upload(dst, host, static_cast<size_t>(n) * 4);
  Progress(static_cast<size_t>(n) * 2);
  return static_cast<const float*>(dst);
}

Tensor WeightLoader::DummyMatrix(const std::string& flat, const std::vector<int64_t>& shape) {
  if (!expected_.count(flat))
    Fail(ErrorKind::kInternal, "dummy weights: tensor \"{}\" is not in the expected list", flat);
  Tensor t;
  t.shape = {shape[0], shape.size() > 1 ? shape[1] : 1};
  t.dtype = DType::kBF16;
  const int64_t n = t.numel();
  void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n) * 2);
  // Uniform in +-1/sqrt(fan_in): activations keep their scale through the layers.
  be_->FillRandom(dst, DType::kBF16, n, 1.0f / std::sqrt(static_cast<float>(t.shape[1])), 0.0f,
                  std::hash<std::string>{}(flat));
  t.data = dst;
  Progress(static_cast<size_t>(n) * 2);
  return t;
}

const float* WeightLoader::DummyVector(const std::string& flat, const std::vector<int64_t>& shape) {
  if (!expected_.count(flat))
    Fail(ErrorKind::kInternal, "dummy weights: tensor \"{}\" is not in the expected list", flat);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return flat.size() >= s.size() && flat.compare(flat.size() - s.size(), s.size(), s) == 0;
  };
  float scale = 0.1f, offset = 0.0f;
  if (ends("linear_attn.norm.weight")) {
    offset = 1.0f;  // the gated norm always multiplies by w
  } else if (ends("norm.weight")) {
    offset = cfg_.norm_style == RmsNormStyle::kOnePlusScale ? 0.0f : 1.0f;
  } else if (ends("A_log") || ends("dt_bias")) {
    scale = 0.5f;
  } else if (ends("conv1d.weight")) {
    scale = 0.3f;
  }
  void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n) * 4);
  be_->FillRandom(dst, DType::kF32, n, scale, offset, std::hash<std::string>{}(flat));
  Progress(static_cast<size_t>(n) * 4);
  return static_cast<const float*>(dst);
}

const TensorView& WeightLoader::View(const std::string& flat, const std::vector<int64_t>& shape) {
  const std::string name = CheckpointName(flat);
  const TensorView* v = out_->reader->Find(name);
  if (!v)
    Fail(ErrorKind::kNotFound, "checkpoint {}: tensor \"{}\" is missing (expected shape {})", dir_, name,
         ShapeStr(shape));
  if (v->shape != shape)
    Fail(ErrorKind::kCorrupt, "checkpoint {}: tensor \"{}\" has shape {}, expected {}", dir_, name,
         ShapeStr(v->shape), ShapeStr(shape));
  if (!IsFloat(v->dtype))
    Fail(ErrorKind::kCorrupt, "checkpoint {}: tensor \"{}\" has dtype {}, expected bf16, f16 or f32", dir_,
         name, DTypeName(v->dtype));
  consumed_.insert(name);
  return *v;
}

Tensor WeightLoader::MatrixRows(const TensorView& v, int64_t row0, int64_t rows, int64_t cols) {
  if (OnDevice() && v.dtype == DType::kBF16) {
    Tensor host;
    host.shape = {rows, cols};
    host.dtype = DType::kBF16;
    host.data = v.data + static_cast<size_t>(row0 * cols) * 2;
    return ToDevice(host);
  }
  Tensor t;
  t.shape = {rows, cols};
  const size_t esize = DTypeSize(v.dtype);
  const uint8_t* src = v.data + static_cast<size_t>(row0 * cols) * esize;
  if (v.dtype == DType::kBF16) {
    t.dtype = DType::kBF16;
    t.data = src;
  } else {
    auto& buf = out_->owned_f32.emplace_back(static_cast<size_t>(rows * cols));
    ConvertToF32(v.dtype, src, buf.data(), buf.size());
    t.dtype = DType::kF32;
    t.data = buf.data();
    if (OnDevice()) {
      Tensor d = ToDevice(t);
      out_->owned_f32.pop_back();  // the host copy is no longer needed
      return d;
    }
  }
  return t;
}

Tensor WeightLoader::Matrix(const std::string& flat, const std::vector<int64_t>& shape) {
  if (dummy_) return DummyMatrix(flat, shape);
  const TensorView& v = View(flat, shape);
  return MatrixRows(v, 0, shape[0], v.numel() / shape[0]);
}

const float* WeightLoader::Vector(const std::string& flat, const std::vector<int64_t>& shape) {
  if (dummy_) return DummyVector(flat, shape);
  const TensorView& v = View(flat, shape);
  auto& buf = out_->owned_f32.emplace_back(static_cast<size_t>(v.numel()));
  ConvertToF32(v.dtype, v.data, buf.data(), buf.size());
  if (OnDevice()) {
    const float* d = ToDeviceF32(buf.data(), v.numel());
    out_->owned_f32.pop_back();
    return d;
  }
  return buf.data();
}

Tensor WeightLoader::PermutedRows(const std::string& flat, const std::vector<int64_t>& shape,
                                  const std::vector<int64_t>& order) {
  if (dummy_) return DummyMatrix(flat, shape);  // a permutation of random rows is random rows
  const TensorView& v = View(flat, shape);
  const int64_t rows = shape[0], cols = shape[1];
  TESSERA_CHECK(static_cast<int64_t>(order.size()) == rows);
  Tensor t;
  t.shape = shape;
  if (v.dtype == DType::kBF16) {
    auto& buf = out_->owned_bf16.emplace_back(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(buf.data() + r * cols, v.data + order[r] * cols * 2, cols * 2);
    t.dtype = DType::kBF16;
    t.data = buf.data();
  } else {
    std::vector<float> all(static_cast<size_t>(rows * cols));
    ConvertToF32(v.dtype, v.data, all.data(), all.size());
    auto& buf = out_->owned_f32.emplace_back(all.size());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(buf.data() + r * cols, all.data() + order[r] * cols, cols * sizeof(float));
    t.dtype = DType::kF32;
    t.data = buf.data();
  }
  if (OnDevice()) {
    Tensor d = ToDevice(t);
    if (t.dtype == DType::kBF16)
      out_->owned_bf16.pop_back();
    else
      out_->owned_f32.pop_back();
    return d;
  }
  return t;
}

void WeightLoader::Finish() {
  if (dummy_) return;
  std::vector<std::string> skipped;
  for (const std::string& name : out_->reader->Names()) {
    if (consumed_.count(name)) continue;
    if (KnownUnused(name)) {
      skipped.push_back(name);
      continue;
    }
    Fail(ErrorKind::kCorrupt, "checkpoint {}: tensor \"{}\" is not used by architecture {} (unknown tensor)",
         dir_, name, FamilyName(cfg_.family));
  }
  if (!skipped.empty()) {
    std::string msg = fmt::format("checkpoint {}: skipped {} known-unused tensors (vision tower / MTP), e.g. {}",
                                  dir_, skipped.size(), skipped.front());
    spdlog::info("{}", msg);
    if (log_) log_(msg);
  }
}

namespace {

MlpWeights LoadMlp(WeightLoader& L, const std::string& p, int64_t inter, int64_t hidden) {
  MlpWeights m;
  m.gate = L.Matrix(p + "gate_proj.weight", {inter, hidden});
  m.up = L.Matrix(p + "up_proj.weight", {inter, hidden});
  m.down = L.Matrix(p + "down_proj.weight", {hidden, inter});
  return m;
}

void LoadExperts(const ModelConfig& c, WeightLoader& L, const std::string& p, MoeWeights* moe) {
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  moe->experts.resize(E);
  // transformers 5 keeps experts fused in memory ([E, 2I, H] gate then up, and [E, H, I]); hub
  // checkpoints store them per expert. Accept both.
  if (!L.Has(p + "experts.0.gate_proj.weight") && L.Has(p + "experts.gate_up_proj")) {
    const TensorView& gu = L.View(p + "experts.gate_up_proj", {E, 2 * I, H});
    const TensorView& dn = L.View(p + "experts.down_proj", {E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      moe->experts[e].gate = L.MatrixRows(gu, e * 2 * I, I, H);
      moe->experts[e].up = L.MatrixRows(gu, e * 2 * I + I, I, H);
      moe->experts[e].down = L.MatrixRows(dn, e * H, H, I);
    }
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    moe->experts[e].gate = L.Matrix(x + "gate_proj.weight", {I, H});
    moe->experts[e].up = L.Matrix(x + "up_proj.weight", {I, H});
    moe->experts[e].down = L.Matrix(x + "down_proj.weight", {H, I});
  }
}

}  // namespace

void LoadModelWeights(const ModelConfig& c, const std::string& dir, ModelWeights* out,
                      std::function<void(const std::string&)> log, Backend* be, bool dummy) {
  WeightLoader L(c, dir, out, std::move(log), be, dummy);
  const int64_t H = c.hidden_size;
  out->embed = L.Matrix("model.embed_tokens.weight", {c.vocab_size, H});
  int64_t n_attn = 0, n_gdn = 0;
  out->layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& lw = out->layers[i];
    const std::string p = Layer(i);
    lw.kind = c.layer_kinds[i];
    lw.input_norm = L.Vector(p + "input_layernorm.weight", {H});
    lw.post_norm = L.Vector(p + "post_attention_layernorm.weight", {H});
    if (lw.kind == LayerKind::kFullAttention) {
      lw.cache_index = n_attn++;
      const std::string a = p + "self_attn.";
      const int64_t q_rows = c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
      lw.attn.q_proj = L.Matrix(a + "q_proj.weight", {q_rows, H});
      lw.attn.k_proj = L.Matrix(a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H});
      lw.attn.v_proj = L.Matrix(a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H});
      lw.attn.o_proj = L.Matrix(a + "o_proj.weight", {H, c.num_heads * c.head_dim});
      lw.attn.q_norm = L.Vector(a + "q_norm.weight", {c.head_dim});
      lw.attn.k_norm = L.Vector(a + "k_norm.weight", {c.head_dim});
    } else {
      lw.cache_index = n_gdn++;
      const std::string g = p + "linear_attn.";
      ArchFor(c.family).load_gdn_projections(c, g, L, &lw.gdn);
      const int64_t vh = c.linear_num_value_heads;
      lw.gdn.conv = L.Vector(g + "conv1d.weight", {c.LinearConvDim(), 1, c.linear_conv_kernel});
      lw.gdn.a_log = L.Vector(g + "A_log", {vh});
      lw.gdn.dt_bias = L.Vector(g + "dt_bias", {vh});
      lw.gdn.norm = L.Vector(g + "norm.weight", {c.linear_value_head_dim});
      lw.gdn.out_proj = L.Matrix(g + "out_proj.weight", {H, vh * c.linear_value_head_dim});
    }
    lw.is_moe = c.IsMoeLayer(i);
    if (lw.is_moe) {
      lw.moe.router = L.Matrix(p + "mlp.gate.weight", {c.num_experts, H});
      LoadExperts(c, L, p + "mlp.", &lw.moe);
      if (const int64_t S = c.shared_expert_intermediate_size; S > 0) {
        lw.moe.has_shared = true;
        lw.moe.shared = LoadMlp(L, p + "mlp.shared_expert.", S, H);
        lw.moe.shared_gate = L.Matrix(p + "mlp.shared_expert_gate.weight", {1, H});
      }
    } else {
      lw.mlp = LoadMlp(L, p + "mlp.", c.intermediate_size, H);
    }
  }
  out->final_norm = L.Vector("model.norm.weight", {H});
  if (c.tie_word_embeddings) {
    out->lm_head = L.Has("lm_head.weight") ? L.Matrix("lm_head.weight", {c.vocab_size, H}) : out->embed;
  } else {
    out->lm_head = L.Matrix("lm_head.weight", {c.vocab_size, H});
  }
  L.Finish();
}

}  // namespace tessera
