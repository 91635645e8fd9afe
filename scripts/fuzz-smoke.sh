#!/usr/bin/env bash
# Bounded libFuzzer runs of every fuzz target of a -DMLD_FUZZ=ON build
# (`make fuzz` builds it, `make fuzz-smoke` runs this), so CI exercises the
# parsers with new inputs, not only the saved ones the replay tests run.
#   scripts/fuzz-smoke.sh BUILD_DIR [SECONDS [NAME...]]
# SECONDS per target (default 20); NAMEs (cpuinfo, elf, ...) pick targets.
# For each test/fuzz/<name>-fuzz.cc: replay test/fuzz/corpus/<name>/ (-runs=0),
# then fuzz for SECONDS, one worker. New inputs go to a temporary directory,
# never into the repository's corpus. Prints one summary line per target;
# exits non-zero if any target crashes, leaks, runs out of memory or times
# out, and names the input that did it (kept, with the log, in the
# temporary directory; small ones are printed in base64 too, for CI logs).
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS [NAME...]]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
seconds=${2:-20}
shift $(($# < 2 ? $# : 2))
only=" $* "
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mld-fuzz-smoke.XXXXXX")
# UBSan aborts (the build uses -fno-sanitize-recover too), with a stack.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

failed=()
ran=0
start=$SECONDS
for cc in "$src"/test/fuzz/*-fuzz.cc; do
  target=$(basename "$cc" .cc)
  name=${target%-fuzz}
  [ $# -eq 0 ] || [[ $only == *" $name "* ]] || continue
  ran=$((ran + 1))
  bin=$build/test/$target
  corpus=$src/test/fuzz/corpus/$name
  if [ ! -x "$bin" ]; then
    printf '%-10s FAILED: %s not built\n' "$name" "$bin"
    failed+=("$name")
    continue
  fi
  out=$work/$name
  mkdir -p "$out/new" "$out/artifacts"
  common=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "-artifact_prefix=$out/artifacts/")

  # 1. The saved inputs, each once.
  seeds=0
  [ -d "$corpus" ] && seeds=$(find "$corpus" -type f | wc -l)
  if [ "$seeds" -gt 0 ]; then
    "$bin" "${common[@]}" -runs=0 "$corpus" >"$out/replay.log" 2>&1
    rc=$?
  else
    echo "no corpus at $corpus" >"$out/replay.log"
    rc=0
  fi
  if [ $rc -eq 0 ]; then
    # 2. New inputs for SECONDS: written to $out/new (the first directory),
    # the repository's corpus only read.
    dirs=("$out/new")
    [ "$seeds" -gt 0 ] && dirs+=("$corpus")
    "$bin" "${common[@]}" -max_total_time="$seconds" "${dirs[@]}" >"$out/fuzz.log" 2>&1
    rc=$?
    log=$out/fuzz.log
    stage=fuzz
  else
    log=$out/replay.log
    stage=replay
  fi

  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # The last status line (DONE, or the last one before a crash).
  status=$(grep -E '^#[0-9]+' "$log" | grep -E ' cov: ' | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$status")
  if [ $rc -eq 0 ]; then
    printf '%-10s ok: %d seeds replayed; %s s: %s execs (%s/s), cov: %s ft: %s corpus: %s\n' \
      "$name" "$seeds" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}"
    continue
  fi
  failed+=("$name")
  printf '%-10s FAILED in %s (exit %d) after %s execs, cov: %s ft: %s\n' \
    "$name" "$stage" "$rc" "${execs:-?}" "${cov:-?}" "${ft:-?}"
  # The report: from its first line, without ASan's shadow byte map.
  echo "---- $log"
  sed -n '/ERROR: \|runtime error: \|==[0-9]*==WARNING: /,$p' "$log" |
    sed '/^Shadow bytes around/,/^ *Left alloca redzone/d' | head -n 60
  echo "----"
  found=0
  for a in "$out"/artifacts/*; do
    [ -f "$a" ] || continue
    found=1
    echo "$name: input that failed: $a ($(stat -c %s "$a") bytes)"
    if [ "$(stat -c %s "$a")" -le 4096 ]; then
      echo "$name: base64: $(base64 -w0 "$a")"
    fi
    echo "$name: reproduce with: $bin $a"
  done
  if [ $found -eq 0 ]; then
    # A crash in replay names the corpus file it ran last.
    grep -E '^Running: |Test unit written to' "$log" | tail -1
  fi
done

elapsed=$((SECONDS - start))
if [ $ran -eq 0 ]; then
  echo "fuzz-smoke: no fuzz target named$only" >&2
  exit 2
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz-smoke: FAILED: ${failed[*]} (${elapsed} s; inputs and logs kept in $work)" >&2
  exit 1
fi
rm -rf "$work"
echo "fuzz-smoke: every target ok (${elapsed} s)"
