// tessera cuda backend: the stand-in of a build without CUDA (TESSERA_CUDA=OFF or no nvcc): no
// device, and asking for the backend is a clear error.
#include "backend/backend.h"
#include "core/error.h"

namespace tessera {

std::unique_ptr<Backend> MakeCudaBackend() {
  Fail(ErrorKind::kUnsupported, "this build of tessera has no CUDA backend (configure with -DTESSERA_CUDA=ON)");
}

int CudaDeviceCount() { return 0; }

}  // namespace tessera
