// tessera io: read-only memory mapping of a whole file (weights stay in the page cache, never
// copied into process memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

class MappedFile {
 public:
  // Throws Error(kNotFound) when the file is missing, kCorrupt when it cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera
