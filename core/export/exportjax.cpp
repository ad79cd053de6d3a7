#include "export/exportjax.h"

namespace tapestry::exports {

std::string jaxPartitionSpecs(const ExportInput &in)
{
    const ir::Graph &g = in.graph;
    // The plan's mesh with its axes named by what each carries: the
    // PartitionSpecs below name them so.
    sharding::Mesh mesh = in.plan.mesh;
    std::string names, shape;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
        mesh.axes[a].name = in.axisNames[a];
        names += "'" + mesh.axes[a].name + "', ";
        shape += std::to_string(mesh.axes[a].size) + ", ";
    }
    std::string s;
    s += "# JAX PartitionSpecs exported by Tapestry (tapestry-cli export --to jax) from a tapestry.plan.\n";
    s += "# model: " + in.plan.model.source + " (" + in.plan.model.fingerprint + "), method " + in.plan.method +
         ", mesh " + in.plan.mesh.toString() + "\n";
    s += "# Mesh axes, named by what each carries:\n";
    for (const auto &note : axisNotes(in))
        s += "#   " + note + "\n";
    s += "# mesh = jax.sharding.Mesh(mesh_utils.create_device_mesh(mesh_shape), mesh_axis_names)\n";
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
