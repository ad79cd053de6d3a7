#include "rankmesh.h"

#include "backend.h"

#include "ir/error.h"

namespace tapestry::exec {

RankMesh::RankMesh(const Communicator &world, std::vector<std::int64_t> shape)
    : m_shape(std::move(shape)), m_rank(world.rank())
{
    std::int64_t devices = 1;
    for (auto d : m_shape)
        devices *= d;
    if (m_shape.empty() || devices != world.size())
        throw TapestryError(Error{"--mesh " + shapeToString(m_shape), {},
                                  "the mesh has " + std::to_string(devices) +
                                      " devices but the job has " + std::to_string(world.size()) +
                                      " ranks"});
    m_coordinates.assign(m_shape.size(), 0);
    std::int64_t rest = m_rank;
    for (std::size_t a = m_shape.size(); a-- > 0;) {
        m_coordinates[a] = rest % m_shape[a];
        rest /= m_shape[a];
    }
    for (std::size_t a = 0; a < m_shape.size(); ++a) {
        // Colour: this rank's position with axis a's coordinate zeroed.
        std::vector<std::int64_t> others = m_coordinates;
        others[a] = 0;
        m_axes.push_back(world.split(rankAt(others), static_cast<int>(m_coordinates[a])));
    }
}

void RankMesh::attach(Backend &backend)
{
    m_attached.clear();
    for (Communicator &axis : m_axes)
        m_attached.push_back(backend.collectivesFor(axis));
}

Collectives &RankMesh::collectives(std::size_t a)
{
    if (a < m_attached.size() && m_attached[a])
        return *m_attached[a];
    return m_axes[a];
}

int RankMesh::rankAt(const std::vector<std::int64_t> &coordinates) const
{
    std::int64_t r = 0;
    for (std::size_t a = 0; a < m_shape.size(); ++a)
        r = r * m_shape[a] + coordinates[a];
    return static_cast<int>(r);
}

std::vector<std::int64_t> RankMesh::parseShape(const std::string &text)
{
    std::vector<std::int64_t> shape;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const auto x = text.find('x', pos);
        const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
        std::size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(part, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (part.empty() || used != part.size() || v < 1)
            throw TapestryError(Error{"--mesh " + text, {}, "expected sizes like 4x2"});
        shape.push_back(v);
        if (x == std::string::npos)
            break;
        pos = x + 1;
    }
    return shape;
}

std::string RankMesh::shapeToString(const std::vector<std::int64_t> &shape)
{
    std::string s;
    for (auto d : shape)
        s += (s.empty() ? "" : "x") + std::to_string(d);
    return s;
}

} // namespace tapestry::exec
