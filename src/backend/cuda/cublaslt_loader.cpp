// tessera CUDA backend: cuBLASLt loaded when first used, not when the process starts.
// Linked as a shared library, libcublasLt's static initialisers ran in every process that links
// the backend: ~0.5 CPU-s for each `tessera` command and each test process, GPU or not (86% of
// `test_engine --gtest_list_tests`), which was most of the release build's ctest time on a CPU-only
// CI machine. The functions of cublasLt.h that the backend calls are defined here instead; each
// opens the library (dlopen, once) and forwards to its own symbol. The library is looked up by its
// soname (LD_LIBRARY_PATH, the system's paths), then at the toolkit path of the build.
// A function of cublasLt.h that the backend starts calling must be added here (the link fails
// without it: the library is not on the link line).
#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

void* Library() {
  static void* lib = [] {
    void* h = dlopen("libcublasLt.so." TESSERA_CUBLASLT_SOVERSION, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) h = dlopen(TESSERA_CUBLASLT_PATH, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr)
      std::fprintf(stderr, "tessera: cannot load cuBLASLt (libcublasLt.so.%s or %s): %s\n",
                   TESSERA_CUBLASLT_SOVERSION, TESSERA_CUBLASLT_PATH, dlerror());
    return h;
  }();
  return lib;
}

template <typename F>
F Resolve(const char* name) {
  void* lib = Library();
  void* sym = lib != nullptr ? dlsym(lib, name) : nullptr;
  if (lib != nullptr && sym == nullptr) std::fprintf(stderr, "tessera: cuBLASLt lacks %s: %s\n", name, dlerror());
  return reinterpret_cast<F>(sym);
}

}  // namespace

// Each forwarder: the real function, resolved on the first call; CUBLAS_STATUS_NOT_INITIALIZED when
// the library or the symbol is missing (the backend reports a failed cuBLASLt call by name).
#define TESSERA_CUBLASLT_FORWARD(name, params, args)                  \
  cublasStatus_t CUBLASWINAPI name params {                           \
    static const auto fn = Resolve<decltype(&::name)>(#name);         \
    return fn != nullptr ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;   \
  }

extern "C" {
TESSERA_CUBLASLT_FORWARD(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
TESSERA_CUBLASLT_FORWARD(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmul,
                         (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                          cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                          const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                          cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream),
                         (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                          workspace_bytes, stream))
TESSERA_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate,
                         (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
                          int64_t ld),
                         (layout, type, rows, cols, ld))
TESSERA_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulDescCreate,
                         (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                         (desc, compute, scale))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute,
                         (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                          size_t bytes),
                         (desc, attr, buf, bytes))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
                         (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                          const void* buf, size_t bytes),
                         (pref, attr, buf, bytes))
TESSERA_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
                         (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                          cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                          cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
                          int* returned),
                         (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))
}
