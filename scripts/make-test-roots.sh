#!/usr/bin/env bash
# Makes the minimal Debian roots that tests run real ML stacks in (issue 32):
# bullseye (glibc 2.31, CPython 3.9, torch 1.7), trixie (2.41, 3.13, torch 2.6)
# and sid (the newest), each with python3, torch, numba, numpy, scipy,
# scikit-learn, OpenCV, threadpoolctl, LLVM's libomp, gcc/g++, ninja, the
# Python headers and torch's C++ headers (fixtures and torch's extension
# builder need the last four).
#   scripts/make-test-roots.sh [SUITE...]           make or refresh (make test)
#   scripts/make-test-roots.sh --check [SUITE...]   only say whether each root
#                                                   in the cache is usable
#   scripts/make-test-roots.sh --offline [SUITE...] as the first, without the
#                                                   archive: keep usable roots,
#                                                   record missing ones
#   scripts/make-test-roots.sh --key-packages       the packages whose versions
#                                                   key a root, one a line
# The cache is outside the source tree: $MLD_TEST_ROOTS, by default
# /var/cache/mldoctor/test-roots, holding SUITE/ (the root), SUITE.FAILED
# (why there is no usable root), SUITE.log and apt/SUITE/ (a private apt
# configuration for queries). Nothing outside the cache is written.
#
# The archive is the one the machine's own apt sources name (read at run time
# by scripts/lib/apt-sources.sh; no address is written into the repository),
# queried under a private configuration (its own sources, lists, cache and no
# preferences) so the machine's apt sources and lists are never changed. A
# root is made with `debootstrap --variant=minbase`, then `apt-get install
# --no-install-recommends` inside it (chroot), each in a private mount
# namespace so no /proc, /sys or /dev mount outlives the step. Trap: the sid
# Release file of the archive this machine reaches has expired, so apt runs
# with Acquire::Check-Valid-Until=false, here and inside the roots
# (debootstrap does not check Valid-Until, only the signature).
#
# A root is built in a temporary sibling (.SUITE.new.PID) and renamed into
# place only once complete, with SUITE/.mld-root (the key packages' versions)
# written last: a directory without it, or with a key package not configured,
# or without python3, is never taken for a root. A run reuses a root while the
# archive's candidate versions of the key packages equal those in .mld-root
# (with the archive unreachable, it keeps what is there).
#
# A failure never stops the caller: what could not be made is written to
# SUITE.FAILED, which the tests that need that root print as their failure
# (test/e2e/lib/roots.py). Exit status: 0; 1 only when not even SUITE.FAILED
# can be written (no writable cache) or, with --check, when a root is not
# usable; 2 on a usage error.
set -uo pipefail
export LC_ALL=C  # one sort order for sort and comm; apt messages in English

MODE=build
case "${1:-}" in
  --check) MODE=check; shift ;;
  --offline) MODE=offline; shift ;;
  --key-packages) MODE=key-packages; shift ;;
esac
case "${1:-}" in -*) echo "usage: $0 [--check|--offline] [SUITE...] | --key-packages" >&2; exit 2 ;; esac
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(bullseye trixie sid)
CACHE=${MLD_TEST_ROOTS:-/var/cache/mldoctor/test-roots}
# What the tests need; libomp-dev is LLVM's OpenMP runtime of that suite;
# libtorch-dev and pybind11-dev are the headers torch.utils.cpp_extension
# compiles against (Debian's torch/include links into /usr/include);
# Debian 11's and 13's cpp_extension imports setuptools when it loads;
# python3-dbg is the suite's debug interpreter (python3.Xd), which `stacks`
# reads from 3.13 on and must refuse, saying why, before; python3-venv and
# python3-pip install mldoctor's wheel into a venv with the suite's own pip
# (test/e2e/roots-wheel.py).
PKGS=(python3 python3-dev python3-torch python3-numba python3-numpy python3-scipy python3-sklearn
      python3-opencv python3-threadpoolctl libomp-dev gcc g++ ninja-build libtorch-dev pybind11-dev
      python3-setuptools python3-dbg python3-venv python3-pip)
# The versions that decide whether a root is current: what tests assert about
# and the C library. A daily change of an unrelated sid library does not cost
# a rebuild.
KEY=("${PKGS[@]}" libc6)
APT_COMMON=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3)

if [ $MODE = key-packages ]; then printf '%s\n' "${KEY[@]}"; exit 0; fi

note() { echo "make-test-roots: $*"; }
# shellcheck source=lib/apt-sources.sh
. "$(dirname "$0")/lib/apt-sources.sh"

