// libFuzzer target for the mesh profile reader and the --mesh parser: the
// input's first line is a --mesh value ("4x2", "2x2x2 (dp, tp, pp)"), the
// rest a tapestry.mesh-profile document. Any bytes must give a profile and a
// mesh or one TapestryError, never a crash, a hang, a leak or another
// exception. A profile read must write and read back to the same figures,
// and a mesh built must be written by meshText() as a --mesh value that
// parses back to its sizes and names.
#include "ir/error.h"
#include "sharding/mesh.h"
#include "sharding/meshprofile.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

[[noreturn]] void finding(const char *what)
{
    std::fprintf(stderr, "fuzz_meshprofile: %s\n", what);
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    using namespace tapestry;
    const std::string text(reinterpret_cast<const char *>(data), size);
    const auto newline = text.find('\n');
    const std::string meshLine = text.substr(0, newline);
    const std::string profileText = newline == std::string::npos ? std::string() : text.substr(newline + 1);

    std::optional<sharding::MeshText> parsed;
    try {
        parsed = sharding::parseMeshText(meshLine);
    } catch (const TapestryError &) {
    }
    sharding::MeshProfile profile;
    try {
        profile = sharding::readMeshProfileJson(profileText, "fuzz-profile.json");
    } catch (const TapestryError &) {
        return 0;
    }
    const std::string written = sharding::writeMeshProfileJson(profile);
    if (sharding::writeMeshProfileJson(sharding::readMeshProfileJson(written, "written.json")) != written)
        finding("the written profile reads back to other figures");
    if (!parsed)
        return 0;

    sharding::Mesh mesh;
    try {
        mesh = profile.mesh(parsed->sizes, parsed->names.empty() ? sharding::defaultAxisNames(parsed->sizes.size())
                                                                 : parsed->names);
    } catch (const TapestryError &) {
        return 0;
    }
    if (mesh.deviceCount() < 1)
        finding("a mesh of fewer than one device");
    // Outside a try: meshText() must name the axes of a mesh the defaults do
    // not name, or defaultAxisNames() throws here.
    const auto again = sharding::parseMeshText(sharding::meshText(mesh));
    const auto names = again.names.empty() ? sharding::defaultAxisNames(again.sizes.size()) : again.names;
    std::vector<std::string> given;
    for (const auto &a : mesh.axes)
        given.push_back(a.name);
    if (again.sizes != mesh.shape() || names != given)
        finding("meshText() parses back to another mesh");
    return 0;
}
