#pragma once

#include "backend.h"
#include "communicator.h"
#include "device.h"

#include <memory>
#include <string>

namespace tapestry::exec {

// GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without a driver.
int visibleGpuCount();
// Why visibleGpuCount() is 0, in words, for the one-line messages.
std::string whyNoGpu();

// The cuda backend for this rank: its GPU chosen by local rank (the
// launcher's variable, else the rank among the ranks sharing its host)
// modulo the GPUs visible, a CudaDevice on it, and per mesh axis an NCCL
// communicator, or MPI staged through the host when ranks of the axis share
// a GPU. A collective call on every rank of `world`. Throws TapestryError
// when no GPU is visible, gpu::DeviceError when CUDA fails.
std::unique_ptr<Backend> makeCudaBackend(const Communicator &world, Precision precision);

} // namespace tapestry::exec
