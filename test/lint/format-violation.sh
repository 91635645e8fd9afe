#!/usr/bin/env bash
# tools/check-format.sh on files outside the tree, so the `format` test is
# known to fail when it should: a badly formatted file fails naming the file,
# the same file after clang-format passes (the checker is not simply
# failing), and a directory argument checks the C/C++ files under it.
set -euo pipefail
src=${MLD_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
check=$src/tools/check-format.sh
clang_format=${CLANG_FORMAT:-clang-format-14}
command -v "$clang_format" >/dev/null || { echo "format-violation: no $clang_format" >&2; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0

cat >"$t/bad.cc" <<'CC'
#include <vector>
int   sum( const std::vector<int> &v ){int s=0;for(int x:v) s+=x;
return s;}
CC
cp "$t/bad.cc" "$t/good.cc"
"$clang_format" "--style=file:$src/.clang-format" -i "$t/good.cc"
mkdir "$t/dir"
cp "$t/bad.cc" "$t/dir/bad.h"
cp "$t/good.cc" "$t/dir/good.c"
echo 'not C' >"$t/dir/notes.txt"

expect() {  # name, wanted exit status, command output must contain (or "-")
  local name=$1 want=$2 needle=$3 rc=0
  shift 3
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$want" ] || { [ "$needle" != - ] && ! grep -qF -- "$needle" <<<"$out"; }; then
    printf 'FAIL %s: exit %d (want %d), wanted "%s" in:\n%s\n' "$name" "$rc" "$want" "$needle" "$out"
    fail=1
  else
    echo "ok   $name"
  fi
}
expect "badly formatted file fails" 1 "$t/bad.cc:2:" "$check" "$t/bad.cc"
expect "it is named in the summary" 1 "1 of 1 files are not formatted" "$check" "$t/bad.cc"
expect "formatted file passes" 0 "1 files formatted" "$check" "$t/good.cc"
expect "directory: only its bad file" 1 "$t/dir/bad.h" "$check" "$t/dir"
expect "directory: 2 C/C++ files" 1 "1 of 2 files" "$check" "$t/dir"
expect "missing file is an error" 2 "no such file" "$check" "$t/none.cc"
[ $fail -eq 0 ] && echo "format-violation: the checker catches a badly formatted file"
exit $fail
