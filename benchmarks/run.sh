#!/usr/bin/env bash
# Quickstart: set everything up (Python env, torch, build) and run the benchmarks.
# Arguments go to `python -m benchmarks` (try --help, --quick).
set -euo pipefail
source "$(dirname "$0")/../.ci/setup.sh"
"$PY" -m benchmarks "$@"
