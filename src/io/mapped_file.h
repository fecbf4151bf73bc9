// tessera io: read-only memory mapping of a whole file (weights stay in the page cache, never
// copied into process memory).
//
// A file truncated while it is mapped (`cp new old`, `truncate`, a failed rsync) makes any read of
// the lost pages a SIGBUS, which kills the process. The fault guard (InstallMappedFileFaultGuard,
// `tessera serve` installs it) turns that into a counted event: a SIGBUS inside a live mapping
// replaces the mapping from the faulting page to its end with zero pages, so the read goes on,
// and counts the fault; the engine checks the count after every forward and, once it moved, fails
// every request with a clear error instead of serving answers computed from zeros
// (docs/RELIABILITY.md, "Faults"). A SIGBUS anywhere else keeps its previous disposition.
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
  int guard_slot_ = -1;  // this mapping's entry in the fault guard's table (-1: none)
};

// Installs the SIGBUS handler of the fault guard (idempotent; process-wide). Mappings made before
// or after are covered alike.
void InstallMappedFileFaultGuard();
// Reads past the end of a truncated mapped file that the guard absorbed, since the process started.
uint64_t MappedFileFaultCount();
// The path of the first such file ("" while there was none).
std::string MappedFileFaultPath();

}  // namespace tessera
