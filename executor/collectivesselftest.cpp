#include "collectivesselftest.h"

#include "kernels/strided.h"

#include "ir/error.h"

#include <nlohmann/json.hpp>

#include <functional>

namespace tapestry::exec {

namespace {

// The value element `flat` of rank `rank`'s input holds: small integers, so
// sums over a few ranks are exact in float32.
float sourceValue(int rank, std::int64_t flat)
{
    return static_cast<float>(rank * 100 + flat);
}

std::int64_t flatIndex(const ir::Shape &shape, const ir::Shape &idx)
{
    std::int64_t f = 0;
    for (std::size_t i = 0; i < shape.size(); ++i)
        f = f * shape[i] + idx[i];
    return f;
}

// Calls f(multi-index, flat index) over a tensor of `shape`.
void forEachIndex(const ir::Shape &shape, const std::function<void(const ir::Shape &, std::int64_t)> &f)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    ir::Shape idx(shape.size(), 0);
    for (std::int64_t i = 0; i < n; ++i) {
        f(idx, i);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
}

// A tensor on the device, with a host copy of what was sent or received.
struct Buffer {
    Device &device;
    std::vector<float> data;
    TensorView view;
    Buffer(Device &d, ir::Shape shape) : device(d)
    {
        std::int64_t n = 1;
        for (auto s : shape)
            n *= s;
        data.assign(static_cast<std::size_t>(n), 0.0f);
        view = TensorView{device.allocate(n), std::move(shape)};
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { device.release(view.data); }
    void fillFrom(int rank)
    {
        for (std::size_t i = 0; i < data.size(); ++i)
            data[i] = sourceValue(rank, static_cast<std::int64_t>(i));
        device.upload(view, data.data());
    }
    void fetch() { device.download(data.data(), view); }
};

} // namespace

bool runCollectivesSelfTest(RankMesh &mesh, const Communicator &world, Device &device, int failRank,
                            std::ostream &out)
{
    if (world.rank() == failRank)
        throw TapestryError(Error{"self-test", {}, "rank " + std::to_string(failRank) +
                                                       " stops before its first collective (--fail-rank)"});
    bool allOk = true;
    auto report = [&](nlohmann::json line, bool ok) {
        int mine = ok ? 1 : 0, everyone = 0;
        MPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, world.handle());
        allOk = allOk && everyone == 1;
        line["event"] = "self_test";
        line["ok"] = everyone == 1;
        if (world.rank() == 0)
            out << line.dump() << '\n' << std::flush;
    };

