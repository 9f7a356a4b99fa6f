package dashboards

// gw filters gateway series carrying function_id by the dashboard's
// variables; gwi filters the ones without it (per replica only).
const (
	gw  = `function_id=~"$function_id", instance=~"$instance"`
	gwi = `instance=~"$instance"`
)

// Gateway is the edge: traffic, latency, errors, rate limiting, the
// last-cluster store and the Olric cluster under it.
func Gateway() Dashboard {
	return Dashboard{
		File: "gateway.json", UID: "stargate-gateway", Title: "stargate / Gateway",
		Description: "The OpenAI edge: traffic, latency, errors by status, rate limiting, last-cluster lookups and writes, and the embedded Olric cluster.",
		Tags:        []string{"stargate", "gateway"},
		Vars: []Var{
			{Name: "function_id", Label: "Routing key (function_id)", Metric: "llm_api_gateway_http_requests_total", Field: "function_id"},
			{Name: "instance", Label: "Gateway replica", Metric: "gateway_build_info", Field: "instance"},
		},
		Rows: []Row{
			{Title: "Traffic", Panels: []Panel{
				{Title: "Requests per second by route", Unit: "reqps", Stacked: true,
					Description: "Requests answered per second, by API route (unknown = a path outside the API).",
					Queries:     []Query{q(`sum by (route) (rate(llm_api_gateway_http_requests_total{`+gw+`}[$__rate_interval]))`, "{{route}}")}},
				{Title: "Requests in flight", Unit: "short", Stacked: true,
					Description: "Requests the gateway is serving now (streams until their end), by route.",
					Queries:     []Query{q(`sum by (route) (llm_api_gateway_http_active_requests{`+gw+`})`, "{{route}}")}},
				{Title: "Tokens per second by type", Unit: "short",
					Description: "Tokens from the backends' usage reports: prompt, completion, and cached (prompt tokens the engine served from its prefix cache).",
					Queries:     []Query{q(`sum by (token_type) (rate(llm_api_gateway_llm_tokens_total{token_type=~"prompt|completion|cached", `+gw+`}[$__rate_interval]))`, "{{token_type}}")}},
			}},
			{Title: "Latency", Panels: []Panel{
				{Title: "Time to first token", Unit: "s",
					Description: "Request start to the first relayed event carrying output, streamed requests; p50 and p99.",
					Queries: []Query{
						q(`histogram_quantile(0.5, sum by (le) (rate(llm_api_gateway_stream_first_token_seconds_bucket{`+gw+`}[$__rate_interval])))`, "p50"),
						q(`histogram_quantile(0.99, sum by (le) (rate(llm_api_gateway_stream_first_token_seconds_bucket{`+gw+`}[$__rate_interval])))`, "p99"),
					}},
				{Title: "Hub response-head latency", Unit: "s",
					Description: "Request start to the hub's response headers: routing, waits, retries and the cluster's time to its first byte; p50 and p99.",
					Queries: []Query{
						q(`histogram_quantile(0.5, sum by (le) (rate(llm_api_gateway_upstream_request_duration_seconds_bucket{`+gw+`}[$__rate_interval])))`, "p50"),
						q(`histogram_quantile(0.99, sum by (le) (rate(llm_api_gateway_upstream_request_duration_seconds_bucket{`+gw+`}[$__rate_interval])))`, "p99"),
					}},
				{Title: "Request duration by route (p99)", Unit: "s",
					Description: "Request start to handler return, whole streams included, p99 per route.",
					Queries:     []Query{q(`histogram_quantile(0.99, sum by (le, route) (rate(llm_api_gateway_http_request_duration_seconds_bucket{`+gw+`}[$__rate_interval])))`, "{{route}}")}},
			}},
			{Title: "Errors", Panels: []Panel{
				{Title: "Responses that were not 2xx, by status", Unit: "reqps", Stacked: true,
					Description: "Non-2xx answers per second by status: 401 bad key, 404 unknown model, 429 rate limited, 502/504 hub unreachable or slow, 503 overloaded or shedding.",
					Queries:     []Query{q(`sum by (status) (rate(llm_api_gateway_http_requests_total{status!~"2..", `+gw+`}[$__rate_interval]))`, "{{status}}")}},
				{Title: "Server error ratio (5xx)", Unit: "percentunit", Ratio: true,
					Description: "Share of answers with a 5xx status. 0 when there are none.",
					Queries:     []Query{q(`(sum(rate(llm_api_gateway_http_requests_total{status=~"5..", `+gw+`}[$__rate_interval])) or vector(0)) / sum(rate(llm_api_gateway_http_requests_total{`+gw+`}[$__rate_interval]))`, "5xx share")}},
				{Title: "Hub answers by status", Unit: "reqps", Stacked: true,
					Description: "Requests sent to the hub per second by the hub's status (error = transport failure, no status).",
					Queries:     []Query{q(`sum by (status) (rate(llm_api_gateway_upstream_requests_total{`+gw+`}[$__rate_interval]))`, "{{status}}")}},
				{Title: "Hubs seen up and retries on another hub", Unit: "short",
					Description: "Per gateway replica, how many hub replicas are up by passive health (an exchange that failed before its response head marks a hub down for 1 s, doubling to 10 s), and per second the requests sent again to another hub by reason: connect (no connection) or exchange (the connection broke before the head). Retries in bursts follow a hub restart; a hub down on every gateway for long is lost or unreachable.",
					Queries: []Query{
						q(`sum by (instance) (llm_api_gateway_hub_up{`+gwi+`})`, "{{instance}} hubs up"),
						q(`sum by (reason) (rate(llm_api_gateway_hub_retries_total{`+gwi+`}[$__rate_interval]))`, "retries {{reason}} /s"),
					}},
				{Title: "Streams by how they ended", Unit: "reqps", Stacked: true,
					Description: "Relayed streams per second: completed, canceled (the client left) or error (the stream broke after its head).",
					Queries:     []Query{q(`sum by (status) (rate(llm_api_gateway_stream_duration_seconds_count{`+gw+`}[$__rate_interval]))`, "{{status}}")}},
				{Title: "API key checks by result", Unit: "reqps", Stacked: true,
					Description: "Client key checks per second: ok, missing or invalid. A rise of invalid is a client with a bad or revoked key.",
					Queries:     []Query{q(`sum by (result) (rate(llm_api_gateway_auth_requests_total{`+gwi+`}[$__rate_interval]))`, "{{result}}")}},
			}},
			{Title: "Rate limiting", Panels: []Panel{
				{Title: "Rate-limit decisions", Unit: "reqps", Stacked: true,
					Description: "Admission decisions per second by result and the dimension that limited (requests or tokens per minute). Recorded only for models with a limit in the model config.",
					Queries:     []Query{q(`sum by (result, dimension) (rate(llm_api_gateway_rate_limit_decisions_total{`+gwi+`}[$__rate_interval]))`, "{{result}} {{dimension}}")}},
				{Title: "Share of requests rate limited", Unit: "percentunit", Ratio: true,
					Description: "limited / all decisions. Alert StargateRateLimitRejectingTooMuch fires above 20 % for 15 minutes.",
					Queries:     []Query{q(`(sum(rate(llm_api_gateway_rate_limit_decisions_total{result="limited", `+gwi+`}[$__rate_interval])) or vector(0)) / sum(rate(llm_api_gateway_rate_limit_decisions_total{`+gwi+`}[$__rate_interval]))`, "limited share")}},
				{Title: "Rate-limit store errors", Unit: "ops",
					Description: "Store calls that failed or timed out, by operation (reserve, settle). Each one admitted a request unchecked (fail open) or refused it with 503 (fail closed).",
					Queries:     []Query{q(`sum by (op, kind) (rate(llm_api_gateway_rate_limit_store_errors_total{`+gwi+`}[$__rate_interval]))`, "{{op}} {{kind}}")}},
				{Title: "Rate-limit checks answered locally", Unit: "percentunit", Ratio: true,
					Description: "local / all checks (RATE_LIMIT_MODE=local, the default; no data with exact): the share admitted or refused from the replica's own view without a store round trip. Near 1 under steady traffic; a first use of a counter, a counter idle for a sync round or a request past the replica's share goes to the store.",
					Queries:     []Query{q(`sum(rate(llm_api_gateway_rate_limit_checks_total{path="local", `+gwi+`}[$__rate_interval])) / sum(rate(llm_api_gateway_rate_limit_checks_total{`+gwi+`}[$__rate_interval]))`, "local share")}},
				{Title: "Rate-limit sync round duration", Unit: "s",
					Description: "Duration of one reconciliation round with the store (RATE_LIMIT_MODE=local, the default; no data with exact), p50 and p99. The over-admission bound grows with interval + round time: a p99 near RATE_LIMIT_SYNC_INTERVAL doubles it.",
					Queries: []Query{
						q(`histogram_quantile(0.5, sum by (le) (rate(llm_api_gateway_rate_limit_sync_duration_seconds_bucket{`+gwi+`}[$__rate_interval])))`, "p50"),
						q(`histogram_quantile(0.99, sum by (le) (rate(llm_api_gateway_rate_limit_sync_duration_seconds_bucket{`+gwi+`}[$__rate_interval])))`, "p99"),
					}},
			}},
			{Title: "Last-cluster hints", Panels: []Panel{
				{Title: "Last-cluster lookups by result", Unit: "ops", Stacked: true,
					Description: "Lookups per second: hit (a hint went to the hub), miss (new session or expired), timeout and error (the store was slow or failing: the request went without a hint), skipped (a session the gateway does not track).",
					Queries:     []Query{q(`sum by (result) (rate(llm_api_gateway_last_cluster_lookups_total{`+gwi+`}[$__rate_interval]))`, "{{result}}")}},
				{Title: "Last-cluster writes by result", Unit: "ops", Stacked: true,
					Description: "Writes after the hub's 2xx headers: success, error, timeout, skipped (the answer named no valid cluster).",
					Queries:     []Query{q(`sum by (result) (rate(llm_api_gateway_last_cluster_writes_total{`+gwi+`}[$__rate_interval]))`, "{{result}}")}},
				{Title: "Last-cluster lookup latency", Unit: "s",
					Description: "Duration of attempted lookups, p50 and p99. The lookup deadline (20 ms by default) caps it; a p99 at the deadline means lookups are timing out.",
					Queries: []Query{
						q(`histogram_quantile(0.5, sum by (le) (rate(llm_api_gateway_last_cluster_lookup_duration_seconds_bucket{`+gwi+`}[$__rate_interval])))`, "p50"),
						q(`histogram_quantile(0.99, sum by (le) (rate(llm_api_gateway_last_cluster_lookup_duration_seconds_bucket{`+gwi+`}[$__rate_interval])))`, "p99"),
					}},
				{Title: "Hint hit ratio", Unit: "percentunit", Ratio: true,
					Description: "hit / (hit + miss): the share of tracked sessions' requests that found their last cluster. Low while sessions are new; a drop with steady traffic means entries are lost (TTL, Olric member loss).",
					Queries:     []Query{q(`sum(rate(llm_api_gateway_last_cluster_lookups_total{result="hit", `+gwi+`}[$__rate_interval])) / sum(rate(llm_api_gateway_last_cluster_lookups_total{result=~"hit|miss", `+gwi+`}[$__rate_interval]))`, "hit ratio")}},
				{Title: "Last-cluster local cache", Unit: "percentunit", Ratio: true,
					Description: "The replica's cache in front of Olric: lookups answered locally / all cache lookups, and unchanged rewrites skipped / all writes. A low lookup ratio with steady sessions means they move between replicas.",
					Queries: []Query{
						q(`sum(rate(llm_api_gateway_last_cluster_cache_total{op="lookup", result="hit", `+gwi+`}[$__rate_interval])) / sum(rate(llm_api_gateway_last_cluster_cache_total{op="lookup", `+gwi+`}[$__rate_interval]))`, "lookup hit ratio"),
						q(`sum(rate(llm_api_gateway_last_cluster_cache_total{op="write", result="suppressed", `+gwi+`}[$__rate_interval])) / sum(rate(llm_api_gateway_last_cluster_cache_total{op="write", `+gwi+`}[$__rate_interval]))`, "suppressed write ratio"),
					}},
			}},
			{Title: "Olric", Panels: []Panel{
				{Title: "Olric members seen per replica", Unit: "short",
					Description: "Members of the embedded Olric cluster each gateway replica sees, against the number of replicas scraped. Every line should equal the replica count; a lower line is a split brain or a lost member (alert StargateOlricMembersBelowReplicas).",
					Queries: []Query{
						q(`llm_api_gateway_olric_cluster_members{`+gwi+`}`, "{{instance}}"),
						q(`count(llm_api_gateway_olric_cluster_members{`+gwi+`} > 0)`, "replicas with Olric"),
					}},
				{Title: "Olric DMap gets", Unit: "ops", Stacked: true,
					Description: "DMap gets served by each node that found (hit) or did not find (miss) their key: last-cluster lookups and rate-limit reads.",
					Queries: []Query{
						q(`sum by (instance) (rate(olric_dmap_get_hits_total{`+gwi+`}[$__rate_interval]))`, "{{instance}} hit"),
						q(`sum by (instance) (rate(olric_dmap_get_misses_total{`+gwi+`}[$__rate_interval]))`, "{{instance}} miss"),
					}},
				{Title: "Olric partitions owned", Unit: "short", Stacked: true,
					Description: "Partitions each node owns as primary; they should spread evenly over the members. A node owning all of them alone while others exist is split off.",
					Queries:     []Query{q(`olric_partitions_primary_owned{`+gwi+`}`, "{{instance}}")}},
				{Title: "Olric storage per DMap", Unit: "bytes",
					Description: "Memory of each DMap's storage tables on each node (allocated), of its live entries (in use) and of deleted or overwritten entries (garbage). Allocated should rise between compactions (every 10 minutes) and fall back at each; a line that only rises is storage that is never reclaimed.",
					Queries: []Query{
						q(`sum by (instance, dmap) (olric_storage_allocated_bytes{`+gwi+`})`, "{{instance}} {{dmap}} allocated"),
						q(`sum by (instance, dmap) (olric_storage_inuse_bytes{`+gwi+`})`, "{{instance}} {{dmap}} in use"),
						q(`sum by (instance, dmap) (olric_storage_garbage_bytes{`+gwi+`})`, "{{instance}} {{dmap}} garbage"),
					}},
				{Title: "Olric entries and tables per DMap", Unit: "short",
					Description: "Entries each DMap holds on each node (expired ones not yet dropped included) and the storage tables holding them. Entries level off at the live sessions and rate-limit windows; tables follow the entries after each compaction.",
					Queries: []Query{
						q(`sum by (instance, dmap) (olric_storage_entries{`+gwi+`})`, "{{instance}} {{dmap}} entries"),
						q(`sum by (instance, dmap) (olric_storage_tables{`+gwi+`})`, "{{instance}} {{dmap}} tables"),
					}},
			}},
		},
	}
}
