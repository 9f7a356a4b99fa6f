package dashboards

// pl filters pylon series (cluster and region are the scrape's target
// labels, see docs/operations.md); en filters the engines behind them,
// whose model label is model_name as in vLLM.
const (
	pl = `model=~"$model", region=~"$region", cluster=~"$cluster"`
	pc = `region=~"$region", cluster=~"$cluster"`
	en = `model_name=~"$model", region=~"$region", cluster=~"$cluster"`
)

// ClusterBalance is how the load spreads over clusters and regions and
// how close each cluster is to its capacity.
func ClusterBalance() Dashboard {
	return Dashboard{
		File: "cluster-balance.json", UID: "stargate-cluster-balance", Title: "stargate / Cluster balance",
		Description: "How requests spread over clusters and regions, and each cluster's load against its capacity, from the pylons (and the engines behind them).",
		Tags:        []string{"stargate", "pylon"},
		Vars: []Var{
			{Name: "model", Label: "Model", Metric: "pylon_model_output_tps", Field: "model"},
			{Name: "region", Label: "Region", Metric: "pylon_build_info", Field: "region"},
			{Name: "cluster", Label: "Cluster", Metric: `pylon_build_info{region=~"$region"}`, Field: "cluster"},
		},
		Rows: []Row{
			{Title: "Share", Panels: []Panel{
				{Title: "Share of requests per cluster", Unit: "percentunit", Stacked: true, Ratio: true,
					Description: "Each cluster's share of the requests its pylon completed. Session affinity makes shares follow the clusters' capacity weights, not an even split.",
					Queries:     []Query{q(`sum by (cluster) (rate(pylon_requests_total{status="complete", `+pl+`}[$__rate_interval])) / ignoring (cluster) group_left () sum(rate(pylon_requests_total{status="complete", `+pl+`}[$__rate_interval]))`, "{{cluster}}")}},
				{Title: "Share of requests per region", Unit: "percentunit", Stacked: true, Ratio: true,
					Description: "The same share summed per region.",
					Queries:     []Query{q(`sum by (region) (rate(pylon_requests_total{status="complete", `+pl+`}[$__rate_interval])) / ignoring (region) group_left () sum(rate(pylon_requests_total{status="complete", `+pl+`}[$__rate_interval]))`, "{{region}}")}},
				{Title: "Hub requests per backend", Unit: "reqps", Stacked: true,
					Description: "Requests the hubs answered per second, by the backend (pylon) that served them, as the hubs count them.",
					Queries:     []Query{q(`sum by (inference_server_id) (rate(stargate_requests_total{inference_server_id!="", model=~"$model"}[$__rate_interval]))`, "{{inference_server_id}}")}},
				{Title: "Affinity inside clusters: backend and engine picks", Unit: "ops", Stacked: true,
					Description: "How the hub picks a backend (pylon) inside the chosen cluster and how each pylon picks an engine, by outcome: preferred (the session key's first choice by rendezvous hash), spilled (its first choice was full, above the load bound or failed, so another took it: that session's cache is split), no_key (a request without a session key, placed by load). Counted only where there is a choice (several backends, several engines). A rising spilled share means the clusters' places are unevenly loaded or the load factor is too tight.",
					Queries: []Query{
						q(`sum by (outcome) (rate(stargate_backend_affinity_picks_total{model=~"$model"}[$__rate_interval]))`, "hub backend {{outcome}}"),
						q(`sum by (outcome) (rate(pylon_engine_affinity_picks_total{`+pc+`}[$__rate_interval]))`, "pylon engine {{outcome}}"),
					}},
			}},
			{Title: "Load against capacity", Panels: []Panel{
				{Title: "Requests in flight per cluster", Unit: "short", Stacked: true,
					Description: "Requests each pylon is relaying now (connecting, in prefill or decoding). Compare with the engines' slots (max_engine_concurrency in the hub's /debug/state): a cluster at its slots makes the hub wait or fall back.",
					Queries:     []Query{q(`sum by (cluster) (pylon_requests_inflight{`+pl+`})`, "{{cluster}}")}},
				{Title: "Requests in prefill per cluster", Unit: "short", Stacked: true,
					Description: "Requests in input_processing (prefill), the phase that competes for the engine's prefill capacity and that the hub's queue estimate is about.",
					Queries:     []Query{q(`sum by (cluster) (pylon_requests_state{state="input_processing", `+pl+`})`, "{{cluster}}")}},
				{Title: "Output throughput against its maximum", Unit: "short",
					Description: "Published output tokens per second (solid) and the highest rate seen (max): a cluster running at its max is at capacity.",
					Queries: []Query{
						q(`sum by (cluster) (pylon_model_output_tps{`+pl+`})`, "{{cluster}}"),
						q(`sum by (cluster) (pylon_model_max_output_tps{`+pl+`})`, "{{cluster}} max"),
					}},
				{Title: "Input throughput per cluster", Unit: "short",
					Description: "last_mean_input_tps: prefill tokens per second the pylon measured and publishes; the hub's TTFT estimate divides queued input by it.",
					Queries:     []Query{q(`sum by (cluster) (pylon_model_last_mean_input_tps{`+pl+`})`, "{{cluster}}")}},
				{Title: "Queued input tokens per cluster", Unit: "short",
					Description: "Input tokens of requests waiting or in prefill, as published to the hubs. Growing on one cluster while others are idle is the imbalance to look at.",
					Queries:     []Query{q(`sum by (cluster) (pylon_model_queued_input_tokens{`+pl+`})`, "{{cluster}}")}},
				{Title: "KV cache usage per cluster", Unit: "percentunit", Ratio: true,
					Description: "Used / capacity of the engines' KV cache from the last poll. Near 1 the engine evicts prefixes, and returning sessions lose their cache.",
					Queries:     []Query{q(`sum by (cluster) (pylon_model_kv_cache_used_tokens{`+pl+`}) / sum by (cluster) (pylon_model_kv_cache_capacity_tokens{`+pl+`})`, "{{cluster}}")}},
				{Title: "Engine prefix-cache hit ratio per cluster", Unit: "percentunit", Ratio: true,
					Description: "Prompt tokens the engines found in their prefix cache / tokens looked up (vLLM's counters, the mock engine's too).",
					Queries:     []Query{q(`sum by (cluster) (rate(vllm:prefix_cache_hits_total{`+en+`}[$__rate_interval])) / sum by (cluster) (rate(vllm:prefix_cache_queries_total{`+en+`}[$__rate_interval]))`, "{{cluster}}")}},
			}},
			{Title: "Connectivity and admission", Panels: []Panel{
				{Title: "Pylon: acceptance to engine headers (p50)", Unit: "s",
					Description: "Time from the pylon accepting a request to the engine's response headers, per cluster: the cluster-local part of the latency (queueing in the engine included).",
					Queries:     []Query{q(`histogram_quantile(0.5, sum by (le, cluster) (rate(pylon_request_time_to_response_headers_seconds_bucket{`+pl+`}[$__rate_interval])))`, "{{cluster}}")}},
				{Title: "Hub tunnels and engines up", Unit: "short",
					Description: "Per cluster: hubs whose registration stream the pylon holds open, and engines answering. A dip is a flap (alert StargatePylonFlapping) or a cluster the hubs cannot see.",
					Queries: []Query{
						q(`sum by (cluster) (pylon_registration_stream_connected{`+pc+`})`, "{{cluster}} hubs"),
						q(`sum by (cluster) (pylon_upstream_engine_up{`+pc+`})`, "{{cluster}} engines"),
					}},
				{Title: "Queue admission and retryable refusals", Unit: "ops",
					Description: "Pylon queue-admission results (accepted, rejected, ...) and the retryable answers sent back to the hub, by reason: queue_estimate_mismatch means the hub's estimate was too optimistic.",
					Queries: []Query{
						q(`sum by (result) (rate(pylon_queue_admission_decisions_total{`+pc+`}[$__rate_interval]))`, "admission {{result}}"),
						q(`sum by (reason) (rate(pylon_retryable_responses_total{`+pc+`}[$__rate_interval]))`, "retryable {{reason}}"),
					}},
				{Title: "Hub to cluster RTT", Unit: "s",
					Description: "Mean round trip of each hub's probes over the tunnels of a cluster's pylons, the value pulsar and the comparators see. One line per hub replica and cluster: a far region shows here, and a rise on one hub only points at its network path.",
					Queries:     []Query{q(`max by (cluster_id, instance) (stargate_cluster_rtt_seconds{model=~"$model", cluster_id=~"$cluster"})`, "{{cluster_id}} via {{instance}}")}},
				{Title: "Hub reservations per cluster", Unit: "short",
					Description: "Requests the hubs sent to a cluster that its pylons' statistics do not show yet, and their input tokens (added to the cluster's queued input until the next heartbeat). Reservations that stay high mean heartbeats are late or the cluster is absorbing a burst.",
					Queries: []Query{
						q(`sum by (cluster_id) (stargate_cluster_pending_reservations{model=~"$model", cluster_id=~"$cluster"})`, "{{cluster_id}} requests"),
						q(`sum by (cluster_id) (stargate_cluster_reserved_input_tokens{model=~"$model", cluster_id=~"$cluster"})`, "{{cluster_id}} input tokens"),
					}},
				{Title: "Backends marked full by a queue refusal", Unit: "short",
					Description: "Backends a hub counts as full because their pylon refused one of its requests as queue_estimate_mismatch (the hub thought a slot was free), until the backend's next registration; per hub replica. With several hubs, each counting only its own reservations, short blips under load are expected; a cluster marked on every hub most of the time is short of slots, or its heartbeats are slow.",
					Queries:     []Query{q(`sum by (cluster_id, instance) (stargate_cluster_refused_backends{model=~"$model", cluster_id=~"$cluster"})`, "{{cluster_id}} via {{instance}}")}},
			}},
		},
	}
}
