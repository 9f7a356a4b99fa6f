#!/usr/bin/env bash
# bench-spine.sh measures the latency the hub and pylon add to a request,
# against two yardsticks on the same machine: the mock engine called
# directly, and the same engine behind two bare Go reverse proxies
# (bin/baseline-proxy), the least any two HTTP hops cost here.
#
#   scripts/bench-spine.sh [bin-dir]          # 3 rounds, unpinned
#   PIN=1 ROUNDS=5 scripts/bench-spine.sh bin  # relays on CPU 1, engine and load tool on CPU 0
#
# Every round starts fresh processes (engine, two baseline-proxy hops, hub,
# pylon), warms each path up, then runs for each path, in a rotating
# order, a sequential row (hey -n 3000 -c 1) and a 1,000 req/s row
# (hey -z SECONDS -c 10 -q 100). The body is a 1,047-byte non-streaming
# /v1/completions request with 16 output tokens, every modelled delay of
# the engine at zero. The table gives the median over rounds of each
# row's p50 and p99 (hey reports 0.1 ms steps) and the CPU time per
# request of the relaying processes during the 1k row, from /proc.
#
# Environment: ROUNDS (3), SECONDS_1K (10), PIN (0; 1 pins the relays to
# CPU 1 with GOMAXPROCS=1 and the engine and hey to CPU 0, needs 2 CPUs).
# Installs hey and curl from apt when absent. Stops everything it started.
set -euo pipefail
bin=${1:-bin}
rounds=${ROUNDS:-3}
secs=${SECONDS_1K:-10}
pin=${PIN:-0}

need=()
command -v hey >/dev/null 2>&1 || need+=(hey)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
for b in mock-engine hub pylon baseline-proxy; do
	[ -x "$bin/$b" ] || { echo "bench-spine: $bin/$b is missing: run 'make build' first" >&2; exit 1; }
done
if [ "$pin" = 1 ] && [ "$(nproc)" -lt 2 ]; then
	echo "bench-spine: PIN=1 needs 2 CPUs" >&2
	exit 1
fi

work=$(mktemp -d)
pids=()
stop() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop; rm -rf "$work"' EXIT

