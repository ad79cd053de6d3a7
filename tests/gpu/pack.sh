#!/usr/bin/env bash
# Packs a build for a GPU machine that has CUDA but none of Tapestry's other
# dependencies (a container image with the CUDA toolkit and PyTorch, say):
# tapestry-cli, tapestry-exec and tst_cudabackend with every shared library they
# load except glibc's and CUDA's own (cudart, cuBLAS, NCCL come from the machine),
# and Open MPI's launcher, daemon, components and help texts in a tree that
# OPAL_PREFIX relocates.
#
#   tests/gpu/pack.sh [BUILD_DIR] OUT.tar.xz
#
# On the GPU machine: tar xf OUT.tar.xz -C DIR; source DIR/env.sh; tests/gpu/run.sh
# DIR/build. env.sh puts the machine's own mpirun first where it has one (Open MPI
# 4.x: the same libmpi.so.40) and otherwise the packed one.
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# == 1)); then BUILD=build OUT=$1; else BUILD=${1:?usage: pack.sh [BUILD_DIR] OUT.tar.xz} OUT=${2:?}; fi
OUT=$(realpath -m "$OUT")
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

MULTIARCH=x86_64-linux-gnu
OMPI_LIB=/usr/lib/$MULTIARCH/openmpi/lib
# Libraries the machine brings or that must not travel: glibc, and CUDA's.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnccl\.so)'
# Open MPI components for fabrics a single machine does not have; their
# libraries (UCX, libfabric, verbs, PSM) are large and optional.
fabric='libuc[pst]|libfabric|libibverbs|librdmacm|libpsm|libpsm2'

mkdir -p "$STAGE/build/app" "$STAGE/build/executor" "$STAGE/build/tests" "$STAGE/lib" \
  "$STAGE/ompi/bin" "$STAGE/ompi/lib/$MULTIARCH/openmpi/lib/openmpi3" "$STAGE/ompi/share"
cp "$BUILD/app/tapestry-cli" "$STAGE/build/app/"
cp "$BUILD/executor/tapestry-exec" "$STAGE/build/executor/"
[[ -x $BUILD/tests/tst_cudabackend ]] && cp "$BUILD/tests/tst_cudabackend" "$STAGE/build/tests/"

libs_of() {  # FILE... -> the resolved paths of the libraries they load, less the skipped ones
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | grep -Ev "$skip" | awk '{print $2}' | sort -u
}

components=()
for so in "$OMPI_LIB"/openmpi3/*.so; do
  if ldd "$so" | grep -Eq "$fabric"; then continue; fi
  components+=("$so")
  cp "$so" "$STAGE/ompi/lib/$MULTIARCH/openmpi/lib/openmpi3/"
done
orterun=$(readlink -f /usr/bin/orterun)
cp "$orterun" "$STAGE/ompi/bin/orterun"
cp /usr/bin/orted "$STAGE/ompi/bin/orted"
ln -s orterun "$STAGE/ompi/bin/mpirun"
cp -r /usr/share/openmpi "$STAGE/ompi/share/openmpi"

libs_of "$STAGE"/build/*/* "$STAGE/ompi/bin/orterun" "$STAGE/ompi/bin/orted" "${components[@]}" \
  | while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
# The libraries' own dependencies, until nothing new appears.
while :; do
  before=$(ls "$STAGE/lib" | wc -l)
  libs_of "$STAGE"/lib/*.so* | while read -r lib; do
    [[ -e $STAGE/lib/$(basename "$lib") ]] || cp -L "$lib" "$STAGE/lib/"
  done
  (($(ls "$STAGE/lib" | wc -l) == before)) && break
done
# Open MPI finds its libraries in its own libdir first.
for lib in "$STAGE"/lib/lib{mpi,mpi_cxx,open-pal,open-rte}.so.*; do
  [[ -e $lib ]] && ln -sf "../../../../../lib/$(basename "$lib")" "$STAGE/ompi/lib/$MULTIARCH/openmpi/lib/"
done

cat >"$STAGE/env.sh" <<'SH'
# Sourced on the GPU machine: the packed libraries after the machine's CUDA.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda_dirs=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/nvidia/lib64 \
  /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -maxdepth 6 \
  \( -name 'libcudart.so.13*' -o -name 'libcublas.so.13*' -o -name 'libcublasLt.so.13*' -o -name 'libnccl.so.2*' \) \
  -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
[[ -d resources/meshes ]] && export TAPESTRY_MESH_DIR=$PWD/resources/meshes
if command -v mpirun >/dev/null 2>&1 && mpirun --version 2>/dev/null | grep -q 'Open MPI) 4\.'; then
  export LD_LIBRARY_PATH="$cuda_dirs:$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "env.sh: the machine's $(mpirun --version | head -1)"
else
  export OPAL_PREFIX=$here/ompi PATH=$here/ompi/bin:$PATH
  export LD_LIBRARY_PATH="$cuda_dirs:$here/ompi/lib/x86_64-linux-gnu/openmpi/lib:$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PMIX_MCA_pcompress_base_silence_warning=1
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_plm=isolated OMPI_MCA_ras=^slurm,gridengine
  echo "env.sh: the packed Open MPI ($(mpirun --version 2>&1 | head -1))"
fi
echo "env.sh: CUDA libraries from ${cuda_dirs:-nowhere (none found)}"
SH
tar -C "$STAGE" -cJf "$OUT" .
echo "pack.sh: $OUT: $(du -h "$OUT" | cut -f1), $(ls "$STAGE/lib" | wc -l) libraries, ${#components[@]} Open MPI components"
