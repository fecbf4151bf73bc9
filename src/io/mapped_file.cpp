// tessera io: read-only mmap of a whole file (see mapped_file.h). MAP_PRIVATE + PROT_READ: pages
// come from the page cache and are shared with every other process reading the same checkpoint.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tessera {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      Fail(ErrorKind::kNotFound, "{}: no such file", path);
    Fail(ErrorKind::kCorrupt, "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    Fail(ErrorKind::kCorrupt, "{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail(ErrorKind::kCorrupt, "{}: not a regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {  // mmap of length 0 is EINVAL: an empty file is an empty view
    ::close(fd);
    return;
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (p == MAP_FAILED) {
    size_ = 0;
    Fail(ErrorKind::kCorrupt, "{}: cannot mmap {} bytes: {}", path, st.st_size, std::strerror(err));
  }
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tessera
