#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace tapestry::exec::gpu {

// A failure of the CUDA runtime, cuBLAS or NCCL. Not a TapestryError: it
// may hit one rank only, and tapestry-exec ends the whole job on it.
class DeviceError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

void check(cudaError_t status, const char *what);
void check(cublasStatus_t status, const char *what);
void check(ncclResult_t status, const char *what);

} // namespace tapestry::exec::gpu
