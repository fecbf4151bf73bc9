// tessera model: the architecture registry. Each supported family (one file in model/arch) says
// what differs between them: the tensors of a Gated DeltaNet layer's input projections and how
// they map onto the combined projection row [q k v | z | b | a] the shared GDN layer computes on.
// Everything else (norm style, attention gate, partial RoPE, shared expert, dense layers) comes
// from ModelConfig.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace tessera {

class WeightLoader;

struct ArchSpec {
  ModelFamily family;
  const char* name;
  // Appends the input-projection tensors of GDN layer prefix "model.layers.N.linear_attn.".
  void (*gdn_projection_tensors)(const ModelConfig& cfg, const std::string& prefix,
                                 std::vector<ExpectedTensor>* out);
  // Loads them as GdnProjections.
  void (*load_gdn_projections)(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader,
                               GdnWeights* out);
};

const ArchSpec& Qwen3MoeArch();
const ArchSpec& Qwen3NextArch();
const ArchSpec& Qwen35MoeArch();
const ArchSpec& ArchFor(ModelFamily family);

}  // namespace tessera
