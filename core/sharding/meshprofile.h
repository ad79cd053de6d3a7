#pragma once

#include "sharding/mesh.h"

#include <string>
#include <vector>

namespace tapestry::sharding {

// A machine kind as a JSON file in resources/meshes (format
// "tapestry.mesh-profile", documented there): the device, the link inside a
// node and the link across nodes, and how many devices share a node.
struct MeshProfile {
    std::string name;
    std::string description;
    DeviceProfile device;
    int intraNodeDevices = 1;
    LinkProfile intraNode;
    LinkProfile interNode;

    // Builds a mesh of `sizes` with `names`. Devices are numbered row-major,
    // so an axis' devices all sit in one node exactly when the product of its
    // size and the sizes of the axes after it is at most intraNodeDevices;
    // such an axis runs on the intra-node link, any other on the network.
    Mesh mesh(const std::vector<int> &sizes, const std::vector<std::string> &names) const;
};

MeshProfile readMeshProfileJson(const std::string &text, const std::string &input);
MeshProfile loadMeshProfileFile(const std::string &path);
// The profile as a tapestry.mesh-profile document (version 1) that
// readMeshProfileJson reads back to the same figures.
std::string writeMeshProfileJson(const MeshProfile &profile);

// Where the shipped profiles are: $TAPESTRY_MESH_DIR, else the source tree's
// resources/meshes, else the installed share/tapestry/meshes.
std::string meshProfileDirectory();
// Where the user's own profiles are (those tapestry-exec --calibrate
// measured): $XDG_DATA_HOME/tapestry/meshes, else
// ~/.local/share/tapestry/meshes.
std::string userMeshProfileDirectory();
// A profile by name ("dgx-h100") from the shipped ones, then the user's, or
// by file path (a name with '/' or ending in ".json").
MeshProfile findMeshProfile(const std::string &nameOrPath);
// Names of the shipped profiles and the user's (a user profile named like a
// shipped one is not listed: the shipped one wins), sorted.
std::vector<std::string> meshProfileNames();

inline constexpr const char *kDefaultMeshProfile = "dgx-h100";

} // namespace tapestry::sharding