# Whether anything is mounted at or below directory $1.
has_mounts() {
  awk -v d="$1" '{ gsub(/\\040/, " ", $5) } $5 == d || index($5, d "/") == 1 { found = 1 }
                 END { exit !found }' /proc/self/mountinfo
}

# "PKG=VERSION" lines of the key packages installed in root $1, sorted.
root_versions() {
  dpkg-query --admindir="$1/var/lib/dpkg" -W -f='${Package}=${Version}\n' "${KEY[@]}" 2>/dev/null | sort
}

# Says what makes directory $1 unusable as a root (one line on stdout) and
# fails, or succeeds silently. $2 = "built" also requires .mld-root.
root_problem() {
  local r=$1 admin=$1/var/lib/dpkg p st bad
  if [ ! -d "$r" ]; then echo "no root at $r"; return 1; fi
  if [ "${2:-built}" = built ] && [ ! -f "$r/.mld-root" ]; then
    echo "$r is not a complete root: no $r/.mld-root (a build that did not finish, or not made by this script)"
    return 1
  fi
  if [ ! -f "$admin/status" ]; then echo "$r has no dpkg database ($admin/status missing)"; return 1; fi
  if [ ! -x "$r/usr/bin/python3" ]; then
    echo "$r has no python3 (usr/bin/python3 missing or not executable)"; return 1
  fi
  for p in "${KEY[@]}"; do
    st=$(dpkg-query --admindir="$admin" -W -f='${Status}' "$p" 2>/dev/null)
    case "$st" in
      "install ok installed") ;;
      "") echo "$r lacks package $p (not in $admin/status)"; return 1 ;;
      *" unpacked"|*" half-configured"|*" triggers-awaited"|*" triggers-pending")
        echo "$r: package $p is unpacked but not configured (dpkg status: $st)"; return 1 ;;
      *) echo "$r: package $p is not installed properly (dpkg status: $st)"; return 1 ;;
    esac
  done
  # Any other package left half-way (an interrupted install) makes the root
  # unreliable too.
  bad=$(dpkg-query --admindir="$admin" -W -f='${Package} ${Status}\n' 2>/dev/null |
        awk '$NF != "installed" && $NF != "not-installed" && $NF != "config-files" { print $1 " (" $NF ")"; n++ }
             n == 3 { exit }' | paste -sd, -)
  if [ -n "$bad" ]; then echo "$r: packages not configured: $bad"; return 1; fi
  return 0
}

# Runs "$@" chrooted into root $1 in a private mount namespace with /proc,
# /sys and /dev bound in; every mount ends with the command.
in_root() {
  local r=$1; shift
  unshare --mount --propagation private sh -c '
    r=$1; shift
    mount --rbind /proc "$r/proc" && mount --rbind /sys "$r/sys" && mount --rbind /dev "$r/dev" &&
      exec chroot "$r" "$@"' sh "$r" "$@"
}

# Builds root SUITE in directory $2 from archive $3 (keyring $4 or "-");
# appends to log $5. Prints the failing step's reason and fails on error.
build_root() {
  local suite=$1 dir=$2 uri=$3 keyring=$4 log=$5 kr=() problem
  [ "$keyring" != - ] && kr=(--keyring="$keyring")
  mkdir -p "$dir" || { echo "cannot create $dir"; return 1; }
  echo "== $(date -u +%T) debootstrap --variant=minbase $suite" >>"$log"
  # debootstrap mounts /proc and /sys in the target; a private namespace
  # takes them away even if it is killed.
  if ! unshare --mount --propagation private debootstrap --variant=minbase "${kr[@]}" \
      "$suite" "$dir" "$uri" >>"$log" 2>&1; then
    echo "debootstrap --variant=minbase $suite failed: $(grep -E '^(E|W): ' "$log" | tail -n1)"
    return 1
  fi
  # No service starts inside the root; apt there accepts the expired sid
  # Release file and installs no recommends.
  printf '#!/bin/sh\n# make-test-roots.sh: no service starts in a test root\nexit 101\n' \
    >"$dir/usr/sbin/policy-rc.d" && chmod 755 "$dir/usr/sbin/policy-rc.d"
  printf '// make-test-roots.sh: see scripts/make-test-roots.sh\nAcquire::Check-Valid-Until "false";\nAcquire::Retries "3";\nAPT::Install-Recommends "false";\n' \
    >"$dir/etc/apt/apt.conf.d/99mldoctor-test-root"
  # No fsync per file: a build cut short is thrown away whole anyway.
  echo force-unsafe-io >"$dir/etc/dpkg/dpkg.cfg.d/mldoctor-test-root"
  echo "== $(date -u +%T) apt-get update; apt-get install ${PKGS[*]}" >>"$log"
  if ! in_root "$dir" apt-get -q update >>"$log" 2>&1; then
    echo "apt-get update inside the $suite root failed: $(grep -E '^(E|W): ' "$log" | tail -n1)"
    return 1
  fi
  if ! in_root "$dir" env DEBIAN_FRONTEND=noninteractive apt-get -q -y install --no-install-recommends \
      "${PKGS[@]}" >>"$log" 2>&1; then
    echo "apt-get install in the $suite root failed: $(grep -E '^(E|W): ' "$log" | tail -n1)"
    return 1
  fi
  in_root "$dir" apt-get clean >>"$log" 2>&1
  rm -f "$dir/etc/dpkg/dpkg.cfg.d/mldoctor-test-root"
  echo "== $(date -u +%T) installed" >>"$log"
  if ! problem=$(root_problem "$dir" unstamped); then echo "$problem"; return 1; fi
  if ! root_versions "$dir" >"$dir/.mld-root"; then echo "cannot write $dir/.mld-root"; return 1; fi
  return 0
}

