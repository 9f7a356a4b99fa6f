#!/usr/bin/env bash
# Measures the mock engine's non-streaming throughput at zero modelled latency
# with wrk on loopback, so later load tests know the mock is not their
# bottleneck. Installs wrk and curl from apt when absent. Bounded: one 3 s warm-up and
# one 10 s run against a process it starts and stops itself.
# Usage: scripts/bench-mock-http.sh [bin-dir]
set -euo pipefail
bin=${1:-bin}
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18090)
"$bin/mock-engine" --listen "127.0.0.1:$port" --ttft-ms 0 --token-delay-ms 0 \
	--prefill-tokens-per-s 0 --cached-prefill-tokens-per-s 0 --max-concurrent-requests 0 --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -f "$lua"' EXIT
lua=$(mktemp --suffix=.lua)
cat >"$lua" <<'LUA'
wrk.method = "POST"
wrk.body   = '{"model":"m","messages":[{"role":"user","content":"Hello, how are you today? Tell me something short."}]}'
wrk.headers["Content-Type"] = "application/json"
LUA
for _ in $(seq 50); do
	curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
	sleep 0.1
done
url="http://127.0.0.1:$port/v1/chat/completions"
wrk -t2 -c32 -d3s -s "$lua" "$url" >/dev/null
echo "== mock-engine, non-streaming chat, zero modelled latency, wrk -t2 -c32 -d10s (same 2 cores as the mock)"
wrk -t2 -c32 -d10s --latency -s "$lua" "$url"
