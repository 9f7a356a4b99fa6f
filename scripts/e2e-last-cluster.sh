#!/usr/bin/env bash
# e2e-last-cluster.sh reproduces the cache-thrash case last_cluster_affinity
# exists for, with real processes on loopback: a gateway (embedded Olric), a
# hub, and two clusters (a pylon and a mock engine each).
#
# For each algorithm (wait-and-widen, pulsar-wait-and-widen) and with the
# hub's last_cluster_affinity on and off:
#   1. find the session's rank-1 cluster A (a probe straight to the hub with
#      the session's affinity key);
#   2. saturate A with holder requests sent straight to the hub (the
#      session's affinity key, no hint), so A has no free engine slot;
#   3. send the session's first turn through the gateway: it overflows to B;
#   4. after the holders finish, send 10 follow-up turns through the gateway,
#      which now hints B. Flag on: all 10 must stay on B. Flag off: they go
#      back to A.
# Any mismatch exits non-zero saying which request went where and why it was
# expected elsewhere.
#
# Usage: scripts/e2e-last-cluster.sh [bin-dir]   (default ./bin; run `make build` first)
set -euo pipefail

BIN=${1:-bin}
MODEL=m
FOLLOW_UPS=10
WORK=$(mktemp -d "${TMPDIR:-/tmp}/e2e-last-cluster.XXXXXX")
PIDS=()

fail() {
	echo "e2e-last-cluster: FAIL: $*" >&2
	exit 1
}

cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "$rc" -ne 0 ]; then
		echo "---- logs of the failing arm ($WORK) ----" >&2
		for f in "$WORK"/arm/*.log; do
			[ -f "$f" ] || continue
			echo "==== $(basename "$f")" >&2
			tail -n 30 "$f" >&2
		done
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- prerequisites ----
command -v curl >/dev/null || fail "curl is required"
if command -v sha256sum >/dev/null; then
	sha256() { sha256sum | cut -d' ' -f1; }
elif command -v shasum >/dev/null; then
	sha256() { shasum -a 256 | cut -d' ' -f1; }
else
	fail "sha256sum or shasum is required"
fi
for b in mock-engine pylon hub gateway; do
	[ -x "$BIN/$b" ] || fail "$BIN/$b is missing: run 'make build' first"
done

# free_ports sets each named variable to a loopback port nobody listens on
# and nobody else in this run was given. It assigns in place rather than
# printing: $(...) would run it in a subshell, whose record of the ports
# already given is lost, so two services of one arm could get one port.
USED_PORTS=" "
free_ports() {
	local var p
	for var in "$@"; do
		p=
		for _ in $(seq 1 200); do
			# Below the kernel's ephemeral range (32768+), so no outgoing
			# connection of an earlier arm can hold the port.
			p=$((12000 + RANDOM % 20000))
			case "$USED_PORTS" in *" $p "*) p= && continue ;; esac
			if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
				break
			fi
			p=
		done
		[ -n "$p" ] || fail "no free port found"
		USED_PORTS="$USED_PORTS$p "
		printf -v "$var" '%s' "$p"
	done
}

start() { # name, then the command
	local name=$1
	shift
	"$@" >"$WORK/arm/$name.log" 2>&1 &
	PIDS+=($!)
}

wait_ready() { # url, what
	for _ in $(seq 1 150); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return; fi
		sleep 0.1
	done
	fail "$2 did not become ready at $1"
}

stop_all() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	PIDS=()
}

# engine_total prints how many requests an engine has served.
engine_total() {
	curl -fsS "$1/test-control" | grep -o '"count":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}

# served_by runs a command and prints the cluster whose engine served it,
# by the engines' request counters (requests here are sequential).
served_by() {
	local a0 b0 a1 b1
	a0=$(engine_total "$MOCK_A")
	b0=$(engine_total "$MOCK_B")
	if ! "$@" >/dev/null; then
		echo "an-error"
		return
	fi
	a1=$(engine_total "$MOCK_A")
	b1=$(engine_total "$MOCK_B")
	if [ $((a1 - a0)) -eq 1 ] && [ $((b1 - b0)) -eq 0 ]; then
		echo cluster-a
	elif [ $((b1 - b0)) -eq 1 ] && [ $((a1 - a0)) -eq 0 ]; then
		echo cluster-b
	else
		echo "unknown(a+$((a1 - a0)),b+$((b1 - b0)))"
	fi
}

# hub_chat sends one streamed chat straight to the hub, as the gateway would
# (the gateway token, the session's affinity key, no hint); extra args are
# curl arguments.
hub_chat() {
	curl -fsS -N -X POST "$HUB/v1/chat/completions" \
		-H "Authorization: Bearer $GATEWAY_TOKEN" -H 'Content-Type: application/json' \
		-H "x-request-id: e2e-hub-$RANDOM$RANDOM" -H "x-model: $MODEL" -H 'x-input-tokens: 16' \
		-H "x-cache-affinity-key: $AFFINITY_KEY" "$@" \
		-d "{\"model\":\"$MODEL\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"holder $RANDOM\"}]}"
}

# gateway_turn sends turn n of the session through the gateway.
gateway_turn() {
	curl -fsS -N -X POST "$GATEWAY/v1/chat/completions" \
		-H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' -H 'x-output-tokens: 4' \
		-d "{\"model\":\"$MODEL\",\"stream\":true,\"prompt_cache_key\":\"$SESSION\",\"messages\":[{\"role\":\"user\",\"content\":\"turn $1 of $SESSION\"}]}"
}

run_arm() { # algorithm, flag
	local alg=$1 flag=$2
	mkdir -p "$WORK/arm"
	rm -f "$WORK"/arm/*.log
	SESSION="e2e-$alg-$flag-$RANDOM"
	AFFINITY_KEY="mt:v1:session:$(printf %s "$SESSION" | sha256)"
	GATEWAY_TOKEN="gw-$RANDOM$RANDOM"
	API_KEY="sk-e2e-$RANDOM$RANDOM"
	printf '%s\n' "$GATEWAY_TOKEN" >"$WORK/gateway-token"
	printf 'reg-%s\n' "$RANDOM$RANDOM" >"$WORK/registration-token"
	printf '%s e2e\n' "$API_KEY" >"$WORK/api-keys"
	local group=''
	[ "$alg" = wait-and-widen ] && group='"cache_affinity_backend_selection_count":1,'
	printf '{"models":{"%s":{"algorithm":"%s",%s"cache_affinity_wait_ms":300,"last_cluster_affinity":%s}}}\n' \
		"$MODEL" "$alg" "$group" "$flag" >"$WORK/lb.json"

	local pma pmb hl hb hm gl gm ob om pal pam pbl pbm
	free_ports pma pmb hl hb hm gl gm ob om pal pam pbl pbm
	MOCK_A=http://127.0.0.1:$pma MOCK_B=http://127.0.0.1:$pmb
	HUB=http://127.0.0.1:$hl GATEWAY=http://127.0.0.1:$gl

	# Two engine slots per cluster, announced to the hub, so two holders
	# fill cluster A; 20 ms per token keeps the holders running ~4 s.
	for x in a b; do
		local port=$pma
		[ $x = b ] && port=$pmb
		start "mock-$x" "$BIN/mock-engine" --listen "127.0.0.1:$port" --model-name "$MODEL" \
			--max-concurrent-requests 2 --ttft-ms 5 --token-delay-ms 20 --log-level warn
	done
	start hub "$BIN/hub" --listen "127.0.0.1:$hl" --backend-listen "127.0.0.1:$hb" --metrics-listen "127.0.0.1:$hm" \
		--lb-config-path "$WORK/lb.json" --gateway-token-file "$WORK/gateway-token" \
		--registration-token-file "$WORK/registration-token" --log-level warn
	wait_ready "$MOCK_A/health" "mock engine a"
	wait_ready "$MOCK_B/health" "mock engine b"
	wait_ready "$HUB/readyz" hub
	start pylon-a "$BIN/pylon" --stargate-address "127.0.0.1:$hb" --upstream-http-base-url "$MOCK_A" --model-name "$MODEL" \
		--inference-server-id pylon-a --cluster-id cluster-a --listen "127.0.0.1:$pal" --metrics-listen "127.0.0.1:$pam" \
		--auth-token-file "$WORK/registration-token" --insecure-plaintext --initial-input-tps 50000 --max-engine-concurrency 2 --min-update-interval-ms 200 --log-level warn
	start pylon-b "$BIN/pylon" --stargate-address "127.0.0.1:$hb" --upstream-http-base-url "$MOCK_B" --model-name "$MODEL" \
		--inference-server-id pylon-b --cluster-id cluster-b --listen "127.0.0.1:$pbl" --metrics-listen "127.0.0.1:$pbm" \
		--auth-token-file "$WORK/registration-token" --insecure-plaintext --initial-input-tps 50000 --max-engine-concurrency 2 --min-update-interval-ms 200 --log-level warn
	start gateway env OLRIC_ENABLED=true OLRIC_BIND_ADDR=127.0.0.1 OLRIC_BIND_PORT="$ob" \
		OLRIC_MEMBERLIST_BIND_ADDR=127.0.0.1 OLRIC_MEMBERLIST_BIND_PORT="$om" STARGATE_LAST_CLUSTER_ENABLED=true \
		"$BIN/gateway" --listen "127.0.0.1:$gl" --metrics-listen "127.0.0.1:$gm" --hub-url "$HUB" \
		--hub-token-file "$WORK/gateway-token" --api-keys-file "$WORK/api-keys" --log-level warn
	wait_ready "$GATEWAY/readyz" gateway

	# Both clusters registered with their throughput (pulsar ranks only
	# clusters with a weight).
	local state
	for _ in $(seq 1 100); do
		state=$(curl -fsS "http://127.0.0.1:$hm/debug/state" || true)
		case "$state" in *cluster-a*cluster-b* | *cluster-b*cluster-a*) break ;; esac
		sleep 0.1
	done
	case "$state" in *cluster-a*cluster-b* | *cluster-b*cluster-a*) ;; *) fail "[$alg $flag] the clusters did not register" ;; esac
	sleep 0.5

	# 1. The session's rank-1 cluster.
	local home other
	home=$(served_by hub_chat -H 'x-output-tokens: 1')
	case "$home" in cluster-a) other=cluster-b ;; cluster-b) other=cluster-a ;; *) fail "[$alg $flag] probe served by $home" ;; esac

	# 2. Fill both engine slots of the home cluster.
	hub_chat -H 'x-output-tokens: 200' >/dev/null &
	local h1=$!
	sleep 0.2
	hub_chat -H 'x-output-tokens: 200' >/dev/null &
	local h2=$!
	sleep 0.5

	# 3. The session's first turn overflows.
	local first
	first=$(served_by gateway_turn 1)
	[ "$first" = "$other" ] || fail "[$alg last_cluster_affinity=$flag] turn 1 went to $first; expected $other because $home (its rank-1 cluster) was full of holder requests"
	wait "$h1" "$h2" || fail "[$alg $flag] a holder request failed"

	# 4. Follow-ups with the home cluster free again.
	local want=$home why="without the hint its affinity group is $home again, which has room"
	if [ "$flag" = true ]; then
		want=$other
		why="the gateway hints $other (its last cluster), which the hub promotes for a returning session"
	fi
	local n got
	for n in $(seq 2 $((FOLLOW_UPS + 1))); do
		got=$(served_by gateway_turn "$n")
		[ "$got" = "$want" ] || fail "[$alg last_cluster_affinity=$flag] turn $n went to $got; expected $want: $why"
	done
	echo "ok   $alg last_cluster_affinity=$flag: turn 1 overflowed $home -> $other; turns 2..$((FOLLOW_UPS + 1)) on $want"
	stop_all
}

for alg in wait-and-widen pulsar-wait-and-widen; do
	for flag in true false; do
		run_arm "$alg" "$flag"
	done
done
echo "e2e-last-cluster: PASS"
