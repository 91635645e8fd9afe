#!/usr/bin/env bash
# Checks that the C and C++ sources are formatted as the repository's
# .clang-format says (Google, 100 columns), with clang-format 14 exactly:
# another version formats some constructs differently, and a check that
# depends on whoever runs it would fail at random. Fails (exit 1) naming each
# file clang-format would change, with its first changes; tools/format-tree.sh
# applies the same formatting.
#   tools/check-format.sh            every tracked *.h/*.cc/*.c under src/ test/ tools/ bench/
#   tools/check-format.sh PATH...    these files, and the *.h/*.cc/*.c under these directories
#   tools/check-format.sh --list     print the file set and exit
# CLANG_FORMAT overrides the binary (default clang-format-14). Exit 77 (a
# skipped ctest) when it is not installed: scripts/install-deps.sh installs it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
clang_format=${CLANG_FORMAT:-clang-format-14}
dirs=(src test tools bench)

# The default file set: tracked files in a git tree (so scratch files and
# build trees are never formatted), every matching file otherwise.
tree_files() {
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$root" ls-files -z -- "${dirs[@]/%//*.h}" "${dirs[@]/%//*.cc}" "${dirs[@]/%//*.c}" |
      while IFS= read -r -d '' f; do if [ -f "$root/$f" ]; then printf '%s\0' "$f"; fi; done
  else
    for d in "${dirs[@]}"; do
      if [ -d "$root/$d" ]; then
        (cd "$root" && find "$d" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.c' \) -print0)
      fi
    done
  fi
}

path_files() {
  for p in "$@"; do
    if [ -d "$p" ]; then
      find "$p" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.c' \) -print0
    else
      printf '%s\0' "$p"
    fi
  done
}

list=0
if [ "${1:-}" = "--list" ]; then
  list=1
  shift
fi
for p in "$@"; do
  if [ ! -e "$p" ]; then
    echo "check-format: no such file or directory: $p" >&2
    exit 2
  fi
done
files=()
if [ $# -gt 0 ]; then
  mapfile -d '' files < <(path_files "$@")
else
  cd "$root"  # the tree's files are named relative to it
  mapfile -d '' files < <(tree_files | sort -z)
fi
if [ $list -eq 1 ]; then
  printf '%s\n' "${files[@]}"
  exit 0
fi
if ! command -v "$clang_format" >/dev/null; then
  echo "check-format: $clang_format not found; install it with scripts/install-deps.sh" >&2
  exit 77
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check-format: no C or C++ files to check" >&2
  exit 0
fi

# Eight files per clang-format, two at a time, each batch's diagnostics in
# its own file (--dry-run -Werror: at most 3 changes shown per file).
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%s\0' "${files[@]}" |
  OUT=$out xargs -0 -n 8 -P 2 sh -c '"$0" "$@" >"$(mktemp -p "$OUT")" 2>&1; exit 0' \
    "$clang_format" "--style=file:$root/.clang-format" --dry-run -Werror --ferror-limit=3
report=$out/report
find "$out" -type f ! -name report -exec cat {} + >"$report"
bad=$(grep -oE '^[^:]+:[0-9]+:[0-9]+: error: code should be clang-formatted' "$report" |
        cut -d: -f1 | sort -u || :)
other=$(grep -E '^[^:]+:[0-9]+:[0-9]+: error:|^error:' "$report" | grep -v 'code should be clang-formatted' || :)
if [ -n "$other" ]; then
  cat "$report" >&2
  echo "check-format: $clang_format failed" >&2
  exit 2
fi
if [ -n "$bad" ]; then
  cat "$report"
  n=$(printf '%s\n' "$bad" | wc -l)
  echo "check-format: $n of ${#files[@]} files are not formatted:" >&2
  printf '  %s\n' $bad >&2
  echo "check-format: format them with tools/format-tree.sh (or $clang_format -i FILE)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says ($("$clang_format" --version | sed 's/.*version //'))"
