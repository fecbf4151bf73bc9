// tessera backend: sizes of weight tensors (backend.h Tensor).
#include "backend/backend.h"

namespace tessera {

int64_t Tensor::Bytes() const {
  if (!quantized()) return numel() * static_cast<int64_t>(DTypeSize(dtype));
  const int64_t n = dim(0), k = dim(1), groups = n * quant.Groups(k);
  return n * QuantRowBytes(quant.kind, k) + groups * 4 * (quant.zeros ? 2 : 1) + (quant.perm ? k * 4 : 0);
}

}  // namespace tessera
