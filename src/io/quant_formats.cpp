// tessera io: reading the published quantized layouts into the canonical one (see quant_formats.h).
// The layouts, as their producers write them (N = out_features, K = in_features, pf = 32 / bits values
// per int32 word, element 0 in the lowest bits unless said otherwise):
//   FP8 (quant_method fp8):  weight e4m3 [N, K]; weight_scale_inv f32 [ceil(N/bn), ceil(K/bk)] (block)
//                            or a scalar weight_scale_inv / weight_scale (per tensor); w = code * scale.
//   GPTQ:  qweight i32 [K/pf, N] packed along K; qzeros i32 [G, N/pf] packed along N, unsigned, stored
//          minus one in checkpoint_format "gptq" (v1); scales f16 [G, N]; g_idx i32 [K], the group of each
//          input column (act-order permutes it); w[n, k] = scales[g, n] * (q - z), g = g_idx[k].
//   AWQ (GEMM): qweight i32 [K, N/8] packed along N with nibble i holding column 8c + {0,2,4,6,1,3,5,7}[i];
//          qzeros i32 [G, N/8] likewise; scales f16 [G, N]; w = (q - z) * scales.
//   compressed-tensors pack-quantized: weight_packed i32 [N, ceil(K/pf)] packed along K, values stored
//          + 2^(bits-1); weight_shape [2]; weight_scale [N, G] / [N, 1] / [1]; weight_zero_point
//          i32 [ceil(N/pf), G] packed along N (asymmetric only); weight_g_idx i32 [K] (actorder).
//   compressed-tensors float-/int-/naive-quantized: weight e4m3 or i8 [N, K]; weight_scale per tensor,
//          channel, group or block; input_scale [1] for static activations.
#include "io/quant_formats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera {

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void ExpectDType(const TensorView& v, std::initializer_list<DType> allowed) {
  for (DType t : allowed)
    if (v.dtype == t) return;
  std::string names;
  for (DType t : allowed) names += std::string(names.empty() ? "" : " or ") + DTypeName(t);
  Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" has dtype {}, expected {}", v.name, DTypeName(v.dtype), names);
}

void ExpectShape(const TensorView& v, const std::vector<int64_t>& shape) {
  if (v.shape != shape)
    Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" has shape {}, expected {}", v.name, ShapeStr(v.shape),
         ShapeStr(shape));
}

// A scalar stored as [] or [1].
void ExpectScalar(const TensorView& v) {
  if (v.numel() != 1 || v.shape.size() > 1)
    Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" has shape {}, expected a scalar ([] or [1])", v.name,
         ShapeStr(v.shape));
}

std::vector<float> Floats(const TensorView& v) {
  ExpectDType(v, {DType::kF32, DType::kBF16, DType::kF16});
  std::vector<float> out(static_cast<size_t>(v.numel()));
  ConvertToF32(v.dtype, v.data, out.data(), out.size());
  return out;
}

// Integer tensors of any width as int64 (unaligned-safe reads of the mapping).
std::vector<int64_t> Ints(const TensorView& v) {
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (v.dtype) {
      case DType::kI32: { int32_t x; std::memcpy(&x, v.data + i * 4, 4); out[i] = x; break; }
      case DType::kI64: { int64_t x; std::memcpy(&x, v.data + i * 8, 8); out[i] = x; break; }
      case DType::kI8: out[i] = static_cast<int8_t>(v.data[i]); break;
      case DType::kU8: out[i] = v.data[i]; break;
      default:
        Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" has dtype {}, expected an integer type", v.name,
             DTypeName(v.dtype));
    }
  }
  return out;
}

// Word w of an int32 tensor as unsigned bits.
inline uint32_t Word(const TensorView& v, int64_t w) {
  uint32_t x;
  std::memcpy(&x, v.data + w * 4, 4);
  return x;
}

