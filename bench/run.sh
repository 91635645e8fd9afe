#!/usr/bin/env bash
# Runs every benchmark; figures go into docs/benchmarks.md by hand, with the
# command that produced them.
set -euo pipefail
cd "$(dirname "$0")/.."
bench/libs-vs-peers.py build/mldoctor
/usr/bin/python3 bench/logs-vs-peers.py build/mldoctor
/usr/bin/python3 bench/check-vs-collect-env.py build/mldoctor
bench/run-overhead.py build/mldoctor
