#!/usr/bin/env bash
# compare.sh runs the same seeded workloads against every hub algorithm
# configuration of an arms file, restarting the whole stack (empty KV
# caches, fresh routing state) before each arm with scripts/bench-stack.sh,
# and prints one side-by-side table per suite.
#
#   scripts/compare.sh                                  # sessions and mixed, bench/compare/arms.json
#   SUITES=high-context,capacity@32 EXTRA="--scale 0.1 --workers 8" scripts/compare.sh
#
# Environment: BIN (./bin), ARMS (bench/compare/arms.json), SUITES
# (sessions,mixed), REPEATS (1), OUT (results/compare-<time>), EXTRA (more
# loadgen campaign flags, e.g. --duration 30s). Re-run with
# EXTRA=--resume and the same OUT to finish an interrupted campaign.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
ARMS=${ARMS:-bench/compare/arms.json}
SUITES=${SUITES:-sessions,mixed}
REPEATS=${REPEATS:-1}
OUT=${OUT:-results/compare-$(date -u +%Y%m%dT%H%M%SZ)}
STACK_DIR=${STACK_DIR:-/tmp/stargate-bench-stack}
export BIN STACK_DIR
for b in loadgen gateway hub pylon mock-engine; do
	[ -x "$BIN/$b" ] || { echo "compare: $BIN/$b is missing: run 'make build' first" >&2; exit 1; }
done
trap 'scripts/bench-stack.sh down >/dev/null 2>&1 || true' EXIT
# The first arm's hook writes the API key; create it up front so the
# campaign can read it.
mkdir -p "$STACK_DIR"
[ -f "$STACK_DIR/api-key" ] || echo "sk-bench-$RANDOM$RANDOM" >"$STACK_DIR/api-key"
# shellcheck disable=SC2086 # EXTRA is a list of flags
"$BIN/loadgen" campaign --suites "$SUITES" --arms "$ARMS" --out "$OUT" --repeats "$REPEATS" \
	--target gateway --url http://127.0.0.1:28080 --api-key-file "$STACK_DIR/api-key" \
	--before-arm 'scripts/bench-stack.sh up' --after-arm 'scripts/bench-stack.sh down' $EXTRA
echo "compare: results in $OUT (summary.md)"