# Removes leftovers of builds that did not finish (.SUITE.new.*, .SUITE.old.*),
# unless something is still mounted in one: then it is named and kept.
clean_leftovers() {
  local suite=$1 d
  for d in "$CACHE/.$suite.new."* "$CACHE/.$suite.old."*; do
    [ -e "$d" ] || continue
    if has_mounts "$d"; then
      fail "$d: a leftover partial root with mounts still in it; unmount them and remove it"
      return 1
    fi
    rm -rf --one-file-system "$d"
    note "$suite: removed $d (a build that did not finish)"
  done
  return 0
}

# --check: say for each suite whether its root is usable; touch nothing.
if [ $MODE = check ]; then
  rc=0
  for suite in "${SUITES[@]}"; do
    for d in "$CACHE/.$suite.new."*; do
      [ -e "$d" ] && note "$suite: $d is a half-built root (a build that did not finish); it is not used"
    done
    if [ -f "$CACHE/$suite.FAILED" ]; then
      note "$suite: what could not be made ($CACHE/$suite.FAILED):"
      cat "$CACHE/$suite.FAILED"
    fi
    if problem=$(root_problem "$CACHE/$suite"); then
      note "$suite: ok ($(tr '\n' ' ' <"$CACHE/$suite/.mld-root"))"
    else
      note "$suite: $problem"
      rc=1
    fi
  done
  exit $rc
fi

# The cache must be writable, or not even the failures can be recorded. A
# read-only cache of complete roots is used as it is.
if ! mkdir -p "$CACHE" 2>/dev/null || ! touch "$CACHE/.writable" 2>/dev/null; then
  why=$( (mkdir -p "$CACHE" && touch "$CACHE/.writable") 2>&1 | tail -n1)
  rc=0
  for suite in "${SUITES[@]}"; do
    if problem=$(root_problem "$CACHE/$suite"); then
      note "$suite: cache $CACHE is not writable ($why): using the root there as it is, unchecked against the archive"
    else
      note "$suite: cache $CACHE is not writable ($why) and $problem; set MLD_TEST_ROOTS to a writable directory" >&2
      rc=1
    fi
  done
  exit $rc
fi
rm -f "$CACHE/.writable"
CACHE=$(cd "$CACHE" && pwd)

# One run at a time: a second waits for the first rather than build the same
# root beside it.
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  note "another make-test-roots.sh is working in $CACHE; waiting for it"
  flock 9
fi

