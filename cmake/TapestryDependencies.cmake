# Every dependency comes from Debian 12's packages (see run.sh for the list);
# CUDA, cuBLAS and NCCL are optional and come from /usr/local/cuda.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Protobuf REQUIRED)  # before ONNX: its targets link protobuf::libprotobuf
find_package(ONNX REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Qt6 REQUIRED COMPONENTS Core Gui Widgets Svg Charts Test Network Concurrent)
pkg_check_modules(GRAPHVIZ REQUIRED IMPORTED_TARGET libcgraph libgvc)
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(FMT REQUIRED IMPORTED_TARGET fmt)

# The CUDA backend of tapestry-exec: nvcc, cuBLAS and NCCL from one toolkit
# folder. Without them (or with -DTAPESTRY_CUDA=OFF) the CPU executor is
# built alone. CUDAToolkit_ROOT, not PATHS: find_package(CUDAToolkit) is a
# find module, and PATHS would switch it to config mode, which finds nothing.
option(TAPESTRY_CUDA "Build tapestry-exec's CUDA backend when the toolkit and NCCL are found" ON)
set(TAPESTRY_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit with cuBLAS and NCCL")
set(TAPESTRY_HAVE_CUDA OFF)
if(TAPESTRY_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "${TAPESTRY_CUDA_ROOT}/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "${TAPESTRY_CUDA_ROOT}/bin/nvcc")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CUDAToolkit_ROOT "${TAPESTRY_CUDA_ROOT}")
    find_package(CUDAToolkit QUIET)
    find_library(NCCL_LIBRARY nccl HINTS "${TAPESTRY_CUDA_ROOT}/lib" "${TAPESTRY_CUDA_ROOT}/lib64")
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${TAPESTRY_CUDA_ROOT}/include")
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      # A100 and H100 class GPUs. nvcc 13 takes Debian 12's GCC 12 as its
      # host compiler as it is (no -allow-unsupported-compiler needed).
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES "80;90")
      endif()
      enable_language(CUDA)
      set(TAPESTRY_HAVE_CUDA ON)
    endif()
  endif()
endif()
if(TAPESTRY_HAVE_CUDA)
  message(STATUS "Tapestry: CUDA executor ON (CUDA ${CUDAToolkit_VERSION}, sm ${CMAKE_CUDA_ARCHITECTURES}, ${NCCL_LIBRARY})")
else()
  message(STATUS "Tapestry: CUDA executor OFF (TAPESTRY_CUDA=${TAPESTRY_CUDA}; needs nvcc, cuBLAS and NCCL in ${TAPESTRY_CUDA_ROOT})")
endif()
