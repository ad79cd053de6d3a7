#include "verification.h"

#include <algorithm>
#include <cmath>

namespace tapestry::exec {

namespace {

// The index of element `flat` of `shape`, as "[i, j]".
std::string indexString(const ir::Shape &shape, std::int64_t flat)
{
    std::vector<std::int64_t> idx(shape.size(), 0);
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    std::string s = "[";
    for (std::size_t d = 0; d < idx.size(); ++d)
        s += (d ? ", " : "") + std::to_string(idx[d]);
    return s + "]";
}

// One tensor's comparison: its largest absolute difference and where, and
// its largest reference magnitude.
// Gradients and updated parameters are each measured against a floor of
// their kind's largest element (below).
enum class Kind { Value, Gradient, Parameter };

struct Difference {
    std::string what;
    double worst = 0.0;
    double scale = 0.0;
    Kind kind = Kind::Value;
};

// `skip(i)`: an element left out (see the update's comparison below).
template <typename Skip>
Difference compare(const std::string &what, const TensorView &sharded, const TensorView &reference, Kind kind,
                   Skip skip)
{
    Difference d{what, -1.0, 0.0, kind};
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < reference.size(); ++i) {
        if (skip(i))
            continue;
        d.scale = std::max(d.scale, std::fabs(static_cast<double>(reference.data[i])));
        const double e = std::fabs(static_cast<double>(sharded.data[i]) - reference.data[i]);
        if (e > d.worst) {
            d.worst = e;
            at = i;
        }
    }
    if (!reference.shape.empty())
        d.what += " " + indexString(reference.shape, at);
    return d;
}

Difference compare(const std::string &what, const TensorView &sharded, const TensorView &reference, Kind kind)
{
    return compare(what, sharded, reference, kind, [](std::int64_t) { return false; });
}

} // namespace

double verifyTolerance(Precision precision)
{
    switch (precision) {
    case Precision::F32:
        return kVerifyTolerance;
    case Precision::F16:
        return 1e-2;
    case Precision::BF16:
        return 2e-2;
    }
    return kVerifyTolerance;
}

VerificationResult verifyStep(ShardedProgram &program, Interpreter *reference, Communicator &world,
                              double tolerance)
{
    VerificationResult r;
    std::vector<Difference> diffs;
    r.shardedObjective = program.forward();
    program.backward();
    if (reference) {
        r.referenceObjective = reference->forward();
        reference->backward();
        float a = static_cast<float>(r.shardedObjective), b = static_cast<float>(r.referenceObjective);
        diffs.push_back(compare(program.objective() == Objective::Loss ? "loss" : "objective Σy²",
                                TensorView{&a, {}}, TensorView{&b, {}}, Kind::Value));
        for (const auto &[name, value] : program.wholeOutputs())
            diffs.push_back(compare("output '" + name + "'", value, reference->value(name), Kind::Value));
    }
    for (const std::string &name : program.parameterNames()) {
        const TensorView whole = program.gatherGradient(name);
        if (reference)
            diffs.push_back(compare("gradient of '" + name + "'", whole, reference->grad(name), Kind::Gradient));
    }
    // The update (ZeRO's on pieces of the parameters, gathered again) is
    // held to the reference's through the next forward pass.
    program.update();
    if (reference)
        reference->update();
    // A parameter whose gradient is only rounding noise is left out: Adam
    // scales any gradient up to the learning rate, noise included.
    double gradientScale = 0.0;
    for (const Difference &d : diffs)
        if (d.kind == Kind::Gradient)
            gradientScale = std::max(gradientScale, d.scale);
    const std::vector<Difference> gradients = diffs;
    for (const std::string &name : program.parameterNames()) {
        const TensorView whole = program.gatherParameter(name);
        if (!reference)
            continue;
        const auto g = std::find_if(gradients.begin(), gradients.end(), [&](const Difference &d) {
            return d.kind == Kind::Gradient && d.what.rfind("gradient of '" + name + "'", 0) == 0;
        });
        if (g != gradients.end() && g->scale < 1e-3 * gradientScale)
            continue;
        // So is each element whose gradient is noise in a parameter that
        // also holds others (the key's part of a fused q/k/v bias).
        const TensorView grad = reference->grad(name);
        const double noise = 1e-3 * gradientScale;
        diffs.push_back(compare("'" + name + "' after the update", whole, reference->value(name), Kind::Parameter,
                                [&](std::int64_t i) {
                                    return grad.data && std::fabs(static_cast<double>(grad.data[i])) < noise;
                                }));
    }
    const float after = program.forward();
    if (reference) {
        float a = after, b = reference->forward();
        diffs.push_back(compare(program.objective() == Objective::Loss ? "loss after the update"
                                                                       : "objective Σy² after the update",
                                TensorView{&a, {}}, TensorView{&b, {}}, Kind::Value));
        for (const auto &[name, value] : program.wholeOutputs())
            diffs.push_back(
                compare("output '" + name + "' after the update", value, reference->value(name), Kind::Value));
    }
    // A gradient that is only rounding noise (a key bias: softmax ignores a
    // shift of a whole row, so its exact gradient is zero), and a parameter
    // updated by such a gradient, are measured against a thousandth of the
    // model's largest gradient (parameter) element instead of their own scale.
    double parameterScale = 0.0;
    for (const Difference &d : diffs) {
        if (d.kind == Kind::Parameter)
            parameterScale = std::max(parameterScale, d.scale);
    }
    for (const Difference &d : diffs) {
        const double floor = d.kind == Kind::Gradient    ? 1e-3 * gradientScale
                             : d.kind == Kind::Parameter ? 1e-3 * parameterScale
                                                         : 0.0;
        const double rel = d.worst / std::max({d.scale, floor, 1e-30});
        ++r.compared;
        if (rel > r.maxError || r.where.empty()) {
            r.maxError = rel;
            r.where = d.what;
        }
    }
    int passed = reference && r.maxError <= tolerance ? 1 : 0;
    MPI_Bcast(&passed, 1, MPI_INT, 0, world.handle());
    MPI_Bcast(&r.maxError, 1, MPI_DOUBLE, 0, world.handle());
    r.passed = passed != 0;
    return r;
}

} // namespace tapestry::exec