// The column order that makes g_idx's groups contiguous: empty when it already is k / group (no
// permutation), else perm with g_idx[perm[c]] == c / group. Anything else is not a GPTQ grouping.
std::vector<int32_t> GroupPermutation(const std::vector<int64_t>& g_idx, int64_t group, const std::string& name) {
  const int64_t k = static_cast<int64_t>(g_idx.size());
  bool identity = true;
  for (int64_t c = 0; c < k && identity; ++c) identity = g_idx[c] == c / group;
  if (identity) return {};
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
  for (int64_t c = 0; c < k; ++c)
    if (g_idx[perm[c]] != c / group)
      Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" does not split the columns into groups of {}", name,
           group);
  return perm;
}

// Fills m.codes from signed code values q(r, original column), in the codes' column order.
template <typename CodeFn>
void WriteCodes(QuantizedMatrix& m, CodeFn q) {
  const int64_t rb = m.row_bytes();
  m.codes.assign(static_cast<size_t>(m.n * rb), 0);
  for (int64_t r = 0; r < m.n; ++r) {
    uint8_t* row = m.codes.data() + r * rb;
    for (int64_t c = 0; c < m.k; ++c) {
      const int64_t src = m.perm.empty() ? c : m.perm[c];
      const int v = q(r, src);
      if (m.meta.kind == QuantKind::kInt4)
        row[c / 2] |= static_cast<uint8_t>((v & 0xf) << ((c & 1) * 4));
      else
        row[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  }
}

void DropZeroZeros(QuantizedMatrix& m) {
  if (std::all_of(m.zeros.begin(), m.zeros.end(), [](float z) { return z == 0.f; })) m.zeros.clear();
}

QuantizedMatrix Start(QuantKind kind, int64_t n, int64_t k, int64_t group) {
  QuantizedMatrix m;
  m.n = n;
  m.k = k;
  m.meta.kind = kind;
  m.meta.group = group;
  if (kind == QuantKind::kInt4 && k % 2)
    Fail(ErrorKind::kUnsupported, "int4 weights need an even number of input columns (got {})", k);
  return m;
}

}  // namespace

float QuantizedMatrix::Dequantized(int64_t r, int64_t c) const {
  const int64_t G = meta.Groups(k), g = r * G + c / meta.group;
  const float z = zeros.empty() ? 0.f : zeros[g];
  return scales[g] * (QuantCodeValue(meta.kind, code_data() + r * row_bytes(), c) - z);
}

const TensorView& QuantizedLinearReader::Need(const std::string& name, std::vector<std::string>* consumed) const {
  const TensorView* v = reader_.Find(name);
  if (!v) Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" is missing (its module is stored quantized)", name);
  consumed->push_back(name);
  return *v;
}

bool QuantizedLinearReader::IsQuantized(const std::string& module) const {
  if (!cfg_.quantized()) return false;
  auto has = [&](const char* suffix) { return reader_.Find(module + suffix) != nullptr; };
  switch (cfg_.method) {
    case QuantMethod::kGptq:
    case QuantMethod::kAwq: return has(".qweight");
    case QuantMethod::kFp8:
    case QuantMethod::kCompressedTensors: {
      if (has(".weight_packed")) return true;
      const TensorView* w = reader_.Find(module + ".weight");
      return w && (w->dtype == DType::kF8E4M3 || w->dtype == DType::kI8);
    }
    case QuantMethod::kNone: break;
  }
  return false;
}

QuantizedMatrix QuantizedLinearReader::Read(const std::string& module, int64_t n, int64_t k,
                                            std::vector<std::string>* consumed) const {
  switch (cfg_.method) {
    case QuantMethod::kFp8: return ReadFp8(module, n, k, cfg_.schemes[0], consumed);
    case QuantMethod::kGptq: return ReadGptq(module, n, k, cfg_.schemes[0], consumed);
    case QuantMethod::kAwq: return ReadAwq(module, n, k, cfg_.schemes[0], consumed);
    case QuantMethod::kCompressedTensors: {
      const QuantScheme& s = cfg_.SchemeFor(module);
      if (s.format == "pack-quantized") return ReadCtPacked(module, n, k, s, consumed);
      if (s.kind == QuantKind::kFp8) return ReadFp8(module, n, k, s, consumed);
      return ReadCtUnpacked(module, n, k, s, consumed);
    }
    case QuantMethod::kNone: break;
  }
  Fail(ErrorKind::kInternal, "{}: not a quantized checkpoint", module);
}

