// tessera io: read-only mmap of a whole file (see mapped_file.h). MAP_PRIVATE + PROT_READ: pages
// come from the page cache and are shared with every other process reading the same checkpoint.
// The fault guard's table is a fixed array of atomics, read by the SIGBUS handler without locks.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace tessera {

namespace {

// Live mappings: [begin, end) (page-rounded) and the file's path. A slot is free when begin is 0.
constexpr int kGuardSlots = 4096;
constexpr size_t kGuardPath = 512;
struct GuardSlot {
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[kGuardPath];
};
GuardSlot g_slots[kGuardSlots];
std::mutex g_slots_mu;  // registration only; the handler never locks
std::atomic<uint64_t> g_faults{0};
std::atomic<bool> g_fault_path_set{false};
char g_fault_path[kGuardPath];
std::atomic<bool> g_installed{false};
struct sigaction g_previous {};
uintptr_t g_page = 4096;  // set at install (sysconf is not async-signal-safe)

int Register(uintptr_t begin, uintptr_t end, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  for (int i = 0; i < kGuardSlots; ++i) {
    GuardSlot& s = g_slots[i];
    if (s.begin.load(std::memory_order_relaxed) != 0) continue;
    const size_t n = std::min(path.size(), kGuardPath - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.end.store(end, std::memory_order_relaxed);
    s.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;  // table full: this mapping is not guarded (4096 shards are far beyond any checkpoint)
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const uintptr_t page = g_page;
  for (GuardSlot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= s.end.load(std::memory_order_relaxed)) continue;
    // Zero pages from the faulting page to the mapping's end (the file lost everything from some
    // offset on); the faulting instruction runs again and reads zeros. mmap is a plain system call.
    const uintptr_t from = addr & ~(page - 1);
    void* p = ::mmap(reinterpret_cast<void*>(from), s.end.load(std::memory_order_relaxed) - from, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) break;
    if (g_faults.fetch_add(1, std::memory_order_acq_rel) == 0) {
      std::memcpy(g_fault_path, s.path, kGuardPath);
      g_fault_path_set.store(true, std::memory_order_release);
    }
    return;
  }
  // Not a guarded mapping: the disposition before ours (the default kills the process with a core),
  // taken when the access faults again on return.
  ::sigaction(SIGBUS, &g_previous, nullptr);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
}

}  // namespace

void InstallMappedFileFaultGuard() {
  if (g_installed.exchange(true)) return;
  g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  struct sigaction sa {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

uint64_t MappedFileFaultCount() { return g_faults.load(std::memory_order_acquire); }

std::string MappedFileFaultPath() {
  if (!g_fault_path_set.load(std::memory_order_acquire)) return "";
  return std::string(g_fault_path);
}

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
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  guard_slot_ = Register(begin, (begin + size_ + page - 1) & ~(page - 1), path_);
}

MappedFile::~MappedFile() {
  if (guard_slot_ >= 0) g_slots[guard_slot_].begin.store(0, std::memory_order_release);
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tessera
