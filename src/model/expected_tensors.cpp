// tessera model: the tensors a checkpoint of a config must hold (ExpectedTensors: names and shapes),
// as the family's ArchBody lists them (model/arch: the Qwen families' shared body or a family's own).
// Read by the loader's checks, dummy weights, inspect and the weight census.
#include <vector>

#include "model/arch/arch.h"
#include "model/model.h"

namespace tessera {

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  ArchFor(c.family).body->tensors(c, &out);
  return out;
}

}  // namespace tessera
