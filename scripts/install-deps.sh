#!/usr/bin/env bash
# Installs the Debian packages mldoctor needs to build and test, only those
# that are missing, without prompts. Safe to run repeatedly.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --build    build dependencies only
#   scripts/install-deps.sh --cross-arm64  the aarch64 cross compiler and
#                                      qemu-user (make portable-arm64)
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config
  libfmt-dev nlohmann-json3-dev libcli11-dev
  googletest libgtest-dev libgmock-dev
  libvectorscan-dev libtomlplusplus-dev libpcre2-dev zlib1g-dev libdw-dev libbz2-dev liblzma-dev
  libopenmpi-dev openmpi-bin
  dpkg-dev file gzip
)
test_pkgs=(
  python3 python3-venv python3-pip python3-wheel patchelf libtree pax-utils ripgrep libomp-dev
  clang-14 clang-format-14 libclang-rt-14-dev lld-14 util-linux
  python3-torch python3-numba python3-opencv python3-numpy
  python3-scipy python3-sklearn python3-faiss
  libtorch-dev pybind11-dev python3-dev
  groff-base man-db zsh fish
  slurm-wlm munge
  debootstrap
)

# qemu-user-static brings no binfmt registration here: the build runs its
# tools through qemu-aarch64-static explicitly.
cross_arm64_pkgs=(g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user-static)

case "${1:-}" in
  --cross-arm64) pkgs=("${cross_arm64_pkgs[@]}") ;;
  --build) pkgs=("${build_pkgs[@]}") ;;
  *) pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# munge, slurmctld and slurmd (test/e2e/fleet-slurm.py starts private ones)
# must not start as services during the install: a container has no init to
# run them, and a machine's own Slurm must not be disturbed. policy-rc.d
# exit 101 tells invoke-rc.d "not now"; one already there is left alone.
policy=/usr/sbin/policy-rc.d
added_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# install-deps.sh: no service starts during the install\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  added_policy=1
fi
remove_policy() { if [ -n "$added_policy" ]; then $sudo rm -f "$policy"; fi; }
trap remove_policy EXIT
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
