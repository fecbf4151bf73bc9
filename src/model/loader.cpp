// tessera model: checkpoint loading and accounting (see loader.h). What a family reads is its
// ArchBody's (model/arch: tensors, load); the expected-tensor list is in expected_tensors.cpp.
#include "model/loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include <unistd.h>

#include "core/error.h"
#include "io/hf_config.h"
#include "model/arch/arch.h"

namespace tessera {

namespace {

// Groups a checkpoint may carry that a text-only forward never reads.
const char* const kKnownUnusedPrefixes[] = {"model.visual.", "visual.", "mtp.", "model.mtp.",
                                            "model.language_model.mtp.",
                                            // DiffusionGemma's Gemma 4 vision tower (text only here)
                                            "model.encoder.vision_tower.", "model.encoder.embed_vision."};

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

}  // namespace

WeightLoader::WeightLoader(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
                           std::function<void(const std::string&)> log, const LoadTarget& target)
    : cfg_(cfg), dir_(dir), out_(out), log_(std::move(log)), be_(target.be), dummy_(target.dummy),
      // The \r-updated line is for a person at a terminal; in a log or a pipe it is one long line of
      // noise before whatever comes next (a load that fails: its one error line).
      progress_(target.progress && isatty(fileno(stderr))) {
  if (target.shard) {
    shard_ = target.shard;
  } else {
    whole_ = PlanShards(cfg_, 1)[0];
  }
  if (shard_->sharded() && (cfg_.quant.quantized() || cfg_.load_quant != QuantKind::kNone))
    Fail(ErrorKind::kUnsupported, "tensor parallelism with quantized weights ({}) is not supported yet",
         cfg_.WeightFormat());
  if (dummy_) {
    if (!be_) Fail(ErrorKind::kInvalidArgument, "dummy weights need a backend");
    prefix_ = "model.";
    for (const ExpectedTensor& t : ExpectedTensors(cfg_)) {
      expected_.insert(t.name);
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const bool matrix = t.shape.size() >= 2 && t.shape[1] != 1;
      if (matrix && WeightKind() != QuantKind::kNone && QuantizeAtLoad(t.name))
        total_bytes_ += static_cast<size_t>(t.shape[0] * QuantRowBytes(WeightKind(), n / t.shape[0]));
      else
        total_bytes_ += static_cast<size_t>(n) * (matrix ? 2 : 4);
    }
    total_bytes_ /= shard_->size;  // about a rank's share
    return;
  }
  out_->reader = target.reader ? target.reader : std::make_shared<CheckpointReader>(dir);
  if (OnDevice()) {
    for (const std::string& name : out_->reader->Names()) {
      const TensorView* v = out_->reader->Find(name);
      total_bytes_ += IsFloat(v->dtype) ? static_cast<size_t>(v->numel()) * 2 : v->nbytes;
    }
    total_bytes_ /= shard_->size;
  }
  // Nested Qwen3.5 checkpoints keep the text model under model.language_model.
  prefix_ = out_->reader->Find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  if (cfg_.quant.quantized()) {
    if (cfg_.load_quant != QuantKind::kNone)
      Fail(ErrorKind::kInvalidArgument, "checkpoint {} is already quantized ({}): drop --quantization", dir_,
           cfg_.quant.Describe());
    quant_ = std::make_unique<QuantizedLinearReader>(cfg_.quant, *out_->reader);
  }
}

QuantKind WeightLoader::WeightKind() const {
  if (cfg_.load_quant != QuantKind::kNone) return cfg_.load_quant;
  if (cfg_.quant.quantized()) return cfg_.quant.schemes.at(0).kind;
  return QuantKind::kNone;
}

bool WeightLoader::QuantizeAtLoad(const std::string& flat) const {
  if (cfg_.load_quant == QuantKind::kNone && !(dummy_ && cfg_.quant.quantized())) return false;
  auto ends = [&](const char* suffix) {
    const std::string x(suffix);
    return flat.size() >= x.size() && flat.compare(flat.size() - x.size(), x.size(), x) == 0;
  };
  // The embedding and lm_head (one row read per token, or the logits' precision), the routers and the
  // shared-expert gates (a few rows whose rounding moves every expert choice) stay float.
  return flat.find("embed_tokens") == std::string::npos && flat.rfind("lm_head", 0) != 0 &&
         !ends("mlp.gate.weight") && !ends("router.proj.weight") &&  // Qwen's router, Gemma's
         !ends("shared_expert_gate.weight");
}

std::string WeightLoader::QuantizedModule(const std::string& flat) const {
  static const std::string kSuffix = ".weight";
  if (!quant_ || flat.size() <= kSuffix.size() || flat.compare(flat.size() - kSuffix.size(), kSuffix.size(), kSuffix))
    return "";
  const std::string module = CheckpointName(flat.substr(0, flat.size() - kSuffix.size()));
  return quant_->IsQuantized(module) ? module : "";
}

QuantizedMatrix WeightLoader::ReadQuantized(const std::string& module, int64_t n, int64_t k) {
  std::vector<std::string> used;
  QuantizedMatrix q = quant_->Read(module, n, k, &used);
  consumed_.insert(used.begin(), used.end());
  return q;
}

Tensor WeightLoader::PlaceQuantized(QuantizedMatrix&& q) {
  Tensor t;
  t.shape = {q.n, q.k};
  t.quant = q.meta;
  t.dtype = q.meta.kind == QuantKind::kFp8 ? DType::kF8E4M3 : q.meta.kind == QuantKind::kInt8 ? DType::kI8 : DType::kU8;
  const size_t code_bytes = static_cast<size_t>(q.n * q.row_bytes());
  if (OnDevice()) {
    auto upload = [&](const void* src, size_t bytes) {
      void* dst = out_->device.Alloc(*be_, bytes);
      be_->Upload(dst, src, bytes);
      return dst;
    };
    t.data = upload(q.code_data(), code_bytes);
    t.quant.scales = static_cast<const float*>(upload(q.scales.data(), q.scales.size() * 4));
    if (!q.zeros.empty()) t.quant.zeros = static_cast<const float*>(upload(q.zeros.data(), q.zeros.size() * 4));
    if (!q.perm.empty()) t.quant.perm = static_cast<const int32_t*>(upload(q.perm.data(), q.perm.size() * 4));
  } else {
    if (q.codes_in_place) {
      t.data = q.codes_in_place;
    } else {
      t.data = out_->owned_bytes.emplace_back(std::move(q.codes)).data();
    }
    t.quant.scales = out_->owned_f32.emplace_back(std::move(q.scales)).data();
    if (!q.zeros.empty()) t.quant.zeros = out_->owned_f32.emplace_back(std::move(q.zeros)).data();
    if (!q.perm.empty()) t.quant.perm = out_->owned_i32.emplace_back(std::move(q.perm)).data();
  }
  Progress(code_bytes);
  return t;
}

Tensor WeightLoader::MaybeQuantize(const std::string& flat, const Tensor& host) {
  if (!QuantizeAtLoad(flat)) return OnDevice() ? ToDevice(host) : host;
  return PlaceQuantized(QuantizeMatrix(cfg_.load_quant, host.dtype, host.data, host.dim(0), host.dim(1)));
}

Tensor WeightLoader::DummyQuantMatrix(const std::string& flat, int64_t n, int64_t k, QuantKind kind) {
  int64_t group = kind == QuantKind::kInt4 ? std::min<int64_t>(kLoadInt4Group, k) : k;
  ActQuant act = ActQuant::kNone;
  if (cfg_.quant.quantized()) {  // a quantized config.json: its scheme's scale granularity and inputs
    const QuantScheme& s = cfg_.quant.schemes.at(0);
    if (s.strategy == "block") group = std::min(k, s.block_cols);
    if (s.strategy == "group") group = std::min(k, s.group_size);
    act = s.act;  // W8A8: the products round their inputs as the checkpoint's would
  }
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.meta.kind = kind;
  q.meta.group = group;
  q.meta.act = act;
  // A static scheme's input scale is a tensor of the checkpoint; dummy inputs (activations of order 1)
  // get one that keeps |x| <= 8 representable in int8 and fp8.
  if (act == ActQuant::kStatic) q.meta.act_scale = 8.0f / (kind == QuantKind::kFp8 ? 448.f : 127.f);
  q.codes.resize(static_cast<size_t>(n * q.row_bytes()));
  uint64_t state = std::hash<std::string>{}(flat);
  for (size_t i = 0; i < q.codes.size(); i += 8) {  // splitmix64: fast enough for tens of GB
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(q.codes.data() + i, &z, std::min<size_t>(8, q.codes.size() - i));
  }
  float code_max = kind == QuantKind::kInt4 ? 8.f : 128.f;
  if (kind == QuantKind::kFp8) {  // exponents below 8: |code| < 2, never NaN
    for (uint8_t& b : q.codes) b &= 0xbf;
    code_max = 2.f;
  }
  q.scales.assign(static_cast<size_t>(n * q.meta.Groups(k)), 1.0f / std::sqrt(static_cast<float>(k)) / code_max);
  return PlaceQuantized(std::move(q));
}

std::string WeightLoader::CheckpointName(const std::string& flat) const {
  if (prefix_ != "model." && flat.rfind("model.", 0) == 0) return prefix_ + flat.substr(6);
  return flat;
}

bool WeightLoader::Has(const std::string& flat) const {
  if (dummy_) return expected_.count(flat) > 0;
  return out_->reader->Find(CheckpointName(flat)) != nullptr || !QuantizedModule(flat).empty();
}

void WeightLoader::Progress(size_t bytes) {
  done_bytes_ += bytes;
  if (total_bytes_ == 0 || !progress_ || !be_) return;
  const int pct = static_cast<int>(std::min<size_t>(99, done_bytes_ * 100 / total_bytes_));
  if (pct == last_percent_) return;
  last_percent_ = pct;
  std::fprintf(stderr, "\rtessera: %s weights on %s: %.2f / %.2f GB (%d%%)", dummy_ ? "generating" : "loading",
               be_->Name(), done_bytes_ / 1e9, total_bytes_ / 1e9, pct);
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

Tensor WeightLoader::DummyMatrix(const std::string& flat, const std::vector<int64_t>& shape, uint64_t part) {
  if (!expected_.count(flat))
    Fail(ErrorKind::kInternal, "dummy weights: tensor \"{}\" is not in the expected list", flat);
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  if (WeightKind() != QuantKind::kNone && QuantizeAtLoad(flat)) return DummyQuantMatrix(flat, rows, cols, WeightKind());
  Tensor t;
  t.shape = {rows, cols};
  t.dtype = DType::kBF16;
  const int64_t n = t.numel();
  void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n) * 2);
  // Uniform in +-1/sqrt(fan_in): activations keep their scale through the layers.
  be_->FillRandom(dst, DType::kBF16, n, 1.0f / std::sqrt(static_cast<float>(t.shape[1])), 0.0f,
                  std::hash<std::string>{}(flat) + part);
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
  } else if (ends("per_expert_scale")) {
    offset = 1.0f;  // Gemma's routing weights are multiplied by it
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

Tensor WeightLoader::MatrixRows(const TensorView& v, int64_t row0, int64_t rows, int64_t cols,
                                const std::string& flat) {
  if (!flat.empty() && QuantizeAtLoad(flat))
    return PlaceQuantized(QuantizeMatrix(cfg_.load_quant, v.dtype,
                                         v.data + static_cast<size_t>(row0 * cols) * DTypeSize(v.dtype), rows, cols));
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

Tensor WeightLoader::FusedRows(const std::string& flat, const std::vector<int64_t>& shape, int64_t row0,
                               int64_t rows, int64_t cols) {
  if (dummy_) return DummyMatrix(flat, {rows, cols}, static_cast<uint64_t>(row0));
  return MatrixRows(View(flat, shape), row0, rows, cols, flat);
}

Tensor WeightLoader::Matrix(const std::string& flat, const std::vector<int64_t>& shape) {
  if (dummy_) return DummyMatrix(flat, shape);
  if (const std::string m = QuantizedModule(flat); !m.empty())
    return PlaceQuantized(ReadQuantized(m, shape[0], shape.size() > 1 ? shape[1] : 1));
  const TensorView& v = View(flat, shape);
  return MatrixRows(v, 0, shape[0], v.numel() / shape[0], flat);
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
  return StackedRows({{flat, shape, order}});
}

std::vector<int64_t> WeightLoader::RowsOf(const std::vector<IndexRange>& ranges) {
  std::vector<int64_t> rows;
  for (const IndexRange& r : ranges)
    for (int64_t i = r.begin; i < r.end(); ++i) rows.push_back(i);
  return rows;
}

Tensor WeightLoader::StackedFloatRows(const std::vector<StackPart>& parts) {
  TESSERA_CHECK(!parts.empty());
  const int64_t cols = parts[0].shape.at(1);
  int64_t rows = 0;
  for (const StackPart& p : parts) {
    TESSERA_CHECK(p.shape.size() == 2 && p.shape[1] == cols);
    rows += static_cast<int64_t>(p.rows.size());
  }
  Tensor t;
  t.shape = {rows, cols};
  if (dummy_) {  // each part's rows random with its own tensor's seed, as DummyMatrix makes them
    if (WeightKind() != QuantKind::kNone && QuantizeAtLoad(parts[0].flat))
      return DummyQuantMatrix(parts[0].flat, rows, cols, WeightKind());
    t.dtype = DType::kBF16;
    char* dst = static_cast<char*>(out_->device.Alloc(*be_, static_cast<size_t>(rows * cols) * 2));
    for (const StackPart& p : parts) {
      if (!expected_.count(p.flat))
        Fail(ErrorKind::kInternal, "dummy weights: tensor \"{}\" is not in the expected list", p.flat);
      const int64_t n = static_cast<int64_t>(p.rows.size()) * cols;
      be_->FillRandom(dst, DType::kBF16, n, 1.0f / std::sqrt(static_cast<float>(cols)), 0.0f,
                      std::hash<std::string>{}(p.flat));
      Progress(static_cast<size_t>(n) * 2);
      dst += n * 2;
    }
    t.data = dst - rows * cols * 2;
    return t;
  }
  std::vector<const TensorView*> views;
  bool bf16 = true;
  for (const StackPart& p : parts) {
    views.push_back(&View(p.flat, p.shape));
    bf16 = bf16 && views.back()->dtype == DType::kBF16;
    for (int64_t r : p.rows) TESSERA_CHECK(r >= 0 && r < p.shape[0]);
  }
  int64_t out_row = 0;
  if (bf16) {
    auto& buf = out_->owned_bf16.emplace_back(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < parts.size(); ++i)
      for (int64_t r : parts[i].rows)
        std::memcpy(buf.data() + out_row++ * cols, views[i]->data + r * cols * 2, cols * 2);
    t.dtype = DType::kBF16;
    t.data = buf.data();
  } else {
    auto& buf = out_->owned_f32.emplace_back(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t es = DTypeSize(views[i]->dtype);
      for (int64_t r : parts[i].rows)
        ConvertToF32(views[i]->dtype, views[i]->data + static_cast<size_t>(r * cols) * es,
                     buf.data() + out_row++ * cols, static_cast<size_t>(cols));
    }
    t.dtype = DType::kF32;
    t.data = buf.data();
  }
  if (OnDevice() || QuantizeAtLoad(parts[0].flat)) {  // the host copy only stages the result
    Tensor d = MaybeQuantize(parts[0].flat, t);
    DropStaging(t);
    return d;
  }
  return t;
}

void WeightLoader::DropStaging(const Tensor& t) {
  if (t.dtype == DType::kBF16)
    out_->owned_bf16.pop_back();
  else
    out_->owned_f32.pop_back();
}

std::vector<GdnProjection> WeightLoader::StackedProjections(const std::vector<StackPart>& parts) {
  TESSERA_CHECK(!parts.empty());
  std::vector<GdnProjection> out;
  int64_t column = 0;
  size_t i = 0;
  while (i < parts.size()) {
    // A run of float parts stacks as today; a run of quantized parts of one format stacks its codes.
    const bool quantized = !dummy_ && !QuantizedModule(parts[i].flat).empty();
    size_t j = i;
    std::vector<StackPart> run;
    std::vector<QuantizedMatrix> mats;
    while (j < parts.size() && (!dummy_ && !QuantizedModule(parts[j].flat).empty()) == quantized) {
      if (quantized) {
        QuantizedMatrix q = ReadQuantized(QuantizedModule(parts[j].flat), parts[j].shape.at(0), parts[j].shape.at(1));
        if (!mats.empty() && (q.meta.kind != mats[0].meta.kind || q.meta.group != mats[0].meta.group ||
                              q.meta.act != mats[0].meta.act || !q.perm.empty() || !mats[0].perm.empty()))
          break;  // a different format: the next run (this part is read again there)
        mats.push_back(std::move(q));
      }
      run.push_back(parts[j++]);
    }
    int64_t rows = 0;
    for (const StackPart& p : run) rows += static_cast<int64_t>(p.rows.size());
    bool whole = quantized && run.size() == 1 && rows == mats[0].n;
    for (int64_t r = 0; whole && r < rows; ++r) whole = run[0].rows[r] == r;
    if (quantized && whole) {  // one part, all its rows in order: placed as read (act-order allowed)
      out.push_back({PlaceQuantized(std::move(mats[0])), column});
    } else if (quantized) {
      std::vector<const QuantizedMatrix*> ptrs;
      std::vector<std::vector<int64_t>> sel;
      for (size_t r = 0; r < run.size(); ++r) {
        ptrs.push_back(&mats[r]);
        sel.push_back(run[r].rows);
      }
      out.push_back({PlaceQuantized(StackQuantized(ptrs, sel)), column});
    } else {
      out.push_back({StackedFloatRows(run), column});
    }
    column += rows;
    i = j;
  }
  return out;
}

Tensor WeightLoader::StackedRows(const std::vector<StackPart>& parts) {
  std::vector<GdnProjection> p = StackedProjections(parts);
  if (p.size() != 1)
    Fail(ErrorKind::kUnsupported, "checkpoint {}: {} and the projections fused with it are stored in different formats",
         dir_, parts[0].flat);
  return p[0].w;
}

Tensor WeightLoader::GatherCopy(const TensorView& v, int64_t full_cols, const std::vector<IndexRange>& rows,
                                IndexRange cols, int64_t zero_rows) {
  int64_t n_rows = zero_rows;
  for (const IndexRange& r : rows) n_rows += r.count;
  Tensor t;
  t.shape = {n_rows, cols.count};
  const size_t es = DTypeSize(v.dtype);
  const size_t n = static_cast<size_t>(n_rows * cols.count);
  int64_t out_row = 0;
  if (v.dtype == DType::kBF16) {
    auto& buf = out_->owned_bf16.emplace_back(n, uint16_t{0});
    for (const IndexRange& r : rows)
      for (int64_t i = r.begin; i < r.end(); ++i, ++out_row)
        std::memcpy(buf.data() + out_row * cols.count, v.data + static_cast<size_t>(i * full_cols + cols.begin) * es,
                    static_cast<size_t>(cols.count) * es);
    t.dtype = DType::kBF16;
    t.data = buf.data();
  } else {
    auto& buf = out_->owned_f32.emplace_back(n, 0.0f);
    for (const IndexRange& r : rows)
      for (int64_t i = r.begin; i < r.end(); ++i, ++out_row)
        ConvertToF32(v.dtype, v.data + static_cast<size_t>(i * full_cols + cols.begin) * es,
                     buf.data() + out_row * cols.count, static_cast<size_t>(cols.count));
    t.dtype = DType::kF32;
    t.data = buf.data();
  }
  if (OnDevice()) {  // the host copy only stages the slice
    Tensor d = ToDevice(t);
    DropStaging(t);
    return d;
  }
  return t;
}

Tensor WeightLoader::MatrixSlice(const std::string& flat, const std::vector<int64_t>& shape,
                                 const std::vector<IndexRange>& rows, IndexRange cols) {
  std::vector<IndexRange> merged;  // adjacent row blocks joined
  for (const IndexRange& r : rows) {
    if (r.count == 0) continue;
    if (!merged.empty() && merged.back().end() == r.begin)
      merged.back().count += r.count;
    else
      merged.push_back(r);
  }
  int64_t n_rows = 0;
  for (const IndexRange& r : merged) n_rows += r.count;
  if (dummy_) return DummyMatrix(flat, {n_rows, cols.count});
  if (merged.size() == 1 && merged[0].begin == 0 && merged[0].count == shape[0] && cols.begin == 0 &&
      cols.count == (shape.size() > 1 ? shape[1] : 1))
    return Matrix(flat, shape);
  const TensorView& v = View(flat, shape);
  const int64_t full_cols = v.numel() / shape[0];
  TESSERA_CHECK(cols.begin >= 0 && cols.end() <= full_cols);
  for (const IndexRange& r : merged) TESSERA_CHECK(r.begin >= 0 && r.end() <= shape[0]);
  if (merged.size() == 1 && cols.begin == 0 && cols.count == full_cols)
    return MatrixRows(v, merged[0].begin, merged[0].count, full_cols);
  return GatherCopy(v, full_cols, merged, cols, 0);
}

const float* WeightLoader::VectorRows(const std::string& flat, const std::vector<int64_t>& shape,
                                      const std::vector<IndexRange>& rows) {
  int64_t row_len = 1, n_rows = 0;
  for (size_t i = 1; i < shape.size(); ++i) row_len *= shape[i];
  for (const IndexRange& r : rows) n_rows += r.count;
  if (dummy_) return DummyVector(flat, {n_rows, row_len});
  const TensorView& v = View(flat, shape);
  auto& buf = out_->owned_f32.emplace_back(static_cast<size_t>(n_rows * row_len));
  const size_t es = DTypeSize(v.dtype);
  int64_t out_row = 0;
  for (const IndexRange& r : rows) {
    TESSERA_CHECK(r.begin >= 0 && r.end() <= shape[0]);
    ConvertToF32(v.dtype, v.data + static_cast<size_t>(r.begin * row_len) * es, buf.data() + out_row * row_len,
                 static_cast<size_t>(r.count * row_len));
    out_row += r.count;
  }
  if (OnDevice()) {
    const float* d = ToDeviceF32(buf.data(), static_cast<int64_t>(buf.size()));
    out_->owned_f32.pop_back();
    return d;
  }
  return buf.data();
}

Tensor WeightLoader::EmbeddingShard(const std::string& flat, const std::vector<int64_t>& shape, IndexRange rows) {
  const int64_t H = shape[1];
  if (dummy_) {
    if (!expected_.count(flat))
      Fail(ErrorKind::kInternal, "dummy weights: tensor \"{}\" is not in the expected list", flat);
    Tensor t;
    t.shape = {rows.count + 1, H};
    t.dtype = DType::kBF16;
    const int64_t n = rows.count * H;
    void* dst = out_->device.Alloc(*be_, static_cast<size_t>(n + H) * 2);
    be_->FillRandom(dst, DType::kBF16, n, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f,
                    std::hash<std::string>{}(flat) + static_cast<uint64_t>(rows.begin));
    be_->Zero(static_cast<char*>(dst) + n * 2, static_cast<size_t>(H) * 2);
    t.data = dst;
    Progress(static_cast<size_t>(n) * 2);
    return t;
  }
  const TensorView& v = View(flat, shape);
  return GatherCopy(v, H, {rows}, {0, H}, 1);
}

const float* WeightLoader::HostVector(std::vector<float> values) {
  if (OnDevice()) return ToDeviceF32(values.data(), static_cast<int64_t>(values.size()));
  return out_->owned_f32.emplace_back(std::move(values)).data();
}

float WeightLoader::Scalar(const std::string& flat) {
  if (dummy_) return 1.0f;
  const TensorView& v = View(flat, {1});
  float x = 0;
  ConvertToF32(v.dtype, v.data, &x, 1);
  return x;
}

void WeightLoader::Validate(const std::string& flat, const std::vector<int64_t>& shape) {
  if (!dummy_) View(flat, shape);
}

ExpertWeights WeightLoader::ZeroExpert(int64_t inter, int64_t hidden) {
  if (have_zero_expert_) return zero_expert_;
  const size_t n = static_cast<size_t>(inter * hidden);
  Tensor z;
  z.dtype = DType::kBF16;
  z.shape = {inter, hidden};
  if (be_ && be_->IsDevice()) {
    void* p = out_->device.Alloc(*be_, n * 2);
    be_->Zero(p, n * 2);
    z.data = p;
  } else {
    z.data = out_->owned_bf16.emplace_back(n, uint16_t{0}).data();
  }
  // gate, up and down all read the same zeros (down as [hidden, inter]).
  zero_expert_ = {z, z, z};
  zero_expert_.down.shape = {hidden, inter};
  have_zero_expert_ = true;
  return zero_expert_;
}

WeightLoader::~WeightLoader() {
  // A load that failed midway (an exception unwinding through it): end the progress line, so the
  // error printed next stands on a line of its own.
  if (last_percent_ >= 0 && !finished_) {
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

void WeightLoader::Finish() {
  finished_ = true;
  if (last_percent_ >= 0) {  // the progress line ends at 100% with the bytes this rank holds
    std::fprintf(stderr, "\rtessera: %s weights on %s: %.2f / %.2f GB (100%%)\n", dummy_ ? "generating" : "loading",
                 be_->Name(), done_bytes_ / 1e9, done_bytes_ / 1e9);
    std::fflush(stderr);
  }
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

// A SwiGLU block split column- then row-parallel: gate / up rows and down columns `part` of `inter`.
MlpWeights LoadMlp(WeightLoader& L, const std::string& p, int64_t inter, int64_t hidden, IndexRange part) {
  MlpWeights m;
  m.gate = L.MatrixSlice(p + "gate_proj.weight", {inter, hidden}, {part}, {0, hidden});
  m.up = L.MatrixSlice(p + "up_proj.weight", {inter, hidden}, {part}, {0, hidden});
  m.down = L.MatrixSlice(p + "down_proj.weight", {hidden, inter}, {{0, hidden}}, part);
  return m;
}

// Routed experts, expert-parallel: this rank's experts whole, the others checked and replaced by a
// zero expert (RankShard::OwnsExpert).
void LoadExperts(const ModelConfig& c, WeightLoader& L, const std::string& p, MoeWeights* moe) {
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  const RankShard& s = L.shard();
  moe->experts.resize(E);
  // transformers 5 keeps experts fused in memory ([E, 2I, H] gate then up, and [E, H, I]); hub
  // checkpoints store them per expert. Accept both.
  if (!L.Has(p + "experts.0.gate_proj.weight") && L.Has(p + "experts.gate_up_proj")) {
    const std::string gu = p + "experts.gate_up_proj", dn = p + "experts.down_proj";
    const std::vector<int64_t> gu_shape = {E, 2 * I, H}, dn_shape = {E, H, I};
    for (int64_t e = 0; e < E; ++e) {
      if (!s.OwnsExpert(e)) {
        L.Validate(gu, gu_shape);
        L.Validate(dn, dn_shape);
        moe->experts[e] = L.ZeroExpert(I, H);
        continue;
      }
      moe->experts[e].gate = L.FusedRows(gu, gu_shape, e * 2 * I, I, H);
      moe->experts[e].up = L.FusedRows(gu, gu_shape, e * 2 * I + I, I, H);
      moe->experts[e].down = L.FusedRows(dn, dn_shape, e * H, H, I);
    }
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    if (!s.OwnsExpert(e)) {
      L.Validate(x + "gate_proj.weight", {I, H});
      L.Validate(x + "up_proj.weight", {I, H});
      L.Validate(x + "down_proj.weight", {H, I});
      moe->experts[e] = L.ZeroExpert(I, H);
      continue;
    }
    moe->experts[e].gate = L.Matrix(x + "gate_proj.weight", {I, H});
    moe->experts[e].up = L.Matrix(x + "up_proj.weight", {I, H});
    moe->experts[e].down = L.Matrix(x + "down_proj.weight", {H, I});
  }
}

void LoadModelWeights(const ModelConfig& c, const std::string& dir, ModelWeights* out,
                      std::function<void(const std::string&)> log, const LoadTarget& target) {
  WeightLoader L(c, dir, out, std::move(log), target);
  ArchFor(c.family).body->load(c, L, out);  // the family's tensors (model/arch), then the accounting
  L.Finish();
}

}  // namespace tessera
