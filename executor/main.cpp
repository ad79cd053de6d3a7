#include "io/modelloader.h"
#include "ir/error.h"

#include <mpi.h>

#include <cstring>
#include <iostream>
#include <string>

// tapestry-exec: runs a plan on MPI ranks. This first version loads the model
// on every rank and reports the world it runs in.
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::string model;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--help") == 0) {
            if (rank == 0)
                std::cout << "usage: mpirun -np N tapestry-exec --model MODEL\n";
            MPI_Finalize();
            return 0;
        }
        if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
    }
    int rc = 0;
    if (model.empty()) {
        if (rank == 0)
            std::cerr << "tapestry-exec: --model MODEL is required\n";
        rc = 2;
    } else {
        try {
            const auto graph = tapestry::io::loadModel(model);
            if (rank == 0)
                std::cout << "{\"event\":\"loaded\",\"model\":\"" << model << "\",\"ranks\":" << size
                          << ",\"ops\":" << graph.opCount() << "}\n";
        } catch (const tapestry::TapestryError &e) {
            if (rank == 0)
                std::cerr << "tapestry-exec: " << e.what() << '\n';
            rc = 2;
        }
    }
    MPI_Finalize();
    return rc;
}
