// tessera io: NumPy .npy files (format 1.0-3.0), little-endian f32 / f64 / f16 arrays ('<f4',
// '<f8', '<f2'), C order (fortran_order True is rejected). Used by `tessera logits` to write results and by the golden tests to read fixtures.
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
// Writes format 1.0 (2.0 when the header needs it), '<f4', C order; data may be null when the
// shape holds no element. Throws Error on I/O failure or a negative dimension.
void WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace tessera
