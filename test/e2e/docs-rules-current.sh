#!/usr/bin/env bash
# docs/rules.md is generated from rules/*.toml (`make rules-doc`); this test
# fails, with the diff, when someone changed a rule and not the reference.
set -euo pipefail
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$MLDOCTOR" rules --markdown >"$tmp"
if ! diff -u "$MLD_SOURCE_DIR/docs/rules.md" "$tmp"; then
  echo "docs/rules.md is out of date: run 'make rules-doc'" >&2
  exit 1
fi
echo "docs-rules-current: docs/rules.md matches rules/"
