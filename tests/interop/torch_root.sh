#!/usr/bin/env bash
# A Debian 13 root with PyTorch 2.x (Debian's python3-torch) for running Tapestry's
# torch exports for real (DTensor, parallelize_module, loss_parallel, fully_shard) on
# CPU gloo ranks: Debian 12 ships torch 1.13, which has none of these.
#   tests/interop/torch_root.sh            make it once (about a minute), print its path
#   tests/interop/torch_root.sh run CMD... run CMD inside it, in the current directory (bound at /work.PID)
# The root is kept in $TAPESTRY_TORCH_ROOT (default /var/tmp/tapestry-torch-root) and
# reused while it has torch. Needs root (debootstrap, chroot) and Debian's mirror.
set -eu
root=${TAPESTRY_TORCH_ROOT:-/var/tmp/tapestry-torch-root}
# The Debian suite it is made from: trixie (Debian 13, torch 2.6) by default;
# TAPESTRY_TORCH_SUITE=sid for the newest torch Debian has.
suite=${TAPESTRY_TORCH_SUITE:-trixie}
fail() { echo "torch_root: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || fail "needs root to make and enter $root (debootstrap, chroot)"
ready() { chroot "$root" sh -c 'python3 -c "import torch" && test -e /usr/lib/x86_64-linux-gnu/libopenblas.so.0' >/dev/null 2>&1; }
if ! ready; then
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || fail "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
  command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null || fail "cannot install debootstrap"; }
  echo "torch_root: making a Debian $suite root with python3-torch in $root (about a minute)" >&2
  rm -rf "$root.new"
  log=$(mktemp)
  debootstrap --variant=minbase "$suite" "$root.new" "$mirror" >"$log" 2>&1 || { tail -5 "$log" >&2; fail "debootstrap $suite from $mirror failed"; }
  cp /etc/resolv.conf "$root.new/etc/resolv.conf"
  # (A mirror's sid snapshot may be past its Release file's Valid-Until.)
  fresh=()
  [ "$suite" = sid ] && fresh=(-o Acquire::Check-Valid-Until=false)
  chroot "$root.new" apt-get "${fresh[@]}" update -q >"$log" 2>&1 || { tail -5 "$log" >&2; fail "apt-get update in the root failed"; }
  DEBIAN_FRONTEND=noninteractive chroot "$root.new" apt-get "${fresh[@]}" install -y -q --no-install-recommends \
    python3-torch python3-numpy libopenblas0-pthread >"$log" 2>&1 || { tail -5 "$log" >&2; fail "installing python3-torch failed"; }
  rm -f "$log"
  rm -rf "$root"
  mv "$root.new" "$root"
fi
[ "${1:-}" = run ] || { echo "$root"; exit 0; }
shift
mounted=()
# bind TARGET MOUNT-ARGS...: mounted for this run, unmounted (lazily, so that a rank's
# lingering helper process cannot keep it) after it, last first.
bind() { local target=$1; shift; mountpoint -q "$target" || { mount "$@" "$target" && mounted=("$target" "${mounted[@]}"); }; }
# This run's directory, bound at a path of its own so that runs side by side (or one
# whose unmount was missed) never see another's tree.
work=work.$$
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; rmdir "$root/$work" 2>/dev/null || true; }
trap cleanup EXIT
mkdir -p "$root/$work"
bind "$root/proc" -t proc proc
bind "$root/dev" --bind /dev
bind "$root/dev/shm" --bind /dev/shm
mount --bind "$PWD" "$root/$work" && mounted=("$root/$work" "${mounted[@]}")
# One BLAS thread per rank; this torch is built without libuv, which gloo's rendezvous otherwise asks for.
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 USE_LIBUV=0 \
  bash -c 'cd "/$0" && "$@"' "$work" "$@"
