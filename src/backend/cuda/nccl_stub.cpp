// tessera cuda backend: the stand-in for NCCL in builds without CUDA or without NCCL: a CUDA
// tensor-parallel group is a clear error.
#include "backend/communicator.h"
#include "core/error.h"

namespace tessera {

RankGroup MakeNcclRankGroup(int n) {
  Fail(ErrorKind::kUnsupported,
       "tensor parallelism on cuda (tensor_parallel_size {}) needs a build with CUDA and NCCL "
       "(configure with -DTESSERA_CUDA=ON where /usr/local/cuda has nccl.h and libnccl)",
       n);
}

}  // namespace tessera
