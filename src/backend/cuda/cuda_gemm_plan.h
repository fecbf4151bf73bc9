// tessera cuda backend: a cached cuBLASLt GEMM plan of CudaBackend (descriptors and the chosen
// algorithm for one shape and alignment), shared by the backend's construction / teardown
// (cuda_backend.cpp) and its products (cuda_backend_gemm.cpp).
#pragma once

#include <cublasLt.h>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace tessera {

namespace cuda {
inline void CheckLt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) Fail(ErrorKind::kInternal, "cuBLASLt error {} in {}", static_cast<int>(st), what);
}
}  // namespace cuda

struct CudaBackend::GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace tessera