// Per-strategy scales of an [n, k] weight, expanded to the canonical [n, G] (group columns each).
static std::vector<float> ExpandScales(const TensorView& v, const QuantScheme& s, int64_t n, int64_t k,
                                       int64_t* group) {
  const std::vector<float> raw = Floats(v);
  std::vector<float> out;
  if (s.strategy == "tensor") {
    ExpectScalar(v);
    *group = k;
    out.assign(static_cast<size_t>(n), raw[0]);
  } else if (s.strategy == "channel") {
    if (v.shape != std::vector<int64_t>{n, 1} && v.shape != std::vector<int64_t>{n}) ExpectShape(v, {n, 1});
    *group = k;
    out = raw;
  } else if (s.strategy == "group") {
    const int64_t G = CeilDiv(k, s.group_size);
    ExpectShape(v, {n, G});
    *group = s.group_size;
    out = raw;
  } else {  // block
    const int64_t br = s.block_rows, bc = s.block_cols, GR = CeilDiv(n, br), G = CeilDiv(k, bc);
    ExpectShape(v, {GR, G});
    *group = bc;
    out.resize(static_cast<size_t>(n * G));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < G; ++g) out[r * G + g] = raw[(r / br) * G + g];
  }
  return out;
}

QuantizedMatrix QuantizedLinearReader::ReadFp8(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                                               std::vector<std::string>* consumed) const {
  const TensorView& w = Need(m + ".weight", consumed);
  ExpectDType(w, {DType::kF8E4M3});
  ExpectShape(w, {n, k});
  // quant_method fp8 names the scale weight_scale_inv (transformers, the official releases; a multiplier
  // despite its name) or, per tensor, weight_scale (vLLM); compressed-tensors names it weight_scale.
  std::string scale_name = m + ".weight_scale_inv";
  if (cfg_.method == QuantMethod::kCompressedTensors || !reader_.Find(scale_name)) scale_name = m + ".weight_scale";
  const TensorView& sv = Need(scale_name, consumed);
  int64_t group = 0;
  std::vector<float> scales = ExpandScales(sv, s, n, k, &group);
  QuantizedMatrix q = Start(QuantKind::kFp8, n, k, group);
  q.scales = std::move(scales);
  q.codes_in_place = w.data;
  if (const TensorView* orig = reader_.Find(m + ".weight_shape_original")) {
    consumed->push_back(orig->name);
    const std::vector<int64_t> shape = Ints(*orig);
    if (shape != std::vector<int64_t>{n, k})
      Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" says {}, expected [{}, {}]", orig->name, ShapeStr(shape), n,
           k);
  }
  if (s.act == ActQuant::kStatic) {
    const std::string in = reader_.Find(m + ".input_scale") ? m + ".input_scale" : m + ".activation_scale";
    const TensorView& a = Need(in, consumed);
    ExpectScalar(a);
    q.meta.act = ActQuant::kStatic;
    q.meta.act_scale = Floats(a)[0];
  } else {
    q.meta.act = s.act;
  }
  return q;
}

