#!/usr/bin/env bash
# bench-stack.sh starts or stops the benchmark stack on loopback: a gateway
# (embedded Olric, last-cluster tracking on), a hub with the lb-config in
# $ARM_LB_CONFIG (unset: the permissive default), and four clusters in two
# regions, each a pylon in front of a mock engine that names itself with
# --engine-id so clients behind the gateway see where a request ran.
#
# It is the --before-arm / --after-arm hook of `loadgen campaign`: every arm
# starts from fresh processes, so from empty KV caches and routing state.
#
#   scripts/bench-stack.sh up     # (re)start with $ARM_LB_CONFIG; prints the gateway URL
#   scripts/bench-stack.sh down   # stop everything it started
#
# Fixed loopback ports (28xxx) so the campaign can target the same URLs for
# every arm; STACK_DIR (default /tmp/stargate-bench-stack) holds pids, the
# API key and the tokens. Logs, versions.txt (every binary's build_info) and
# engines-before.txt / engines-after.txt (each engine's prefix-cache
# counters) go to RESULTS_DIR, the arm's results folder when loadgen runs
# the hook. Binaries come from BIN (default ./bin).
set -euo pipefail

BIN=${BIN:-bin}
DIR=${STACK_DIR:-/tmp/stargate-bench-stack}
MODEL=${MODEL:-dummy-model}
LOGS=${RESULTS_DIR:-$DIR}
mkdir -p "$DIR" "$LOGS"

# record writes, into $LOGS, what an arm's results need besides the
# report: every binary's build_info (from its metrics) and each engine's
# prefix-cache counters, under the label given ("before" or "after").
record() {
	local when=$1 out c port
	out="$LOGS/engines-$when.txt"
	: >"$out"
	for c in near-a:28101 near-b:28102 far-a:28103 far-b:28104; do
		port=${c#*:}
		curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null |
			grep -E '^(vllm:prefix_cache_(hits|queries)_total|mock_engine_kv_cache_(blocks|evicted_blocks_total))' |
			sed "s/^/${c%%:*} /" >>"$out" || true
	done
	if [ "$when" = before ]; then
		out="$LOGS/versions.txt"
		: >"$out"
		for c in hub:28090 gateway:28464 pylon-near-a:28121 engine-near-a:28101; do
			curl -fsS "http://127.0.0.1:${c#*:}/metrics" 2>/dev/null | grep -E '^[a-z_]+_build_info' | sed "s/^/${c%%:*} /" >>"$out" || true
		done
	fi
}

down() {
	[ -f "$DIR/hub.pid" ] && record after
	local f pid
	for f in "$DIR"/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$f"
	done
}

start() { # name, command...
	local name=$1
	shift
	"$@" >"$LOGS/$name.log" 2>&1 &
	echo $! >"$DIR/$name.pid"
}

wait_url() {
	for _ in $(seq 1 150); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-stack: $1 did not come up (logs in $LOGS)" >&2
	exit 1
}

up() {
	down
	[ -f "$DIR/api-key" ] || echo "sk-bench-$RANDOM$RANDOM" >"$DIR/api-key"
	[ -f "$DIR/gateway-token" ] || echo "gw-$RANDOM$RANDOM" >"$DIR/gateway-token"
	[ -f "$DIR/pylon-token" ] || echo "py-$RANDOM$RANDOM" >"$DIR/pylon-token"
	printf '%s bench\n' "$(cat "$DIR/api-key")" >"$DIR/api-keys"
	local lb=()
	[ -n "${ARM_LB_CONFIG:-}" ] && lb=(--lb-config-path "$ARM_LB_CONFIG")
	start hub "$BIN/hub" --listen 127.0.0.1:28000 --backend-listen 127.0.0.1:28071 --metrics-listen 127.0.0.1:28090 \
		--registration-token-file "$DIR/pylon-token" --gateway-token-file "$DIR/gateway-token" "${lb[@]}" --log-level warn
	wait_url http://127.0.0.1:28000/readyz
	# cluster: engine port, pylon port, pylon metrics port, region RTT (ms), cold/cached prefill tokens/s
	local c spec ep pp mp rtt cold cached
	for spec in near-a:28101:28111:28121:1:64000:133000 near-b:28102:28112:28122:1:32000:66000 \
		far-a:28103:28113:28123:25:48000:100000 far-b:28104:28114:28124:25:64000:133000; do
		IFS=: read -r c ep pp mp rtt cold cached <<<"$spec"
		start "engine-$c" "$BIN/mock-engine" --listen "127.0.0.1:$ep" --model-name "$MODEL" --engine-id "$c" \
			--prefill-tokens-per-s "$cold" --cached-prefill-tokens-per-s "$cached" --ttft-ms $((20 + rtt)) \
			--health-delay-ms "$rtt" --token-delay-ms 5 --max-concurrent-requests 16 --log-level warn
		wait_url "http://127.0.0.1:$ep/health"
		start "pylon-$c" "$BIN/pylon" --listen "127.0.0.1:$pp" --metrics-listen "127.0.0.1:$mp" \
			--stargate-address 127.0.0.1:28071 --upstream-http-base-url "http://127.0.0.1:$ep" --model-name "$MODEL" \
			--inference-server-id "pylon-$c" --cluster-id "$c" --auth-token-file "$DIR/pylon-token" \
			--initial-input-tps "$cold" --max-engine-concurrency 16 --kv-cache-stats-path /kv-cache/stats \
			--min-update-interval-ms 250 --log-level warn
	done
	start gateway env OLRIC_ENABLED=true OLRIC_BIND_ADDR=127.0.0.1 OLRIC_BIND_PORT=28320 \
		OLRIC_MEMBERLIST_BIND_ADDR=127.0.0.1 OLRIC_MEMBERLIST_BIND_PORT=28322 STARGATE_LAST_CLUSTER_ENABLED=true \
		"$BIN/gateway" --listen 127.0.0.1:28080 --metrics-listen 127.0.0.1:28464 --hub-url http://127.0.0.1:28000 \
		--hub-token-file "$DIR/gateway-token" --api-keys-file "$DIR/api-keys" --log-level warn
	wait_url http://127.0.0.1:28080/readyz
	local n=0
	for _ in $(seq 1 100); do
		n=$(curl -fsS http://127.0.0.1:28000/debug/state | grep -o '"cluster_id": *"[a-z-]*"' | sort -u | wc -l || true)
		[ "$n" -ge 4 ] && break
		sleep 0.1
	done
	[ "$n" -ge 4 ] || { echo "bench-stack: only $n clusters registered" >&2; exit 1; }
	record before
	echo "bench-stack up (${ARM_NAME:-default}, lb-config ${ARM_LB_CONFIG:-permissive}): gateway http://127.0.0.1:28080 api key in $DIR/api-key"
}

case ${1:-} in
up) up ;;
down) down ;;
*)
	echo "usage: $0 up|down" >&2
	exit 2
	;;
esac
