#!/usr/bin/env bash
# tools/charts/olric-netns.sh: runs bin/gateway three times with exactly the
# environment the gateway chart renders for the dev stack, each in a network
# namespace of its own standing in for a pod, and checks that the three form
# one Olric cluster through OLRIC_K8S_SERVICE discovery. It is the nearest
# this machine gets to the chart in a cluster (no Kubernetes here).
#
#   sudo tools/charts/olric-netns.sh [BIN_DIR]     (root: namespaces and mounts)
#
# What stands in for what:
#   pod IP          10.244.0.11-13 on veths joined by a bridge in a namespace
#                   of its own; nothing is routed to or from the host
#   downward API    @fieldRef:status.podIP in the render becomes that address
#   headless DNS    a hosts file naming the three addresses, bind-mounted
#                   over /etc/hosts in a private mount namespace per "pod"
#                   (with the pure-Go resolver, which returns every line)
#   Secret files    temporary files (the key file, the hub token, the model config)
#
# Passes when every gateway answers /readyz 200 and reports 3 Olric members.
# Prints each gateway's RSS and heap. Removes every namespace and process it
# made, also on failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/bin}
HELM=${HELM:-$bin/helm}
CHARTCHECK=${CHARTCHECK:-$bin/chartcheck}
[ "$(id -u)" = 0 ] || { echo "olric-netns: needs root (network namespaces, mounts)" >&2; exit 1; }
for t in ip unshare curl "$HELM" "$CHARTCHECK" "$bin/gateway"; do
	command -v "$t" >/dev/null || { echo "olric-netns: $t not found" >&2; exit 1; }
done

work=$(mktemp -d)
ns=sg-olric-$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	for n in "$ns-sw" "$ns-1" "$ns-2" "$ns-3"; do ip netns del "$n" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

"$HELM" template gateway "$root/charts/gateway" --namespace stargate -f "$root/deploy/dev-stack/gateways/gateway.yaml" |
	"$CHARTCHECK" env-values -all gateway >"$work/env"
service=$(sed -n 's/^OLRIC_K8S_SERVICE=//p' "$work/env")
[ -n "$service" ] || { echo "olric-netns: the render sets no OLRIC_K8S_SERVICE" >&2; exit 1; }

printf 'sk-netns test\n' >"$work/keys"
printf 'netns-token\n' >"$work/token"
printf '{"demo-model":{"max_wait_ms":10000}}\n' >"$work/model.json"
printf '127.0.0.1 localhost\n' >"$work/hosts"
# The chart mounts a generated shared secret; every node needs the same one.
printf 'netns-olric-shared-secret-0123456789abcdefghij\n' >"$work/olric-secret"

ip netns add "$ns-sw"
ip -n "$ns-sw" link add br0 type bridge
ip -n "$ns-sw" link set br0 up
for i in 1 2 3; do
	addr=10.244.0.1$i
	ip netns add "$ns-$i"
	ip link add "sgv$i-$$" netns "$ns-$i" type veth peer name "port$i" netns "$ns-sw"
	ip -n "$ns-sw" link set "port$i" master br0 up
	ip -n "$ns-$i" addr add "$addr/24" dev "sgv$i-$$"
	ip -n "$ns-$i" link set "sgv$i-$$" up
	ip -n "$ns-$i" link set lo up
	echo "$addr $service" >>"$work/hosts"
done

for i in 1 2 3; do
	addr=10.244.0.1$i
	mapfile -t env < <(sed -e "s/=@fieldRef:status.podIP$/=$addr/" \
		-e "s|=/etc/stargate/api-keys/keys$|=$work/keys|" \
		-e "s|=/etc/stargate/hub-token/token$|=$work/token|" \
		-e "s|=/etc/stargate/model-config/model-config.json$|=$work/model.json|" \
		-e "s|=/etc/stargate/olric-auth/secret$|=$work/olric-secret|" "$work/env")
	ip netns exec "$ns-$i" env -i PATH=/usr/bin:/bin GODEBUG=netdns=go "${env[@]}" \
		unshare --mount --propagation private sh -c "mount --bind '$work/hosts' /etc/hosts && exec '$bin/gateway'" \
		>"$work/gateway-$i.log" 2>&1 &
	pids+=($!)
done

ok=0
for i in 1 2 3; do
	addr=10.244.0.1$i
	members=""
	for _ in $(seq 1 60); do
		if [ "$(ip netns exec "$ns-$i" curl -s -o /dev/null -w '%{http_code}' "http://$addr:8080/readyz")" = 200 ]; then
			members=$(ip netns exec "$ns-$i" curl -s "http://$addr:9464/metrics" | sed -n 's/^llm_api_gateway_olric_cluster_members //p')
			[ "$members" = 3 ] && break
		fi
		sleep 0.5
	done
	pid=${pids[$((i - 1))]}
	rss=$(awk '/VmRSS/ {print $2 " " $3}' "/proc/$pid/status" 2>/dev/null || echo "?")
	heap=$(ip netns exec "$ns-$i" curl -s "http://$addr:9464/metrics" | awk '/^go_memstats_heap_inuse_bytes/ {printf "%.1f MiB", $2 / 1048576}')
	echo "gateway $i ($addr): ready, Olric members ${members:-?}, RSS $rss, heap in use $heap"
	[ "$members" = 3 ] && ok=$((ok + 1))
done
if [ "$ok" != 3 ]; then
	echo "olric-netns: FAILED: not every gateway joined a 3-member cluster; logs:" >&2
	tail -n 5 "$work"/gateway-*.log >&2
	exit 1
fi
echo "olric-netns: passed: 3 gateways, one Olric cluster, from the chart's env"
