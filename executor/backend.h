#pragma once

#include "collectives.h"
#include "communicator.h"
#include "cpudevice.h"
#include "device.h"

#include <memory>
#include <string>
#include <string_view>

namespace tapestry::exec {

// What a rank of tapestry-exec computes on: a device for its tensors and
// kernels, and the collectives of each mesh axis. The program builder,
// verification and metrics are the same for every backend.
class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string_view name() const = 0;  // "cpu", "cuda"
    virtual Device &device() = 0;
    // The collectives for tensors on this device among the ranks of `axis`
    // (every rank of the axis calls this together); nullptr: `axis` itself.
    virtual std::unique_ptr<Collectives> collectivesFor(Communicator &axis) = 0;
};

// Host memory, OpenBLAS and MPI.
class CpuBackend final : public Backend {
public:
    std::string_view name() const override { return "cpu"; }
    Device &device() override { return m_device; }
    std::unique_ptr<Collectives> collectivesFor(Communicator &) override { return nullptr; }

private:
    CpuDevice m_device;
};

} // namespace tapestry::exec
