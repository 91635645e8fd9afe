#!/usr/bin/env bash
# Formats the C and C++ sources in place with clang-format 14 and the
# repository's .clang-format: the same files, binary and style that
# tools/check-format.sh (ctest -R format) checks, so after this the check
# passes. Run it from a clean tree and review the diff: regions that must
# keep their layout are fenced with `// clang-format off` / `on`.
#   tools/format-tree.sh             every tracked *.h/*.cc/*.c under src/ test/ tools/ bench/
#   tools/format-tree.sh PATH...     these files, and the *.h/*.cc/*.c under these directories
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "format-tree: $clang_format not found; install it with scripts/install-deps.sh" >&2
  exit 2
fi
if [ $# -eq 0 ]; then cd "$root"; fi
"$root/tools/check-format.sh" --list "$@" | tr '\n' '\0' |
  xargs -0 -n 8 -P 2 "$clang_format" "--style=file:$root/.clang-format" -i
echo "format-tree: formatted $("$root/tools/check-format.sh" --list "$@" | wc -l) files"