QuantizedMatrix QuantizedLinearReader::ReadGptq(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                                                std::vector<std::string>* consumed) const {
  const int bits = s.bits, pf = 32 / bits;
  const uint32_t mask = (1u << bits) - 1, mid = 1u << (bits - 1);
  const int64_t group = s.group_size == -1 ? k : s.group_size, G = CeilDiv(k, group);
  if (k % pf || n % pf)
    Fail(ErrorKind::kCorrupt, "checkpoint: {} has shape [{}, {}], not a multiple of the {} values per word", m, n, k,
         pf);
  const TensorView& qw = Need(m + ".qweight", consumed);
  ExpectDType(qw, {DType::kI32});
  ExpectShape(qw, {k / pf, n});
  const TensorView& qz = Need(m + ".qzeros", consumed);
  ExpectDType(qz, {DType::kI32});
  ExpectShape(qz, {G, n / pf});
  const TensorView& sc = Need(m + ".scales", consumed);
  ExpectShape(sc, {G, n});
  const std::vector<float> scales = Floats(sc);
  QuantizedMatrix q = Start(s.kind, n, k, group);
  if (const TensorView* gi = reader_.Find(m + ".g_idx")) {
    consumed->push_back(gi->name);
    ExpectDType(*gi, {DType::kI32});
    ExpectShape(*gi, {k});
    q.perm = GroupPermutation(Ints(*gi), group, gi->name);
  }
  // Codes as unsigned u in [0, 2^bits); canonical signed code u - 2^(bits-1), zero z - 2^(bits-1).
  WriteCodes(q, [&](int64_t r, int64_t c) {
    const uint32_t u = (Word(qw, (c / pf) * n + r) >> (bits * (c % pf))) & mask;
    return static_cast<int>(u) - static_cast<int>(mid);
  });
  q.scales.resize(static_cast<size_t>(n * G));
  q.zeros.resize(static_cast<size_t>(n * G));
  const int v1 = cfg_.gptq_v1_zeros ? 1 : 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const uint32_t z = (Word(qz, g * (n / pf) + r / pf) >> (bits * (r % pf))) & mask;
      q.scales[r * G + g] = scales[g * n + r];
      q.zeros[r * G + g] = static_cast<float>(static_cast<int>(z) + v1 - static_cast<int>(mid));
    }
  DropZeroZeros(q);
  return q;
}

QuantizedMatrix QuantizedLinearReader::ReadAwq(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                                               std::vector<std::string>* consumed) const {
  static constexpr int kNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // inverse of {0,2,4,6,1,3,5,7}
  const int64_t group = s.group_size == -1 ? k : s.group_size, G = CeilDiv(k, group);
  if (n % 8) Fail(ErrorKind::kCorrupt, "checkpoint: {} has {} output rows, not a multiple of 8 (AWQ packing)", m, n);
  const TensorView& qw = Need(m + ".qweight", consumed);
  ExpectDType(qw, {DType::kI32});
  ExpectShape(qw, {k, n / 8});
  const TensorView& qz = Need(m + ".qzeros", consumed);
  ExpectDType(qz, {DType::kI32});
  ExpectShape(qz, {G, n / 8});
  const TensorView& sc = Need(m + ".scales", consumed);
  ExpectShape(sc, {G, n});
  const std::vector<float> scales = Floats(sc);
  QuantizedMatrix q = Start(QuantKind::kInt4, n, k, group);
  auto nibble = [&](const TensorView& t, int64_t row, int64_t col) {
    return static_cast<int>((Word(t, row * (n / 8) + col / 8) >> (4 * kNibbleOfColumn[col % 8])) & 0xf);
  };
  WriteCodes(q, [&](int64_t r, int64_t c) { return nibble(qw, c, r) - 8; });
  q.scales.resize(static_cast<size_t>(n * G));
  q.zeros.resize(static_cast<size_t>(n * G));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      q.scales[r * G + g] = scales[g * n + r];
      q.zeros[r * G + g] = static_cast<float>(nibble(qz, g, r) - 8);
    }
  DropZeroZeros(q);
  return q;
}

