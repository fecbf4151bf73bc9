// tessera io: NumPy .npy files (format 1.0-3.0), little-endian f32 / f64 / bf16-as-u2 arrays,
// C order. Used by `tessera logits` to write results and by the golden tests to read fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // converted to f32
};

NpyArray ReadNpy(const std::string& path);  // throws Error on malformed input
void WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace tessera
