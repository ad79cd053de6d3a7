#include "export/exportjax.h"

namespace tapestry::exports {

std::string jaxPartitionSpecs(const ExportInput &in)
{
    const ir::Graph &g = in.graph;
    const auto &mesh = in.plan.mesh;
    std::string names, shape;
    for (const auto &a : mesh.axes) {
        names += "'" + a.name + "', ";
        shape += std::to_string(a.size) + ", ";
    }
    std::string s;
    s += "# JAX PartitionSpecs exported by Tapestry (tapestry-cli export --to jax) from a tapestry.plan.\n";
    s += "# model: " + in.plan.model.source + " (" + in.plan.model.fingerprint + "), method " + in.plan.method +
         ", mesh " + mesh.toString() + "\n";
    s += "from jax.sharding import PartitionSpec as P\n\n";
    s += "mesh_axis_names = (" + names + ")\n";
    s += "mesh_shape = (" + shape + ")\n";
    for (const ir::Role role : {ir::Role::Parameter, ir::Role::Input}) {
        s += role == ir::Role::Parameter ? "partition_specs = {\n" : "input_specs = {\n";
        for (std::size_t t = 0; t < g.tensorCount(); ++t) {
            const ir::Tensor &tensor = g.tensor(ir::TensorId(static_cast<std::int32_t>(t)));
            if (tensor.role == role)
                s += "    '" + tensor.name + "': " +
                     in.specs[t].toPartitionSpec(static_cast<int>(tensor.shape.size()), mesh) + ",\n";
        }
        s += "}\n";
    }
    return s;
}

} // namespace tapestry::exports