printf '{"model":"m","max_tokens":16,"prompt":"%s"}' "$(head -c 1000 /dev/zero | tr '\0' a)" >"$work/body.json"
# Free loopback ports, below the ephemeral range so no client socket takes
# one between the check and the bind.
ports=()
p=21000
while [ ${#ports[@]} -lt 7 ]; do
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then ports+=("$p"); fi
	p=$((p + 1))
done
engine=${ports[0]} f1=${ports[1]} f2=${ports[2]} hubapi=${ports[3]} hubback=${ports[4]} pylonapi=${ports[5]} pylonmet=${ports[6]}

relay=() client=()
if [ "$pin" = 1 ]; then
	relay=(env GOMAXPROCS=1 taskset -c 1)
	client=(taskset -c 0)
fi

spawn() { # name, command...
	local name=$1
	shift
	"$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	echo $! >"$work/$name.pid"
}

up() {
	spawn engine "${client[@]}" "$bin/mock-engine" --listen "127.0.0.1:$engine" --ttft-ms 0 --token-delay-ms 0 \
		--prefill-tokens-per-s 0 --cached-prefill-tokens-per-s 0 --max-concurrent-requests 0 --log-level warn
	spawn floor1 "${relay[@]}" "$bin/baseline-proxy" --listen "127.0.0.1:$f1" --target "http://127.0.0.1:$engine"
	spawn floor2 "${relay[@]}" "$bin/baseline-proxy" --listen "127.0.0.1:$f2" --target "http://127.0.0.1:$f1"
	spawn hub "${relay[@]}" "$bin/hub" --listen "127.0.0.1:$hubapi" --backend-listen "127.0.0.1:$hubback" \
		--metrics-listen 127.0.0.1:0 --insecure-no-client-auth --insecure-no-registration-auth --log-level warn
	spawn pylon "${relay[@]}" "$bin/pylon" --stargate-address "127.0.0.1:$hubback" \
		--upstream-http-base-url "http://127.0.0.1:$engine" --model-name m --listen "127.0.0.1:$pylonapi" \
		--metrics-listen "127.0.0.1:$pylonmet" --insecure-no-auth --initial-input-tps 60000 --pylon-queue-mismatch-retry-enabled=false \
		--log-level warn
	local i code
	for i in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'x-model: m' -H 'x-input-tokens: 260' \
			-H 'x-request-id: warm' --data-binary "@$work/body.json" "http://127.0.0.1:$hubapi/v1/completions" || true)
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	echo "bench-spine: the hub did not route within 10 s (logs in $work)" >&2
	exit 1
}

ticks() { # utime+stime of the named processes, in clock ticks
	local n s=0
	for n in "$@"; do s=$((s + $(awk '{print $14+$15}' "/proc/$(cat "$work/$n.pid")/stat"))); done
	echo "$s"
}

hz=$(getconf CLK_TCK)
hubh=(-H 'x-request-id: r1' -H 'x-model: m' -H 'x-input-tokens: 260')
declare -A url relays
url[direct]="http://127.0.0.1:$engine/v1/completions"
url[floor]="http://127.0.0.1:$f2/v1/completions"
url[spine]="http://127.0.0.1:$hubapi/v1/completions"
relays[direct]="engine"
relays[floor]="floor1 floor2"
relays[spine]="hub pylon"

row() { # path, hey args... -> "p50_ms p99_ms ok"
	local path=$1 out
	shift
	local extra=()
	[ "$path" = spine ] && extra=("${hubh[@]}")
	out=$("${client[@]}" hey "$@" -m POST -D "$work/body.json" "${extra[@]}" "${url[$path]}")
	awk '/50%+ in/{p50=$3*1000} /99%+ in/{p99=$3*1000} /\[200\]/{ok=$2} END{printf "%.1f %.1f %d\n", p50, p99, ok}' <<<"$out"
}

results=$work/results
: >"$results"
order=(direct floor spine)
for r in $(seq "$rounds"); do
	up
	for path in "${order[@]}"; do
		"${client[@]}" hey -z 2s -c 10 -q 100 -m POST -D "$work/body.json" \
			$([ "$path" = spine ] && printf -- '-H x-request-id:w -H x-model:m -H x-input-tokens:260') \
			"${url[$path]}" >/dev/null
	done
	for path in "${order[@]}"; do
		read -r p50 p99 ok <<<"$(row "$path" -n 3000 -c 1)"
		echo "$r $path seq $p50 $p99 $ok -" >>"$results"
		# shellcheck disable=SC2086 # relays is a list of names
		t0=$(ticks ${relays[$path]})
		read -r p50 p99 ok <<<"$(row "$path" -z "${secs}s" -c 10 -q 100)"
		# shellcheck disable=SC2086
		t1=$(ticks ${relays[$path]})
		cpu=$(((t1 - t0) * 1000000 / hz / (ok > 0 ? ok : 1)))
		echo "$r $path 1k $p50 $p99 $ok $cpu" >>"$results"
		echo "bench-spine: round $r $path done" >&2
	done
	stop
	order=("${order[@]:1}" "${order[0]}")
done

echo "spine latency, median of $rounds rounds (PIN=$pin, load $(cut -d' ' -f1-3 /proc/loadavg)):"
echo
echo "| load | path | p50 ms | p99 ms | CPU µs/req of the relays (1k) |"
echo "| --- | --- | ---: | ---: | ---: |"
for load in seq 1k; do
	for path in direct floor spine; do
		awk -v l="$load" -v p="$path" '
			function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
				return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
			$2 == p && $3 == l { n++; p50[n] = $4; p99[n] = $5; cpu[n] = $7 }
			END { c = (l == "1k") ? sprintf("%d", median(cpu, n)) : "-"
				printf "| %s | %s | %.1f | %.1f | %s |\n", (l == "seq" ? "1 client, sequential" : "1,000 req/s"), p, median(p50, n), median(p99, n), c }' "$results"
	done
done
echo
echo "(direct: the engine's own CPU; floor: two baseline-proxy processes; spine: hub + pylon)"
