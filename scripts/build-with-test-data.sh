#!/usr/bin/env bash
# `make test`'s (and `make test-sanitize`'s) build, with the test data made
# beside it: the non-free packages (scripts/fetch-test-debs.sh) and the Debian
# roots (scripts/make-test-roots.sh: downloads, debootstrap, dpkg). Measured
# on a 2-core machine from an empty roots cache, the roots turned out to be
# mostly CPU too (unpacking, byte-compiling), so side by side the two took
# 21.9 min where one after the other takes about 23 (docs/benchmarks.md,
# "CI"); on more cores, or with the roots cached, the data costs nothing.
#   scripts/build-with-test-data.sh BUILD_DIR JOBS [CMAKE_ARG...]
# The build's output is shown as it comes; the test data's is kept in
# BUILD_DIR/test-data.log and shown once both are done. When the build fails,
# the test data is stopped (its scripts remove a half-made root on their next
# run) and the build's status is returned. Both data scripts record what they
# could not make for the tests that need it and never fail the caller; a
# usage error of theirs does.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR JOBS [CMAKE_ARG...]" >&2
  exit 2
fi
build=$1 jobs=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build" || exit 2
log=$build/test-data.log

# Its own session, so that stopping it stops debootstrap, apt and dpkg too.
setsid bash -c '"$1"/scripts/fetch-test-debs.sh "$2"/test-debs || exit
                "$1"/scripts/make-test-roots.sh' data "$src" "$build" >"$log" 2>&1 </dev/null &
data=$!
stop_data() { kill -TERM -- "-$data" 2>/dev/null; wait "$data" 2>/dev/null; }
trap 'stop_data; exit 130' INT TERM

cmake -S "$src" -B "$build" -G Ninja "$@" >/dev/null && cmake --build "$build" -j "$jobs"
rc=$?
if [ $rc -ne 0 ]; then
  stop_data
  echo "build-with-test-data: the build failed; the test data was stopped (its log: $log)" >&2
  exit $rc
fi
wait "$data"
data_rc=$?
cat "$log"
if [ $data_rc -ne 0 ]; then
  echo "build-with-test-data: making the test data failed (status $data_rc; its log: $log)" >&2
  exit $data_rc
fi
exit 0
