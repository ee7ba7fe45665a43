#!/usr/bin/env bash
# tests/chaos/run.sh — the randomized fault checker (tests/chaos/README.md):
#
#   bash tests/chaos/run.sh                  # the fixed seeds of seeds.txt
#   bash tests/chaos/run.sh --seed 17        # one seed
#   bash tests/chaos/run.sh --minutes 30     # a soak
#
# Arguments go to chaos.py; binaries come from $OUTBOXD_BUILD (default
# build/). Ends with "chaos: N passed, N failed".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec /usr/bin/python3 tests/chaos/chaos.py "$@"
