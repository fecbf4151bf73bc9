// tessera tests: the GatedDeltaArgs of one run over a fused [q | k | v] activation (rows of `width`
// floats: key_heads x key_dim of q, the same of k, then value_heads x value_dim of v), as the Gated
// DeltaNet layer lays out its conv output; g and beta [T, value_heads], out [T, value_heads x value_dim].
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace tessera::testing {

struct GdnShape {
  int64_t key_heads, value_heads, key_dim, value_dim;
};

inline GatedDeltaArgs GdnRunArgs(const GdnShape& s, const float* qkv, int64_t width, int64_t T, const float* g,
                                 const float* beta, float* state, float* out) {
  GatedDeltaArgs a;
  a.q = qkv;
  a.k = qkv + s.key_heads * s.key_dim;
  a.v = qkv + 2 * s.key_heads * s.key_dim;
  a.qk_stride = a.v_stride = width;
  a.g = g;
  a.beta = beta;
  a.T = T;
  a.key_heads = s.key_heads;
  a.value_heads = s.value_heads;
  a.key_dim = s.key_dim;
  a.value_dim = s.value_dim;
  a.state = state;
  a.out = out;
  return a;
}

}  // namespace tessera::testing
