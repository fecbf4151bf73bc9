// tessera model tests: the loader's accounting on checkpoints derived from the fixtures by a small
// python rewriter (missing / unknown / wrongly shaped / wrongly typed tensors are Errors naming
// the tensor), and the accepted variants: nested Qwen3.5 layout with vision / MTP tensors, fused
// transformers-5 expert tensors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteFile;

// Rewrites SRC/model.safetensors (+ config.json) into DST with one edit.
const char* kRewriter = R"PY(
import json, struct, sys, shutil, os
src, dst, op, arg = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
raw = open(os.path.join(src, 'model.safetensors'), 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); base = 8 + n
meta = hdr.pop('__metadata__', None)
t = {k: (v['dtype'], v['shape'], raw[base + v['data_offsets'][0]: base + v['data_offsets'][1]]) for k, v in hdr.items()}
cfg = json.load(open(os.path.join(src, 'config.json')))
if op == 'drop': del t[arg]
elif op == 'add': t[arg] = ('BF16', [4], b'\x80\x3f' * 4)
elif op == 'reshape': d, s, b = t[arg]; t[arg] = (d, [s[0] * s[1]] if len(s) == 2 else [s[0], 1], b)
elif op == 'dtype': d, s, b = t[arg]; t[arg] = ('I16', s, b)
elif op == 'nest':
    t = {('model.language_model.' + k[6:] if k.startswith('model.') else k): v for k, v in t.items()}
    t['model.visual.blocks.0.attn.qkv.weight'] = ('BF16', [2, 2], b'\x80\x3f' * 4)
    t['mtp.fc.weight'] = ('BF16', [2, 2], b'\x80\x3f' * 4)
    text = dict(cfg); text['model_type'] = 'qwen3_5_moe_text'
    cfg = {'architectures': ['Qwen3_5MoeForConditionalGeneration'], 'model_type': 'qwen3_5_moe',
           'text_config': text, 'tie_word_embeddings': False}
elif op == 'fuse':
    layers = sorted({int(k.split('.')[2]) for k in t if '.mlp.experts.' in k})
    for l in layers:
        p = 'model.layers.%d.mlp.experts.' % l
        E = len({k for k in t if k.startswith(p) and k.endswith('gate_proj.weight')})
        gu, dn = b'', b''
        for e in range(E):
            g, u, d = (t.pop(p + '%d.%s_proj.weight' % (e, w)) for w in ('gate', 'up', 'down'))
            gu += g[2] + u[2]; dn += d[2]; I, H = g[1]
        t[p + 'gate_up_proj'] = ('BF16', [E, 2 * I, H], gu)
        t[p + 'down_proj'] = ('BF16', [E, H, I], dn)
os.makedirs(dst, exist_ok=True)
json.dump(cfg, open(os.path.join(dst, 'config.json'), 'w'))
out, off, h = b'', 0, {}
for k in sorted(t):
    d, s, b = t[k]; h[k] = {'dtype': d, 'shape': s, 'data_offsets': [off, off + len(b)]}; out += b; off += len(b)
if meta: h['__metadata__'] = meta
hb = json.dumps(h).encode(); hb += b' ' * ((8 - len(hb) % 8) % 8)
open(os.path.join(dst, 'model.safetensors'), 'wb').write(struct.pack('<Q', len(hb)) + hb + out)
)PY";

std::string Derive(const std::string& family, const std::string& op, const std::string& arg) {
  const std::string dir = ScratchDir("loader-" + family + "-" + op);
  const std::string script = dir + "/rewrite.py";
  WriteFile(script, kRewriter);
  auto r = RunCommand("python3 " + script + " " + DataPath("fixtures/models/" + family) + " " + dir + "/ckpt " +
                      op + " " + arg);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir + "/ckpt";
}

