#include "cuda/cudacheck.h"

namespace tapestry::exec::gpu {

void check(cudaError_t status, const char *what)
{
    if (status != cudaSuccess)
        throw DeviceError(std::string(what) + ": " + cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char *what)
{
    if (status != CUBLAS_STATUS_SUCCESS)
        throw DeviceError(std::string(what) + ": " + cublasGetStatusString(status));
}

void check(ncclResult_t status, const char *what)
{
    if (status != ncclSuccess)
        throw DeviceError(std::string(what) + ": " + ncclGetErrorString(status));
}

} // namespace tapestry::exec::gpu
