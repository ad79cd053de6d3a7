#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tapestry::exec::gpu {

// The variables launchers set to a process's rank among those on its host,
// in the order they are read: Open MPI's mpirun, Slurm's srun, MPICH/Hydra,
// PMIx.
inline constexpr const char *kLocalRankVariables[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"};

// The local rank from the first of those variables `lookup` knows (the
// environment: std::getenv) that holds a non-negative integer; nothing when
// none does. A variable that is set but malformed is skipped and named in
// `skipped`, so the caller can say why it fell back.
std::optional<int> localRankFromEnvironment(
    const std::function<const char *(const char *)> &lookup, std::string *skipped = nullptr);

// The GPU a local rank uses: one each while there are enough, then shared
// round-robin (several ranks on one GPU).
int deviceForLocalRank(int localRank, int deviceCount);

} // namespace tapestry::exec::gpu
