// tessera tests: .npy reading and writing, checked against numpy (np.load / np.save) via python3.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "expect_error.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteFile;

using testing::ExpectError;

// Runs a Python snippet (sys.argv[1:] = args) and parses its stdout as JSON.
nlohmann::json Py(const std::string& code, const std::string& args) {
  std::string script = ScratchDir("io-npy-py") + "/s.py";
  WriteFile(script, "import sys, json\nimport numpy as np\n" + code);
  auto r = RunCommand(testing::Python3() + " " + script + " " + args);
  if (r.exit_code != 0) throw std::runtime_error("python failed: " + r.err);
  return nlohmann::json::parse(r.out);
}

const char* kDescribe = R"PY(
a = np.load(sys.argv[1])
print(json.dumps({'shape': list(a.shape), 'values': [float(x) for x in a.astype(np.float32).ravel()]}))
)PY";

TEST(IoNpy, FixtureLogitsMatchNumpy) {
  const std::string path = DataPath("fixtures/models/qwen3_moe/logits_short.npy");
  auto py = Py(kDescribe, path);
  NpyArray a = ReadNpy(path);
  EXPECT_EQ(a.shape, py["shape"].get<std::vector<int64_t>>());
  auto values = py["values"].get<std::vector<double>>();
  ASSERT_EQ(a.data.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(static_cast<double>(a.data[i]), values[i]) << i;
}

TEST(IoNpy, WriteThenNumpyAndUsRead) {
  std::string dir = ScratchDir("io-npy-rt");
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {5}, {}, {0, 4}, {2, 1, 3}};
  std::vector<std::vector<float>> values;
  std::string paths;
  for (size_t c = 0; c < shapes.size(); ++c) {
    size_t n = 1;
    for (auto d : shapes[c]) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i) - 1.0f / 3.0f;
    std::string path = dir + "/a" + std::to_string(c) + ".npy";
    WriteNpyF32(path, shapes[c], v.data());
    NpyArray back = ReadNpy(path);
    EXPECT_EQ(back.shape, shapes[c]);
    EXPECT_EQ(back.data, v);
    values.push_back(v);
    paths += " " + path;
  }
  // numpy reads every file we wrote as float32 with the same shape and values.
  auto py = Py(R"PY(
out = []
for p in sys.argv[1:]:
    a = np.load(p)
    out.append({'dtype': str(a.dtype), 'shape': list(a.shape), 'values': [float(x) for x in a.ravel()]})
print(json.dumps(out))
)PY", paths);
  ASSERT_EQ(py.size(), shapes.size());
  for (size_t c = 0; c < shapes.size(); ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(py[c]["dtype"].get<std::string>(), "float32");
    EXPECT_EQ(py[c]["shape"].get<std::vector<int64_t>>(), shapes[c]);
    auto got = py[c]["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), values[c].size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<double>(values[c][i]));
  }
}

TEST(IoNpy, ReadsNumpyWrittenDtypesAndVersions) {
  std::string dir = ScratchDir("io-npy-numpy");
  // numpy writes each file; it also reports the values as f32 for comparison.
  auto py = Py(R"PY(
from numpy.lib import format as fmt
d = sys.argv[1]
base = (np.arange(12, dtype=np.float64).reshape(3, 4) - 5.5) / 7
out = {}
for name, arr, ver in [('f8', base, None), ('f2', base.astype(np.float16), None),
                       ('f4', base.astype(np.float32), None), ('v2', base.astype(np.float32), (2, 0)),
                       ('v3', base.astype(np.float32), (3, 0))]:
    with open(d + '/' + name + '.npy', 'wb') as f:
        fmt.write_array(f, arr, version=ver)
    out[name] = [float(x) for x in arr.astype(np.float32).ravel()]
np.save(d + '/fortran.npy', np.asfortranarray(base))
np.save(d + '/i4.npy', np.arange(3, dtype=np.int32))
np.save(d + '/be.npy', np.arange(3, dtype='>f4'))
print(json.dumps(out))
)PY", dir);
  for (const auto& [name, values] : py.items()) {
    SCOPED_TRACE(name);
    NpyArray a = ReadNpy(dir + "/" + name + ".npy");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 4}));
    auto want = values.get<std::vector<double>>();
    ASSERT_EQ(a.data.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<double>(a.data[i]), want[i]) << i;
  }
  ExpectError([&] { ReadNpy(dir + "/fortran.npy"); }, ErrorKind::kUnsupported, {dir + "/fortran.npy", "fortran"});
  ExpectError([&] { ReadNpy(dir + "/i4.npy"); }, ErrorKind::kUnsupported, {dir + "/i4.npy", "<i4"});
  ExpectError([&] { ReadNpy(dir + "/be.npy"); }, ErrorKind::kUnsupported, {dir + "/be.npy", ">f4"});
}

std::string NpyBytes(const std::string& dict, const std::string& data, char major = 1) {
  std::string h = dict + "\n";
  std::string s = std::string("\x93NUMPY", 6) + major + '\0';
  s += static_cast<char>(h.size() & 0xff);
  s += static_cast<char>(h.size() >> 8);
  return s + h + data;
}

TEST(IoNpy, MalformedFiles) {
  std::string dir = ScratchDir("io-npy-bad");
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  WriteFile(dir + "/ok.npy", NpyBytes(good, std::string(8, '\0')));
  EXPECT_EQ(ReadNpy(dir + "/ok.npy").data, (std::vector<float>{0.f, 0.f}));
  struct Bad { std::string name, bytes, part; ErrorKind kind; };
  const Bad cases[] = {
      {"magic", "NOTNUMPY0000", "bad magic", ErrorKind::kCorrupt},
      {"short_data", NpyBytes(good, std::string(7, '\0')), "data bytes", ErrorKind::kCorrupt},
      {"long_data", NpyBytes(good, std::string(12, '\0')), "data bytes", ErrorKind::kCorrupt},
      {"no_shape", NpyBytes("{'descr': '<f4', 'fortran_order': False}", ""), "shape", ErrorKind::kCorrupt},
      {"bad_dim", NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", ""), "dimension", ErrorKind::kCorrupt},
      {"huge_dim", NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", ""), "overflow", ErrorKind::kCorrupt},
      {"overflow", NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4)}", ""), "overflow", ErrorKind::kCorrupt},
      {"version", NpyBytes(good, std::string(8, '\0'), 9), "version", ErrorKind::kUnsupported},
      {"header_len", std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "header length", ErrorKind::kCorrupt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = dir + "/" + c.name + ".npy";
    WriteFile(path, c.bytes);
    ExpectError([&] { ReadNpy(path); }, c.kind, {path, c.part});
  }
  ExpectError([&] { ReadNpy(dir + "/missing.npy"); }, ErrorKind::kNotFound, {dir + "/missing.npy"});
}

}  // namespace
}  // namespace tessera