ARCHIVE="" KEYRING=-
[ $MODE = offline ] || read -r ARCHIVE KEYRING < <(machine_main_archive)
total_start=$(date +%s)
# Makes or checks one suite's root; the suites run side by side (most of a
# build is dpkg unpacking and byte-compiling, one process each, so three
# builds on a 2-core machine take about half the time of one after another;
# each writes only its own SUITE*, .SUITE.* and apt/SUITE).
make_suite() {
  local suite=$1 root failed log problem have wanted apt_dir opts missing tmp start why old
  root=$CACHE/$suite
  failed=$CACHE/$suite.FAILED
  log=$CACHE/$suite.log
  rm -f "$failed.new"
  fail() { note "$suite: $*"; echo "$*" >>"$failed.new"; }

  clean_leftovers "$suite"
  have=yes
  if ! problem=$(root_problem "$root"); then
    have=no
    [ -e "$root" ] && [ $MODE != offline ] && note "$suite: $problem; making it afresh"
  fi

  # The archive's candidates for the key packages, under a private apt
  # configuration: its own sources, lists and cache, no preferences, and an
  # empty dpkg status (with the machine's, a package installed here in a
  # newer version, as bookworm's libc6 and python3, has that version as its
  # candidate, not bullseye's).
  wanted=""
  if [ $MODE = offline ]; then
    [ $have = yes ] || fail "$problem (--offline: not made)"
  elif [ -z "${ARCHIVE:-}" ]; then
    fail "no Debian archive in the machine's apt sources (/etc/apt/sources.list{,.d}) to make a $suite root from"
  else
    apt_dir=$CACHE/apt/$suite
    mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/prefs"
    : >"$apt_dir/status"
    { echo "Types: deb"; echo "URIs: $ARCHIVE"; echo "Suites: $suite"; echo "Components: main"
      [ "$KEYRING" != - ] && echo "Signed-By: $KEYRING"; } >"$apt_dir/sources/$suite.sources"
    opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources/none.list" -o "Dir::Etc::sourceparts=$apt_dir/sources"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::Etc::preferences=$apt_dir/prefs/none" -o "Dir::Etc::preferencesparts=$apt_dir/prefs"
          -o "Dir::State::status=$apt_dir/status"
          -o "Debug::NoLocking=true" -o "APT::Sandbox::User=root" "${APT_COMMON[@]}")
    # apt-get update exits 0 when an index could not be fetched (a warning,
    # old lists kept): that is an unreachable archive too.
    if apt-get "${opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 &&
       ! grep -qE '^(E: |W: Failed to fetch)' "$apt_dir/update.log"; then
      wanted=$(apt-cache "${opts[@]}" policy "${KEY[@]}" 2>/dev/null |
               awk '/^[^ ]/ { p = $1; sub(/:$/, "", p) } /Candidate:/ && $2 != "(none)" { print p "=" $2 }' | sort)
      missing=$(printf '%s\n' "${KEY[@]}" | sort | comm -23 - <(printf "%s\n" "$wanted" | cut -d= -f1 | sort))
      if [ -n "$missing" ]; then
        fail "not in $suite main of $ARCHIVE: $(echo "$missing" | paste -sd' ' -)"
        wanted=""
      fi
    elif [ $have = yes ]; then
      note "$suite: the archive is not reachable ($(grep -m1 -E '^(E|W): ' "$apt_dir/update.log")); keeping $root"
    else
      fail "apt-get update of $suite from $ARCHIVE failed: $(grep -m1 -E '^(E|W): ' "$apt_dir/update.log") ($apt_dir/update.log)"
    fi
  fi

  if [ $have = yes ] && { [ -z "$wanted" ] || [ "$wanted" = "$(sort "$root/.mld-root")" ]; }; then
    [ -n "$wanted" ] && note "$suite: up to date ($root, $(du -sh --one-file-system "$root" | cut -f1))"
  elif [ -n "$wanted" ]; then
    [ $have = yes ] && note "$suite: the archive's versions changed; making the root afresh"
    tmp=$CACHE/.$suite.new.$$
    start=$(date +%s)
    : >"$log"
    note "$suite: making a root from $ARCHIVE (log: $log)"
    if why=$(build_root "$suite" "$tmp" "$ARCHIVE" "$KEYRING" "$log"); then
      old=$CACHE/.$suite.old.$$
      if { [ ! -e "$root" ] || mv "$root" "$old"; } && mv "$tmp" "$root"; then
        [ -e "$old" ] && rm -rf --one-file-system "$old"
        note "$suite: made $root in $(($(date +%s) - start)) s ($(du -sh --one-file-system "$root" | cut -f1)): $(tr '\n' ' ' <"$root/.mld-root")"
      else
        fail "could not move $tmp into place as $root"
      fi
    else
      has_mounts "$tmp" || rm -rf --one-file-system "$tmp"
      if [ $have = yes ]; then
        note "$suite: $why; keeping the previous root $root"
      else
        fail "$why (log: $log)"
      fi
    fi
  fi
  if [ -f "$failed.new" ]; then mv "$failed.new" "$failed"; else rm -f "$failed"; fi
}
pids=()
for suite in "${SUITES[@]}"; do
  make_suite "$suite" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
note "done in $(($(date +%s) - total_start)) s"
exit 0
