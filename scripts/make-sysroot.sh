#!/usr/bin/env bash
# Makes the sysroot that the portable build (issue 34: one binary for glibc
# 2.28 and newer) compiles and links against:
#   scripts/make-sysroot.sh ARCH DEST      ARCH: amd64 (arm64 later)
#
# A program needs the newest symbol version of the glibc it was linked
# against, for every function it calls (stat@GLIBC_2.33 and pthread_create@
# GLIBC_2.34 when linked on Debian 12). So it is linked against an older
# glibc: Debian 11's (2.31) headers, start files (crt1.o calls
# __libc_start_main the pre-2.34 way, with __libc_csu_init, which a 2.28
# ld.so needs to run the executable's constructors), libc_nonshared.a (its
# stat() wrappers call __xstat, which every glibc exports) and shared
# libraries. The libraries mldoctor links statically or uses header-only
# (Vectorscan, PCRE2, zlib, elfutils, fmt, nlohmann-json, CLI11, toml++) and
# the Open MPI headers come from the machine's own release (Debian 12): the
# versions the rest of the project is tested with. Their archives and
# libstdc++.a were compiled against glibc 2.36, so they may call functions
# newer than 2.28; src/compat supplies those (cmake/portable.cmake), and
# tools/check-glibc-versions.py fails the build if any shipped object still
# needs a version above 2.28.
#
# Nothing is installed and the machine's apt state is not touched: a private
# apt configuration (its own sources, lists, cache and an empty dpkg status,
# so the candidates are the archive's, not the machine's) downloads the .deb
# files, `dpkg-deb -x` unpacks them into DEST/root, and absolute symbolic
# links there are made relative so that they resolve inside the sysroot. The
# archive is the one the machine's apt sources name (scripts/lib/
# apt-sources.sh); no address is written into the repository.
#
# Idempotent: DEST/root/.mld-sysroot records the package versions unpacked,
# and a later run with the same candidates (or no network) keeps the root.
# Exit status: 0 when DEST/root is usable, 1 when it could not be made (the
# reason on stderr), 2 on a usage error.
set -uo pipefail
export LC_ALL=C

if [ $# -ne 2 ] || ! [[ $1 =~ ^(amd64|arm64)$ ]]; then
  echo "usage: $0 amd64|arm64 DEST" >&2
  exit 2
fi
ARCH=$1
mkdir -p "$2" || exit 2
DEST=$(cd "$2" && pwd)
ROOT="$DEST/root"
APT="$DEST/apt"
STAMP="$ROOT/.mld-sysroot"
# The suite whose glibc the build links against: Debian 11, glibc 2.31, the
# oldest on the archive (Debian 10's 2.28 is no longer served there).
GLIBC_SUITE=bullseye
# libgcc-s1: the build's own tools run against the sysroot under qemu-user
# in the aarch64 cross build (make portable-arm64).
GLIBC_PKGS=(libc6 libc6-dev linux-libc-dev libcrypt1 libcrypt-dev libgcc-s1)
# What the build links statically or includes, from the machine's release.
LIB_PKGS=(libvectorscan-dev libpcre2-dev zlib1g-dev libdw-dev libelf-dev libbz2-dev liblzma-dev
          libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libopenmpi-dev libopenmpi3)

note() { echo "make-sysroot: $*" >&2; }
# shellcheck source=lib/apt-sources.sh
. "$(dirname "$0")/lib/apt-sources.sh"

read -r uri keyring <<<"$(machine_main_archive)"
release=$(machine_sources main | awk '/^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) { print $i; exit } }')
if [ -z "${uri:-}" ] || [ -z "$release" ]; then
  note "no Debian release suite in the machine's apt sources (/etc/apt/sources.list{,.d}) to fetch from"
  [ -f "$STAMP" ] && exit 0
  exit 1
fi

mkdir -p "$APT/etc/parts" "$APT/lists/partial" "$APT/cache/archives/partial" "$DEST/debs"
{
  for suite in "$GLIBC_SUITE" "$release"; do
    echo "Types: deb"
    echo "URIs: $uri"
    echo "Suites: $suite"
    echo "Components: main"
    [ "$keyring" != "-" ] && echo "Signed-By: $keyring"
    echo
  done
} >"$APT/etc/parts/sysroot.sources"
opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$APT/etc/parts"
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "Dir::State::status=/dev/null"
      -o "Dir::Etc::preferencesparts=/dev/null" -o "Dir::Etc::preferences=/dev/null"
      -o "APT::Architecture=$ARCH" -o "APT::Architectures::=$ARCH"
      -o "Debug::NoLocking=true" -o "APT::Sandbox::User=root" -o "Acquire::Retries=2")