std::string LoadError(const std::string& dir) {
  try {
    Model::Load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

TEST(ModelLoader, ExpectedTensorsMatchFixtureCheckpoints) {
  for (const char* fam : {"qwen3_moe", "qwen3_next", "qwen3_5_moe"}) {
    const std::string dir = DataPath(std::string("fixtures/models/") + fam);
    auto cfg = ModelConfig::FromHf(LoadHfModelDir(dir));
    CheckpointReader reader(dir);
    auto expected = ExpectedTensors(cfg);
    EXPECT_EQ(expected.size(), reader.size()) << fam;
    for (const auto& e : expected) {
      const TensorView* v = reader.Find(e.name);
      ASSERT_NE(v, nullptr) << e.name;
      EXPECT_EQ(v->shape, e.shape) << e.name;
    }
    EXPECT_NO_THROW(Model::Load(dir)) << fam;
  }
}

TEST(ModelLoader, MissingTensorNamesIt) {
  const std::string name = "model.layers.1.self_attn.k_norm.weight";
  std::string msg = LoadError(Derive("qwen3_moe", "drop", name));
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(ModelLoader, UnknownTensorNamesIt) {
  const std::string name = "model.layers.0.mystery.weight";
  std::string msg = LoadError(Derive("qwen3_next", "add", name));
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("not used"), std::string::npos) << msg;
}

TEST(ModelLoader, WrongShapeNamesIt) {
  const std::string name = "model.layers.0.linear_attn.in_proj_qkv.weight";
  std::string msg = LoadError(Derive("qwen3_5_moe", "reshape", name));
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
}

TEST(ModelLoader, WrongDtypeNamesIt) {
  const std::string name = "model.layers.0.mlp.experts.3.up_proj.weight";
  std::string msg = LoadError(Derive("qwen3_moe", "dtype", name));
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
}

std::vector<float> ShortLogits(Model& m) {
  Batch b;
  Segment s;
  s.tokens = {81, 213, 287, 262, 424, 213, 75};
  s.commit_len = 7;
  s.logits_rows = {0, 6};
  b.segments.push_back(s);
  return m.Forward(b).logits;
}

TEST(ModelLoader, NestedQwen35LayoutSkipsVisionAndMtp) {
  auto nested = Model::Load(Derive("qwen3_5_moe", "nest", "-"));
  EXPECT_TRUE(nested->config().nested_language_model);
  auto flat = Model::Load(DataPath("fixtures/models/qwen3_5_moe"));
  EXPECT_EQ(ShortLogits(*nested), ShortLogits(*flat));
}

TEST(ModelLoader, FusedExpertTensorsGiveSameLogits) {
  auto fused = Model::Load(Derive("qwen3_moe", "fuse", "-"));
  auto split = Model::Load(DataPath("fixtures/models/qwen3_moe"));
  EXPECT_EQ(ShortLogits(*fused), ShortLogits(*split));
}

TEST(ModelLoader, CacheSizes) {
  auto cfg = ModelConfig::FromHf(LoadHfModelDir(DataPath("fixtures/models/qwen3_next")));
  // 2 attention layers * (K + V) * 2 kv heads * 64 dims * 4 bytes (f32) or 2 (bf16).
  EXPECT_EQ(Model::KvBytesPerToken(cfg, DType::kF32), 2 * 2 * 2 * 64 * 4);
  EXPECT_EQ(Model::KvBytesPerToken(cfg, DType::kBF16), 2 * 2 * 2 * 64 * 2);
  auto model = Model::Load(DataPath("fixtures/models/qwen3_next"));  // LoadOptions' default: an f32 cache
  EXPECT_EQ(model->KvCacheDType(), DType::kF32);
  EXPECT_EQ(model->KvBytesPerTokenPerRank(), Model::KvBytesPerToken(cfg, DType::kF32));
  // 2 GDN layers * (conv 256 * 3 + 4 heads * 32 * 32) * 4 bytes.
  EXPECT_EQ(Model::StateBytesPerSequence(cfg), 2 * (256 * 3 + 4 * 32 * 32) * 4);
}

// LoadOptions::kv_cache_dtype: "f32" or "bf16" by name, anything else an invalid argument; the CPU
// backend keeps f32 only, so a bf16 cache there is refused at load (kUnsupported, naming --device cuda)
// instead of a cache the backend would read as floats.
TEST(ModelLoader, KvCacheDTypeNames) {
  EXPECT_EQ(ParseKvCacheDType("f32"), DType::kF32);
  EXPECT_EQ(ParseKvCacheDType("bf16"), DType::kBF16);
  for (const char* bad : {"fp8", "", "BF16", "f16"})
    testing::ExpectError([&] { ParseKvCacheDType(bad); }, ErrorKind::kInvalidArgument, {"f32 or bf16"});
}

TEST(ModelLoader, Bf16KvCacheIsRefusedOnTheCpu) {
  LoadOptions o;
  o.device = "cpu";
  o.kv_cache_dtype = "bf16";
  const std::string dir = DataPath("fixtures/models/qwen3_moe");
  testing::ExpectError([&] { Model::Load(dir, o); }, ErrorKind::kUnsupported, {"--device cuda"});
  o.kv_cache_dtype = "fp8";
  testing::ExpectError([&] { Model::Load(dir, o); }, ErrorKind::kInvalidArgument, {"fp8"});
}

// LoadOptions::activation_precision: f32 by default (the CPU's products are f32 anyway), bf16 by name;
// bf16 on the CPU is refused at load naming --device cuda; another name is an invalid argument.
TEST(ModelLoader, ActivationPrecisionNames) {
  EXPECT_EQ(LoadOptions{}.activation_precision, "f32");
  EXPECT_EQ(ParseActivationPrecision("f32"), DType::kF32);
  EXPECT_EQ(ParseActivationPrecision("bf16"), DType::kBF16);
  for (const char* bad : {"fp8", "", "BF16", "f16", "auto"})
    testing::ExpectError([&] { ParseActivationPrecision(bad); }, ErrorKind::kInvalidArgument, {"f32 or bf16"});
  const std::string dir = DataPath("fixtures/models/qwen3_moe");
  LoadOptions o;
  EXPECT_EQ(Model::Load(dir, o)->backend().ActivationPrecision(), DType::kF32);
  o.activation_precision = "bf16";
  testing::ExpectError([&] { Model::Load(dir, o); }, ErrorKind::kUnsupported, {"--device cuda"});
}

}  // namespace
}  // namespace tessera
