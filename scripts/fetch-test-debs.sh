#!/usr/bin/env bash
# Fetches the non-free Debian packages some scenario tests run against (real
# Intel MKL 2020.4 and the CUDA 11.8 runtime library) and the binaries whose
# messages log rules cite (the CUDA 11.8 toolkit's nvcc, ptxas and cudafe++;
# e2e-rules-binary-sources), and unpacks them under
# DEST/root, without touching the machine's apt configuration:
#   scripts/fetch-test-debs.sh DEST        (make test runs it with build/test-debs)
#
# apt runs under a private configuration: a sources file of its own naming the
# non-free component of the archives the machine's sources already use (read
# from /etc/apt/sources.list.d/*.sources, *.list and /etc/apt/sources.list,
# with their Signed-By keyrings, by scripts/lib/apt-sources.sh), its own Dir::State::Lists and Dir::Cache
# (an `apt-get update` against another sources list in the system's lists
# directory deletes the system's list files). Nothing is installed: the
# packages are downloaded with `apt-get download` and unpacked with
# `dpkg-deb -x`.
#
# Idempotent: DEST/root/.unpacked records the package versions unpacked; a
# later run with the same candidate versions (or no network) keeps them.
# A failure never stops the caller: what could not be fetched is written to
# DEST/FETCH-FAILED (one line per package or step), which the tests that need
# these files print as their failure. Exit status: 0, or 2 on a usage error.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
DEST=$(cd "$1" && pwd)
PKGS=(libmkl-rt libmkl-intel-lp64 libmkl-intel-thread libmkl-gnu-thread libmkl-sequential libmkl-core
      libmkl-def
      libmkl-locale libcudart11.0 nvidia-cuda-toolkit)
APT="$DEST/apt"
ROOT="$DEST/root"
FAILED="$DEST/FETCH-FAILED"
STAMP="$ROOT/.unpacked"

note() { echo "fetch-test-debs: $*"; }
# The downloaded .deb of package $1 at version $2, if any.
deb_of() {
  local f
  for f in "$DEST/debs/$1"_*.deb; do
    [ -f "$f" ] && [ "$(dpkg-deb -f "$f" Version 2>/dev/null)" = "$2" ] && echo "$f" && return
  done
}
failed() {
  note "$*"
  echo "$*" >>"$FAILED.new"
}
# shellcheck source=lib/apt-sources.sh
. "$(dirname "$0")/lib/apt-sources.sh"

rm -f "$FAILED.new"
mkdir -p "$APT/etc/sources.list.d" "$APT/lists/partial" "$APT/cache/archives/partial" \
  "$DEST/debs" "$ROOT"
machine_sources non-free >"$APT/etc/sources.list.d/non-free.sources"
opts=(-o "Dir::Etc::sourcelist=$APT/etc/sources.list.d/none.list"
      -o "Dir::Etc::sourceparts=$APT/etc/sources.list.d"
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
      -o "Debug::NoLocking=true" -o "APT::Sandbox::User=root" -o "Acquire::Retries=2")

if ! [ -s "$APT/etc/sources.list.d/non-free.sources" ]; then
  failed "no deb entry in the machine's apt sources (/etc/apt/sources.list{,.d}) to derive a non-free source from"
else
  start=$(date +%s.%N)
  updated=yes
  if ! apt-get "${opts[@]}" -qq update >"$APT/update.log" 2>&1; then
    updated=no
    note "apt-get update of the non-free component failed (see $APT/update.log)"
  fi
  # The candidate version of each package: the key of what is unpacked.
  wanted=()
  for p in "${PKGS[@]}"; do
    v=$(apt-cache "${opts[@]}" policy "$p" 2>/dev/null | awk '/Candidate:/ { print $2 }')
    if [ -z "$v" ] || [ "$v" = "(none)" ]; then
      if [ -f "$STAMP" ] && grep -q "^$p=" "$STAMP" && [ $updated = no ]; then
        wanted+=("$(grep "^$p=" "$STAMP")")  # offline: keep what is there
      else
        failed "$p: not found in the non-free component of $(grep -h '^URIs:' \
          "$APT/etc/sources.list.d/non-free.sources" | sed 's/^URIs: //' | tr '\n' ' ')(apt-get update: $updated; $APT/update.log)"
      fi
    else
      wanted+=("$p=$v")
    fi
  done
  if [ -f "$STAMP" ] && [ "$(printf '%s\n' "${wanted[@]}" | sort)" = "$(sort "$STAMP")" ]; then
    note "up to date (${#wanted[@]} packages in $ROOT)"
  elif [ ${#wanted[@]} -gt 0 ]; then
    # Unpack afresh: a package whose version changed may have dropped files.
    rm -rf "$ROOT" && mkdir -p "$ROOT"
    : >"$STAMP.new"
    for pv in "${wanted[@]}"; do
      p=${pv%%=*}
      v=${pv#*=}
      deb=$(deb_of "$p" "$v")
      if [ -z "$deb" ]; then
        if ! (cd "$DEST/debs" && apt-get "${opts[@]}" -qq download "$p=$v") \
          >"$APT/download-$p.log" 2>&1; then
          failed "$p=$v: apt-get download failed: $(tail -n1 "$APT/download-$p.log")"
          continue
        fi
        deb=$(deb_of "$p" "$v")
      fi
      if [ -z "$deb" ] || ! dpkg-deb -x "$deb" "$ROOT" 2>"$APT/unpack-$p.log"; then
        failed "$p=$v: dpkg-deb -x failed: $(tail -n1 "$APT/unpack-$p.log" 2>/dev/null)"
        continue
      fi
      echo "$pv" >>"$STAMP.new"
    done
    mv "$STAMP.new" "$STAMP"
    end=$(date +%s.%N)
    note "$(wc -l <"$STAMP") packages unpacked in $ROOT ($(du -sh "$DEST/debs" | cut -f1) of .deb files, $(awk "BEGIN { printf \"%.1f\", $end - $start }") s)"
  fi
fi

if [ -f "$FAILED.new" ]; then
  mv "$FAILED.new" "$FAILED"
else
  rm -f "$FAILED"
fi
exit 0
