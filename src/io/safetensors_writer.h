// tessera io: writes safetensors checkpoints (one file, or shards plus model.safetensors.index.json)
// from a declared list of tensors. The header is computed from the declarations first, then each
// tensor's bytes are requested in order through a callback and streamed to disk, so a checkpoint
// larger than memory (random weights for a full-size config) can be produced.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t nbytes() const;  // numel * dtype size
};

// Receives part of a tensor's bytes; a producer may call it any number of times, but must hand
// over exactly spec.nbytes() bytes in total.
using TensorSink = std::function<void(const void* data, size_t n)>;
using TensorProducer = std::function<void(const TensorSpec& spec, const TensorSink& sink)>;

// Writes one safetensors file at `path` (through `path`.tmp, renamed at the end so that a failed
// write leaves no half file). Tensors are stored in the order given. Throws Error naming the
// tensor on a bad declaration (duplicate or empty name, negative dimension) or a producer that
// hands over the wrong number of bytes, and naming the file on I/O failure.
void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors,
                          const TensorProducer& produce,
                          const std::map<std::string, std::string>& metadata = {});

// Same, for tensors already in memory: bytes[i] holds tensors[i]'s data.
void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors,
                          const std::vector<std::string>& bytes,
                          const std::map<std::string, std::string>& metadata = {});

// A checkpoint directory. With max_shard_bytes == 0 it writes DIR/model.safetensors; otherwise
// DIR/model-0000i-of-0000n.safetensors shards of at most max_shard_bytes of tensor data each (a
// tensor larger than that gets a shard of its own) and DIR/model.safetensors.index.json with
// {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}, as transformers writes them.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string dir, size_t max_shard_bytes = 0);

  void Add(TensorSpec spec);
  void Add(std::string name, DType dtype, std::vector<int64_t> shape);
  void SetMetadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  // Writes everything, asking `produce` for each tensor in declaration order. Returns the file
  // names written (shards, then the index when there is one), relative to the directory.
  std::vector<std::string> Write(const TensorProducer& produce);

 private:
  std::string dir_;
  size_t max_shard_bytes_;
  std::vector<TensorSpec> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera
