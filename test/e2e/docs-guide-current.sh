#!/usr/bin/env bash
# docs/guide.md shows real outputs of golden cases (test/golden); this test
# fails, with the diff, when an output shown there is no longer the golden
# one, when a command shown is not the case's, or when a seed or a command
# has no example (`make guide` rewrites the outputs from real runs).
set -euo pipefail
/usr/bin/python3 "$MLD_SOURCE_DIR/scripts/update-guide.py" --check