QuantizedMatrix QuantizedLinearReader::ReadCtPacked(const std::string& m, int64_t n, int64_t k,
                                                    const QuantScheme& s, std::vector<std::string>* consumed) const {
  const int bits = s.bits, pf = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int mid = 1 << (bits - 1);
  const TensorView& wp = Need(m + ".weight_packed", consumed);
  ExpectDType(wp, {DType::kI32});
  ExpectShape(wp, {n, CeilDiv(k, pf)});
  const TensorView& ws = Need(m + ".weight_shape", consumed);
  if (Ints(ws) != std::vector<int64_t>{n, k})
    Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" says {}, expected [{}, {}]", ws.name, ShapeStr(Ints(ws)), n, k);
  int64_t group = 0;
  std::vector<float> scales = ExpandScales(Need(m + ".weight_scale", consumed), s, n, k, &group);
  QuantizedMatrix q = Start(s.kind, n, k, group);
  q.scales = std::move(scales);
  const int64_t G = q.meta.Groups(k);
  if (const TensorView* gi = reader_.Find(m + ".weight_g_idx")) {
    consumed->push_back(gi->name);
    ExpectShape(*gi, {k});
    const std::vector<int64_t> g_idx = Ints(*gi);
    // compressed-tensors writes -1 where no activation order was applied.
    if (!std::all_of(g_idx.begin(), g_idx.end(), [](int64_t g) { return g == -1; }))
      q.perm = GroupPermutation(g_idx, group, gi->name);
  }
  const int64_t words = CeilDiv(k, pf);
  WriteCodes(q, [&](int64_t r, int64_t c) {
    return static_cast<int>((Word(wp, r * words + c / pf) >> (bits * (c % pf))) & mask) - mid;
  });
  if (!s.symmetric) {
    if (s.strategy == "tensor") Fail(ErrorKind::kUnsupported, "{}: asymmetric per-tensor int weights", m);
    const TensorView& zp = Need(m + ".weight_zero_point", consumed);
    ExpectDType(zp, {DType::kI32});
    ExpectShape(zp, {CeilDiv(n, pf), G});
    q.zeros.resize(static_cast<size_t>(n * G));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < G; ++g)
        q.zeros[r * G + g] =
            static_cast<float>(static_cast<int>((Word(zp, (r / pf) * G + g) >> (bits * (r % pf))) & mask) - mid);
    DropZeroZeros(q);
  }
  if (s.act != ActQuant::kNone) Fail(ErrorKind::kUnsupported, "{}: activation quantization with packed int weights", m);
  return q;
}

QuantizedMatrix QuantizedLinearReader::ReadCtUnpacked(const std::string& m, int64_t n, int64_t k,
                                                      const QuantScheme& s, std::vector<std::string>* consumed) const {
  const TensorView& w = Need(m + ".weight", consumed);
  ExpectDType(w, {DType::kI8});
  ExpectShape(w, {n, k});
  int64_t group = 0;
  std::vector<float> scales = ExpandScales(Need(m + ".weight_scale", consumed), s, n, k, &group);
  QuantizedMatrix q = Start(QuantKind::kInt8, n, k, group);
  q.scales = std::move(scales);
  q.codes_in_place = w.data;
  if (!s.symmetric) {
    const TensorView& zp = Need(m + ".weight_zero_point", consumed);
    const std::vector<int64_t> z = zp.dtype == DType::kI8 || zp.dtype == DType::kI32 ? Ints(zp) : std::vector<int64_t>{};
    if (z.empty()) ExpectDType(zp, {DType::kI8, DType::kI32});
    const int64_t G = q.meta.Groups(k);
    if (static_cast<int64_t>(z.size()) != n * G)
      Fail(ErrorKind::kCorrupt, "checkpoint: tensor \"{}\" has shape {}, expected [{}, {}]", zp.name,
           ShapeStr(zp.shape), n, G);
    q.zeros.assign(z.begin(), z.end());
    DropZeroZeros(q);
  }
  if (s.act == ActQuant::kStatic) {
    const TensorView& a = Need(m + ".input_scale", consumed);
    ExpectScalar(a);
    q.meta.act_scale = Floats(a)[0];
    if (reader_.Find(m + ".input_zero_point"))
      Fail(ErrorKind::kUnsupported, "{}: asymmetric static activation quantization (input_zero_point)", m);
  }
  q.meta.act = s.act;
  return q;
}