if ! apt-get "${opts[@]}" -qq update >"$APT/update.log" 2>&1; then
  note "apt-get update failed (see $APT/update.log)"
  if [ -f "$STAMP" ]; then note "keeping $ROOT"; exit 0; fi
  exit 1
fi

# "package=version" of each package's candidate in its suite.
candidate() {  # PACKAGE SUITE
  apt-cache "${opts[@]}" madison "$1" 2>/dev/null |
    awk -F'|' -v s="$2" '{ gsub(/ /, "", $2); if ($3 ~ ("[ /]" s "[/ ]")) { print $2; exit } }'
}
wanted=()
for p in "${GLIBC_PKGS[@]}"; do
  v=$(candidate "$p" "$GLIBC_SUITE")
  [ -n "$v" ] || { note "$p: not in $GLIBC_SUITE for $ARCH"; exit 1; }
  wanted+=("$p=$v")
done
for p in "${LIB_PKGS[@]}"; do
  v=$(candidate "$p" "$release")
  [ -n "$v" ] || { note "$p: not in $release for $ARCH"; exit 1; }
  wanted+=("$p=$v")
done

if [ -f "$STAMP" ] && [ "$(printf '%s\n' "${wanted[@]}" | sort)" = "$(sort "$STAMP")" ]; then
  note "up to date ($ROOT)"
  exit 0
fi

rm -rf "$ROOT.new" && mkdir -p "$ROOT.new"
for pv in "${wanted[@]}"; do
  p=${pv%%=*}
  v=${pv#*=}
  deb=""
  for f in "$DEST/debs/${p}_"*"_$ARCH.deb" "$DEST/debs/${p}_"*"_all.deb"; do
    [ -f "$f" ] && [ "$(dpkg-deb -f "$f" Version)" = "$v" ] && deb=$f && break
  done
  if [ -z "$deb" ]; then
    if ! (cd "$DEST/debs" && apt-get "${opts[@]}" -qq download "$p=$v") >"$APT/download-$p.log" 2>&1; then
      note "$p=$v: apt-get download failed: $(tail -n1 "$APT/download-$p.log")"
      exit 1
    fi
    for f in "$DEST/debs/${p}_"*"_$ARCH.deb" "$DEST/debs/${p}_"*"_all.deb"; do
      [ -f "$f" ] && [ "$(dpkg-deb -f "$f" Version)" = "$v" ] && deb=$f && break
    done
  fi
  if [ -z "$deb" ] || ! dpkg-deb -x "$deb" "$ROOT.new"; then
    note "$p=$v: could not unpack"
    exit 1
  fi
done

# Absolute links (libc.so.6 -> /lib/..., libpthread.so -> /lib/...) would
# resolve on this machine, to its glibc: make each relative to its place.
find "$ROOT.new" -type l -print0 | while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  case "$target" in
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$ROOT.new$target")" "$link" ;;
  esac
done
printf '%s\n' "${wanted[@]}" >"$ROOT.new/.mld-sysroot"
rm -rf "$ROOT" && mv "$ROOT.new" "$ROOT"
note "$(wc -l <"$STAMP") packages unpacked in $ROOT ($(du -sh "$DEST/debs" | cut -f1) of .deb files)"
exit 0
