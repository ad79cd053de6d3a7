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
struct Difference {
    std::string what;
    double worst = 0.0;
    double scale = 0.0;
    bool isGradient = false;
};

Difference compare(const std::string &what, const TensorView &sharded, const TensorView &reference,
                   bool isGradient)
{
    Difference d{what, -1.0, 0.0, isGradient};
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < reference.size(); ++i) {
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
                                TensorView{&a, {}}, TensorView{&b, {}}, false));
        for (const auto &[name, value] : program.wholeOutputs())
            diffs.push_back(compare("output '" + name + "'", value, reference->value(name), false));
    }
    for (const std::string &name : program.parameterNames()) {
        const TensorView whole = program.gatherGradient(name);
        if (reference)
            diffs.push_back(compare("gradient of '" + name + "'", whole, reference->grad(name), true));
    }
    // A gradient that is only rounding noise (a key bias: softmax ignores a
    // shift of a whole row, so its exact gradient is zero) is measured
    // against a thousandth of the model's largest gradient element instead
    // of its own scale.
    double gradientScale = 0.0;
    for (const Difference &d : diffs)
        if (d.isGradient)
            gradientScale = std::max(gradientScale, d.scale);
    for (const Difference &d : diffs) {
        const double floor = d.isGradient ? 1e-3 * gradientScale : 0.0;
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