QuantizedMatrix QuantizeMatrix(QuantKind kind, DType dtype, const void* data, int64_t n, int64_t k) {
  const int64_t group = kind == QuantKind::kInt4 ? std::min<int64_t>(kLoadInt4Group, k) : k;
  QuantizedMatrix q = Start(kind, n, k, group);
  const int64_t G = q.meta.Groups(k), rb = q.row_bytes();
  const float qmax = kind == QuantKind::kFp8 ? 448.f : kind == QuantKind::kInt8 ? 127.f : 7.f;
  q.codes.assign(static_cast<size_t>(n * rb), 0);
  q.scales.resize(static_cast<size_t>(n * G));
  std::vector<float> row(static_cast<size_t>(k));
  const size_t es = DTypeSize(dtype);
  for (int64_t r = 0; r < n; ++r) {
    ConvertToF32(dtype, static_cast<const uint8_t*>(data) + static_cast<size_t>(r * k) * es, row.data(), row.size());
    uint8_t* codes = q.codes.data() + r * rb;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * group, c1 = std::min(k, c0 + group);
      float amax = 0.f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float scale = amax > 0.f ? amax / qmax : 1.f;
      q.scales[r * G + g] = scale;
      for (int64_t c = c0; c < c1; ++c) {
        const float x = row[c] / scale;
        if (kind == QuantKind::kFp8) {
          codes[c] = F32ToFp8E4M3(x);
        } else {
          const int v = static_cast<int>(std::clamp(std::nearbyint(x), kind == QuantKind::kInt4 ? -8.f : -127.f, qmax));
          if (kind == QuantKind::kInt4)
            codes[c / 2] |= static_cast<uint8_t>((v & 0xf) << ((c & 1) * 4));
          else
            codes[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
        }
      }
    }
  }
  return q;
}

QuantizedMatrix StackQuantized(const std::vector<const QuantizedMatrix*>& parts,
                               const std::vector<std::vector<int64_t>>& rows) {
  TESSERA_CHECK(!parts.empty() && parts.size() == rows.size());
  const QuantizedMatrix& first = *parts[0];
  int64_t n = 0;
  bool any_zeros = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const QuantizedMatrix& p = *parts[i];
    if (p.k != first.k || p.meta.kind != first.meta.kind || p.meta.group != first.meta.group ||
        p.meta.act != first.meta.act || p.meta.act_scale != first.meta.act_scale)
      Fail(ErrorKind::kUnsupported, "fused projection: its parts are quantized differently ({} group {} vs {} group {})",
           QuantKindName(p.meta.kind), p.meta.group, QuantKindName(first.meta.kind), first.meta.group);
    if (!p.perm.empty())
      Fail(ErrorKind::kUnsupported, "fused projection: a part uses act-order (g_idx) column permutation");
    n += static_cast<int64_t>(rows[i].size());
    any_zeros = any_zeros || !p.zeros.empty();
  }
  QuantizedMatrix out = Start(first.meta.kind, n, first.k, first.meta.group);
  out.meta = first.meta;
  const int64_t rb = out.row_bytes(), G = out.meta.Groups(out.k);
  out.codes.resize(static_cast<size_t>(n * rb));
  out.scales.resize(static_cast<size_t>(n * G));
  if (any_zeros) out.zeros.assign(static_cast<size_t>(n * G), 0.f);
  int64_t o = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const QuantizedMatrix& p = *parts[i];
    for (int64_t r : rows[i]) {
      TESSERA_CHECK(r >= 0 && r < p.n);
      std::memcpy(out.codes.data() + o * rb, p.code_data() + r * rb, static_cast<size_t>(rb));
      std::copy_n(p.scales.data() + r * G, G, out.scales.data() + o * G);
      if (!p.zeros.empty()) std::copy_n(p.zeros.data() + r * G, G, out.zeros.data() + o * G);
      ++o;
    }
  }
  return out;
}

}  // namespace tessera
