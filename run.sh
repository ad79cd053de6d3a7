#!/usr/bin/env bash
# Tapestry: one script to set up, build and run on Debian 12.
#   ./run.sh         install what is missing, build, open the studio on zoo:gpt2
#                    (the CLI's inspect when there is no display)
#   ./run.sh test    install what is missing, build, run every test
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  build-essential cmake pkg-config git
  qt6-base-dev qt6-svg-dev qt6-charts-dev libqt6opengl6-dev libgl-dev
  libgraphviz-dev nlohmann-json3-dev libfmt-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenmpi-dev openmpi-bin libopenblas-dev coinor-libcbc-dev
  libbenchmark-dev clang libclang-rt-14-dev python3
  debootstrap  # tests/interop: a Debian 13 root with PyTorch 2.x
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "run.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "run.sh: missing Debian packages; install them with:"
    echo "  sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$JOBS"

mode=${1:-gui}
case "$mode" in
  test)
    export QT_QPA_PLATFORM=offscreen
    export OPENBLAS_NUM_THREADS=1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    ctest --test-dir build --output-on-failure -j "$JOBS"
    ;;
  gui)
    if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" ]]; then
      echo "run.sh: no display; showing the default model with the CLI instead."
      build/app/tapestry-cli inspect zoo:gpt2
      echo
      echo "Open the studio on a machine with a display: build/app/tapestry zoo:gpt2"
    else
      exec build/app/tapestry "zoo:gpt2"
    fi
    ;;
  *)
    echo "usage: ./run.sh [test]" >&2
    exit 2
    ;;
esac
