// tessera fuzz: the safetensors header parser (src/io/safetensors.cpp): the 8-byte length, the
// JSON header, dtypes, shapes, offsets. A checkpoint is a file anyone can hand the server; the
// loader promises Error(kCorrupt) naming the file on any inconsistency, before any tensor is
// handed out. SafetensorsFile reads a path (it maps the file), so each input is written to a
// scratch file first.
//
// On a file that opens, every tensor's bytes are read end to end: a view outside the mapping is
// an ASan report or a fault here rather than garbage weights later; and its size must be its
// shape's element count times its dtype's size.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace {

const std::string& ScratchPath() {
  static const std::string p = [] {
    const char* dir = getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/tessera-fuzz-" + std::to_string(getpid()) + ".safetensors";
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath();
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) abort();
  if (size > 0 && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  try {
    tessera::SafetensorsFile file(path);
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : file.tensors()) {
      if (t.name != name) abort();
      if (t.nbytes != static_cast<size_t>(t.numel()) * tessera::DTypeSize(t.dtype)) abort();
      for (size_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
      (void)t.ShapeString();
    }
    (void)sink;
  } catch (const tessera::Error&) {
  }
  unlink(path.c_str());
  return 0;
}
