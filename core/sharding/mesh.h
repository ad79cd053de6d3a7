#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::sharding {

// One kind of link between devices, as collectives see it: bus bandwidth per
// direction (bytes/s, what nccl-tests reports as busbw) and per-step latency.
struct LinkProfile {
    std::string name;  // "NVLink 4", "InfiniBand NDR"
    double bandwidth = 0;  // bytes/s
    double latency = 0;    // s
    // A collective kind's own fit, where it was measured apart (tapestry-exec
    // --calibrate: an MPI's reduce-scatter within one host runs at half its
    // all-reduce's bus bandwidth), by kind ("reduce-scatter"); the kinds not
    // here use the two figures above.
    struct KindFit {
        double bandwidth = 0, latency = 0;
        friend bool operator==(const KindFit &, const KindFit &) = default;
    };
    std::map<std::string, KindFit> byKind;
    friend bool operator==(const LinkProfile &, const LinkProfile &) = default;
};

// One device of the mesh: memory and peak throughput per dtype, the
// fraction of peak that real kernels reach, and (for the roofline the cost
// model charges each op by, cost::opCompute) the rate its kernels move
// memory at and what starting one costs.
struct DeviceProfile {
    std::string name;
    std::int64_t memoryBytes = 0;
    std::map<std::string, double> peakFlops;  // by dtype name ("bfloat16", "float32")
    double achievableFraction = 1.0;
    // Bytes per second a memory-bound kernel (an elementwise op, a norm, a
    // softmax) reads and writes; 0 where the profile does not say, and
    // every op is then charged by its FLOPs alone.
    double memoryBandwidth = 0;
    // Seconds each kernel costs besides its work (a GPU's launch, a CPU
    // interpreter's dispatch); 0 where the profile does not say.
    double kernelLaunch = 0;
    // The share of peak a GEMM reaches by its size: points of (FLOPs of one
    // GEMM call, fraction of peak), ascending in FLOPs, measured per device
    // (tapestry-exec --calibrate). Empty where the profile does not say, and
    // every GEMM then runs at achievableFraction.
    struct GemmPoint {
        double flops = 0, fraction = 0;
        friend bool operator==(const GemmPoint &, const GemmPoint &) = default;
    };
    std::vector<GemmPoint> gemmEfficiency;
    // Bytes per second a family of kernels reads and writes where it was
    // measured apart from memoryBandwidth (tapestry-exec --calibrate: a
    // strided transpose, a transcendental activation, a softmax or a norm
    // moves its bytes slower than an elementwise add), by family
    // (OpStrategy::kernelFamily: "transpose", "activation", "softmax",
    // "normalization").
    std::map<std::string, double> kernelBandwidth;

    // Peak for `dtype`; dtypes without an entry (integers) use float32's.
    double peak(ir::DType dtype) const;
    // The share of peak of one GEMM call of `callFlops`: gemmEfficiency
    // interpolated in log FLOPs, held flat past its ends; achievableFraction
    // without a table.
    double gemmFraction(double callFlops) const;
    // The bandwidth a kernel of `family` moves memory at: its own where
    // measured, else memoryBandwidth.
    double bandwidthOf(std::string_view family) const;
    friend bool operator==(const DeviceProfile &, const DeviceProfile &) = default;
};

// Whether `family` names a family of kernels DeviceProfile::kernelBandwidth
// may hold ("transpose", "activation", "softmax", "normalization").
bool knownKernelFamily(std::string_view family);

// Why `points` is no GEMM efficiency table (FLOPs positive and ascending,
// fractions in (0, 1]), or nothing.
std::optional<std::string> gemmEfficiencyProblem(const std::vector<DeviceProfile::GemmPoint> &points);

struct MeshAxis {
    std::string name;
    int size = 1;
    LinkProfile link;
    friend bool operator==(const MeshAxis &, const MeshAxis &) = default;
};

// Devices arranged on named axes ("data" x "model"), numbered row-major (the
// last axis varies fastest), with the link each axis' collectives run on.
struct Mesh {
    std::vector<MeshAxis> axes;
    DeviceProfile device;
    std::string profile;  // name of the profile the links and device came from

    int rank() const { return static_cast<int>(axes.size()); }
    int deviceCount() const;
    std::optional<int> axisIndex(const std::string &name) const;
    std::vector<int> shape() const;
    // "2x8 (data, model)"
    std::string toString() const;
    friend bool operator==(const Mesh &, const Mesh &) = default;
};

// The most devices a mesh may have (the largest training clusters have about
// 100,000): a mesh's device count, and the product of the sizes of any of
// its axes (a dim split over several), then fit an int.
inline constexpr int kMaxMeshDevices = 1 << 20;

// Why a mesh of axes of `sizes` cannot be: an axis size below 1, or more
// devices than kMaxMeshDevices. Nothing when it can.
std::optional<std::string> meshSizesProblem(const std::vector<int> &sizes);

// Parses "8", "2x8", "4x2" into axis sizes. Throws TapestryError naming the
// option on anything else, and on sizes meshSizesProblem refuses.
std::vector<int> parseMeshShape(const std::string &text);

// Default axis names: 1D "model", 2D "data","model"; longer meshes need names.
std::vector<std::string> defaultAxisNames(std::size_t rank);

// A mesh as written in one line: its sizes, and its axis names where the
// text gives them the way Mesh::toString writes them ("2x2x2 (dp, tp, pp)";
// "4x2" gives none).
struct MeshText {
    std::vector<int> sizes;
    std::vector<std::string> names;
};
MeshText parseMeshText(const std::string &text);
// What parseMeshText reads back as `mesh`'s sizes and names: the names only
// where they are not the defaults ("4x2", "2x2x2 (dp, tp, pp)").
std::string meshText(const Mesh &mesh);

} // namespace tapestry::sharding
