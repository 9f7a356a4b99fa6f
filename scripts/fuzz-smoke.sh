#!/usr/bin/env bash
# Runs every native Go fuzz target in the workspace for a short time on top of
# its seed corpus, one target at a time (go test -fuzz takes one package and
# one target per run). Usage: scripts/fuzz-smoke.sh [duration, default 5s]
# FUZZ_MATCH: only targets whose name matches this extended regex.
# FUZZ_WORKERS: fuzzing processes per target (-parallel; default GOMAXPROCS).
# FUZZ_SUMMARY: append one tab-separated line per target to this file:
#   module, package, target, duration, execs, new interesting inputs, result.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-5s}
match=${FUZZ_MATCH:-.}
workers=()
[ -n "${FUZZ_WORKERS:-}" ] && workers=(-test.parallel="$FUZZ_WORKERS")
count=0
failed=0
# summarize appends the last progress line's totals of a target's log.
summarize() {
	[ -n "${FUZZ_SUMMARY:-}" ] || return 0
	local last execs interesting
	last=$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$2" | tail -1 || true)
	execs=$(sed -E 's/.*execs: ([0-9]+).*/\1/' <<<"$last")
	interesting=$(sed -E 's/.*new interesting: ([0-9]+).*/\1/' <<<"$last")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$module" "$pkg" "$name" "$fuzztime" "${execs:-?}" "${interesting:-?}" "$1" >>"$FUZZ_SUMMARY"
}
# fuzz_one fuzzes $name in $module/$pkg for $fuzztime. A duration is not
# given to the test binary as -test.fuzztime: Go 1.26's fuzzing coordinator
# can report its own -fuzztime deadline as a failure ("context deadline
# exceeded", no failing input; go.dev/issue/75804, fixed in Go 1.27), which
# failed CI for FuzzAppendString twice in a row. The binary, built with the
# same coverage instrumentation go test -fuzz uses, fuzzes until timeout(1)
# interrupts it instead: the path of ^C in a terminal, which the testing
# package reports as a clean end. A count (e.g. 10000x) has no deadline and
# is passed through. A finding still prints "Failing input written to" and
# fails the target.
fuzz_one() {
	local bin import
	bin=$(mktemp -d)/fuzz.test
	(cd "$module" && go test -c -fuzz="^${name}\$" -o "$bin" "$pkg") || { rm -rf "$(dirname "$bin")"; return 1; }
	import=$(cd "$module" && go list "$pkg")
	local args=(-test.run='^$' -test.fuzz="^${name}\$" -test.paniconexit0 -test.timeout=0
		-test.fuzzcachedir="$(go env GOCACHE)/fuzz/$import" ${workers[@]+"${workers[@]}"})
	local rc=0
	if [[ $fuzztime == *x ]]; then
		(cd "$module/$pkg" && "$bin" "${args[@]}" -test.fuzztime="$fuzztime") || rc=$?
	else
		# --preserve-status: the binary's own exit status, 0 after a clean
		# interrupt; -k: a binary that ignores the interrupt is killed.
		(cd "$module/$pkg" && timeout -s INT -k 60s --preserve-status "$fuzztime" "$bin" "${args[@]}") || rc=$?
	fi
	rm -rf "$(dirname "$bin")"
	return "$rc"
}
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
	grep -qE "$match" <<<"$name" || continue
	dir=$(dirname "$file")
	module=${dir%%/*}
	pkg="./${dir#"$module"/}"
	[ "$dir" = "$module" ] && pkg="."
	echo "== fuzz $module $pkg $name ($fuzztime)"
	log=$(mktemp)
	result=ok
	if ! fuzz_one 2>&1 | tee "$log"; then
		failed=$((failed + 1))
		result=FAILED
	fi
	summarize "$result" "$log"
	rm -f "$log"
	count=$((count + 1))
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' pkg gateway hub pylon | sort)
echo "fuzz smoke: $((count - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
