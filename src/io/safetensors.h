// tessera io: safetensors checkpoints (one file, or shards listed by model.safetensors.index.json),
// read through mmap. Every header is validated against the file (offsets in range, in order,
// not overlapping, size = product(shape) * dtype size) before any tensor is handed out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace tessera {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the reader lives
  size_t nbytes = 0;
  std::string file;  // the shard it lives in (for error messages)

  int64_t numel() const;
  std::string ShapeString() const;  // "[512, 64]"
};

class SafetensorsFile {
 public:
  // Throws Error(kCorrupt) naming the file (and tensor) on any inconsistency.
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory. Opens `model.safetensors.index.json` when present
// (every shard it names must exist and hold exactly the tensors the index assigns to it),
// else the single `model.safetensors`, else every `*.safetensors` file in the directory.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);

  const TensorView* Find(const std::string& name) const;  // nullptr when absent
  const TensorView& Get(const std::string& name) const;   // throws Error(kNotFound) naming it
  std::vector<std::string> Names() const;                  // sorted
  size_t size() const { return index_.size(); }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> index_;
  std::vector<std::string> files_;
};

}  // namespace tessera