    for (std::size_t a = 0; a < mesh.shape().size(); ++a) {
        Collectives &comm = mesh.collectives(a);
        comm.resetStats();
        const int p = comm.size(), r = comm.rank();
        // World rank of the member at position k along this axis.
        auto member = [&](int k) {
            auto c = mesh.coordinates();
            c[a] = k;
            return mesh.rankAt(c);
        };
        const bool orderOk = member(r) == world.rank();
        CollectiveStats expected;

        {
            Buffer x(device, {2, 3});
            x.fillFrom(world.rank());
            comm.allReduceSum(x.view);
            x.fetch();
            bool ok = orderOk;
            forEachIndex(x.view.shape, [&](const ir::Shape &, std::int64_t f) {
                float want = 0.0f;
                for (int k = 0; k < p; ++k)
                    want += sourceValue(member(k), f);
                ok = ok && x.data[static_cast<std::size_t>(f)] == want;
            });
            expected[Collective::AllReduce] = {1, 6 * 4, 0.0};
            report({{"check", "all_reduce"}, {"axis", a}, {"ranks", p}}, ok);
        }
        for (std::size_t dim = 0; dim < 2; ++dim) {
            const ir::Shape localShape{2, 3};
            ir::Shape fullShape = localShape;
            fullShape[dim] *= p;
            Buffer local(device, localShape), full(device, fullShape);
            local.fillFrom(world.rank());
            comm.allGather(local.view, full.view, dim);
            full.fetch();
            bool ok = true;
            forEachIndex(fullShape, [&](const ir::Shape &idx, std::int64_t f) {
                ir::Shape li = idx;
                const int k = static_cast<int>(idx[dim] / localShape[dim]);
                li[dim] %= localShape[dim];
                ok = ok && full.data[static_cast<std::size_t>(f)] ==
                               sourceValue(member(k), flatIndex(localShape, li));
            });
            expected[Collective::AllGather].calls += 1;
            expected[Collective::AllGather].bytes += 6 * p * 4;
            report({{"check", "all_gather"}, {"axis", a}, {"dim", dim}, {"ranks", p}}, ok);
        }
        for (std::size_t dim = 0; dim < 2; ++dim) {
            const ir::Shape localShape{2, 3};
            ir::Shape fullShape = localShape;
            fullShape[dim] *= p;
            Buffer full(device, fullShape), local(device, localShape);
            full.fillFrom(world.rank());
            comm.reduceScatter(full.view, local.view, dim);
            local.fetch();
            bool ok = true;
            forEachIndex(localShape, [&](const ir::Shape &idx, std::int64_t f) {
                ir::Shape fi = idx;
                fi[dim] += r * localShape[dim];
                float want = 0.0f;
                for (int k = 0; k < p; ++k)
                    want += sourceValue(member(k), flatIndex(fullShape, fi));
                ok = ok && local.data[static_cast<std::size_t>(f)] == want;
            });
            expected[Collective::ReduceScatter].calls += 1;
            expected[Collective::ReduceScatter].bytes += 6 * p * 4;
            report({{"check", "reduce_scatter"}, {"axis", a}, {"dim", dim}, {"ranks", p}}, ok);
        }
        for (std::size_t splitDim = 0; splitDim < 2; ++splitDim) {
            const std::size_t concatDim = 1 - splitDim;
            const ir::Shape block{2, 3};
            ir::Shape inShape = block, outShape = block;
            inShape[splitDim] *= p;
            outShape[concatDim] *= p;
            Buffer in(device, inShape), res(device, outShape);
            in.fillFrom(world.rank());
            comm.allToAll(in.view, res.view, splitDim, concatDim);
            res.fetch();
            bool ok = true;
            forEachIndex(outShape, [&](const ir::Shape &idx, std::int64_t f) {
                // From rank k: its block r along splitDim, placed at block k along concatDim.
                const int k = static_cast<int>(idx[concatDim] / block[concatDim]);
                ir::Shape src = idx;
                src[concatDim] %= block[concatDim];
                src[splitDim] += r * block[splitDim];
                ok = ok && res.data[static_cast<std::size_t>(f)] ==
                               sourceValue(member(k), flatIndex(inShape, src));
            });
            expected[Collective::AllToAll].calls += 1;
            expected[Collective::AllToAll].bytes += 6 * p * 4;
            report({{"check", "all_to_all"}, {"axis", a}, {"split_dim", splitDim},
                    {"concat_dim", concatDim}, {"ranks", p}},
                   ok);
        }
        bool countersOk = true;
        nlohmann::json bytes;
        for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
            const auto kind = static_cast<Collective>(k);
            countersOk = countersOk && comm.stats()[kind].calls == expected[kind].calls &&
                         comm.stats()[kind].bytes == expected[kind].bytes &&
                         comm.stats()[kind].seconds >= 0.0;
            bytes[std::string(toString(kind))] = comm.stats()[kind].bytes;
        }
        report({{"check", "counters"}, {"axis", a}, {"bytes", bytes}}, countersOk);
    }
    if (world.rank() == 0)
        out << nlohmann::json{{"event", "self_test_summary"},
                              {"mesh", RankMesh::shapeToString(mesh.shape())},
                              {"ranks", world.size()},
                              {"ok", allOk}}
                   .dump()
            << '\n'
            << std::flush;
    return allOk;
}

} // namespace tapestry::exec
