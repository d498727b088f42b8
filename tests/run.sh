#!/usr/bin/env bash
# Quickstart: set everything up (Python env, torch, build) and run the test suite.
set -euo pipefail
source "$(dirname "$0")/../.ci/setup.sh"
"$PY" -m pytest tests -q "$@"
