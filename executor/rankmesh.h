#pragma once

#include "communicator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tapestry::exec {

// The job's ranks laid out on a device mesh, row-major (the last axis varies
// fastest: on a 4x2 mesh ranks 0 and 1 share row 0), with one communicator
// per mesh axis: the ranks that differ only in that axis's coordinate, made
// by MPI_Comm_split with the other coordinates as colour. A backend may
// attach collectives of its own per axis (NCCL communicators on the same
// ranks); the program runs its collectives on collectives(a).
class Backend;

class RankMesh {
public:
    // Throws TapestryError when the mesh's device count is not the number of
    // ranks in `world`.
    RankMesh(const Communicator &world, std::vector<std::int64_t> shape);

    const std::vector<std::int64_t> &shape() const { return m_shape; }
    const std::vector<std::int64_t> &coordinates() const { return m_coordinates; }
    int rank() const { return m_rank; }
    // The rank at `coordinates` (its index in the world communicator).
    int rankAt(const std::vector<std::int64_t> &coordinates) const;
    Communicator &axis(std::size_t a) { return m_axes[a]; }
    const Communicator &axis(std::size_t a) const { return m_axes[a]; }
    // The collectives tensors of `backend` use on each axis, made once per
    // axis (a collective call on every rank of the axis, in axis order).
    void attach(Backend &backend);
    // The backend's collectives on axis a, else the MPI communicator.
    Collectives &collectives(std::size_t a);

    // "4x2" -> {4, 2}; throws TapestryError on anything else.
    static std::vector<std::int64_t> parseShape(const std::string &text);
    static std::string shapeToString(const std::vector<std::int64_t> &shape);

private:
    std::vector<std::int64_t> m_shape;
    std::vector<std::int64_t> m_coordinates;
    int m_rank = 0;
    std::vector<Communicator> m_axes;
    std::vector<std::unique_ptr<Collectives>> m_attached;  // per axis, may be null
};

} // namespace tapestry::exec
