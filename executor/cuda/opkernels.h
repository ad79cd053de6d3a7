#pragma once

#include "opregistry.h"

#include <map>
#include <string_view>

namespace tapestry::exec {

// The CUDA kernels of the op registry's entries, by entry name
// (OpDef::name): what a GPU rank runs (CudaDevice::opKernels). Each takes
// its stream, cuBLAS handle and block copier from OpArgs::device, a
// CudaDevice. An entry without a row here runs on CPU ranks only.
const std::map<std::string_view, OpKernels> &cudaOpKernels();

} // namespace tapestry::exec
