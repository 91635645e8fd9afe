#!/usr/bin/env bash
# Runs every test of a -DMLD_SANITIZE=ON build (ASan + UBSan + LeakSanitizer;
# `make test-sanitize` configures and builds it) with each sanitizer report
# written to a file. Passes only when every test passes AND no report was
# written: a report in a process whose exit status a test expects anyway
# (mldoctor's 1 for findings, a child killed on purpose) still fails here.
#
# The tests labelled "roots" (oracles that run each Debian test root's real
# torch, numba, CPython... against mldoctor's predictions) run in `make test`
# only: their minutes go to the roots' Python stacks, where a sanitizer sees
# only mldoctor's own short runs, and twice they would not fit CI's 90
# minutes. The sanitized binary still runs inside the roots in
# e2e-roots-bad-input, which carries no such label.
# The tests labelled "slow" (the seed and scenario reproductions with real
# torch, numba, MKL and gloo stacks, the long differentials: 40 tests) run in
# `make test` only too. Under the sanitizers they took 1431 s of the 2782 s of
# test time of a clean run (docs/benchmarks.md, "CI"), most of it their real
# stacks and compilers, and CI has 90 minutes for everything. The sanitizers
# still see every unit test, every fuzz corpus, and the 400-odd e2e tests that
# are not slow, which run each command on real and damaged inputs.
set -euo pipefail
build=${1:-build-sanitize}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/sanitizer-reports"
reports=$(cd "$build/sanitizer-reports" && pwd)
rm -f "$reports"/*
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
rc=0
(cd "$build" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" -LE "roots|slow") || rc=$?
if compgen -G "$reports/*" >/dev/null; then
  for f in "$reports"/*; do echo "=== $f"; cat "$f"; done
  echo "test-sanitize: sanitizer reports above (in $reports)" >&2
  rc=1
fi
[ $rc -eq 0 ] && echo "test-sanitize: every test passed, no sanitizer report"
exit $rc
