package dashboards

// hb filters hub series by routing target; hba adds the algorithm.
const (
	hb  = `routing_key=~"$routing_key", model=~"$model"`
	hba = hb + `, algorithm=~"$algorithm"`
)

// HubRouting is the hub's routing: decisions, waits, retries, durations,
// admission and session classification.
func HubRouting() Dashboard {
	return Dashboard{
		File: "hub-routing.json", UID: "stargate-hub-routing", Title: "stargate / Hub routing",
		Description: "How the hubs route: decisions by algorithm and selection, waits, retries, routing duration, admission rejections and session selections by state.",
		Tags:        []string{"stargate", "hub"},
		Vars: []Var{
			{Name: "model", Label: "Model", Metric: "stargate_active_inference_servers", Field: "model"},
			{Name: "routing_key", Label: "Routing key", Metric: "stargate_active_inference_servers", Field: "routing_key"},
			{Name: "algorithm", Label: "Algorithm", Metric: "stargate_routing_selections_total", Field: "algorithm"},
		},
		Rows: []Row{
			{Title: "Decisions", Panels: []Panel{
				{Title: "Selections by algorithm and rank", Unit: "ops", Stacked: true,
					Description: "Clusters chosen per second: primary = the algorithm's first choice, fallback = a lower-ranked cluster because the first could not take the request.",
					Queries:     []Query{q(`sum by (algorithm, selection) (rate(stargate_routing_selections_total{`+hba+`}[$__rate_interval]))`, "{{algorithm}} {{selection}}")}},
				{Title: "Fallback share by algorithm", Unit: "percentunit", Ratio: true,
					Description: "fallback / all selections. Rising with load is expected (the first choice is full); rising without load means a preferred cluster is unhealthy or too slow.",
					Queries:     []Query{q(`sum by (algorithm) (rate(stargate_routing_selections_total{selection="fallback", `+hba+`}[$__rate_interval])) / sum by (algorithm) (rate(stargate_routing_selections_total{`+hba+`}[$__rate_interval]))`, "{{algorithm}}")}},
				{Title: "Session selections by state", Unit: "ops", Stacked: true,
					Description: "Selections of requests classified by last_cluster_affinity: new (no hint), returning (hinted cluster is a candidate), stale (hinted cluster is not), each primary or fallback. returning+fallback is a session escaping its cluster.",
					Queries:     []Query{q(`sum by (session_state, selection) (rate(stargate_routing_session_selections_total{`+hba+`}[$__rate_interval]))`, "{{session_state}} {{selection}}")}},
				{Title: "KV free-token fallbacks", Unit: "ops",
					Description: "Selections that skipped a higher-ranked cluster for lack of free KV cache (consider_kv_free_tokens). Steady non-zero: the preferred clusters' KV caches are full.",
					Queries:     []Query{q(`sum by (algorithm) (rate(stargate_routing_kv_free_token_fallback_selections_total{`+hba+`}[$__rate_interval]))`, "{{algorithm}}")}},
			}},
			{Title: "Waits and duration", Panels: []Panel{
				{Title: "Routing duration", Unit: "s",
					Description: "Start of the routing loop to the first backend pick: microseconds without a wait; waits (affinity wait, TTFT buckets, a full fleet) add up to the request's max wait. p50, p90, p99. The buckets end at 100 ms: a quantile drawn at 100 ms means 100 ms or more.",
					Queries: []Query{
						q(`histogram_quantile(0.5, sum by (le) (rate(stargate_routing_duration_seconds_bucket{`+hb+`}[$__rate_interval])))`, "p50"),
						q(`histogram_quantile(0.9, sum by (le) (rate(stargate_routing_duration_seconds_bucket{`+hb+`}[$__rate_interval])))`, "p90"),
						q(`histogram_quantile(0.99, sum by (le) (rate(stargate_routing_duration_seconds_bucket{`+hb+`}[$__rate_interval])))`, "p99"),
					}},
				{Title: "Share of requests that waited", Unit: "percentunit", Ratio: true,
					Description: "Share of routing loops longer than 10 ms, i.e. that waited for a cluster at least once (a pass without a wait takes well under 1 ms).",
					Queries:     []Query{q(`1 - sum(rate(stargate_routing_duration_seconds_bucket{le="0.01", `+hb+`}[$__rate_interval])) / sum(rate(stargate_routing_duration_seconds_count{`+hb+`}[$__rate_interval]))`, "waited > 10 ms")}},
				{Title: "Response-head latency by backend (p99)", Unit: "s",
					Description: "Request start to the upstream response head, per backend (pylon): routing, the tunnel round trip and the engine's time to its first byte.",
					Queries:     []Query{q(`histogram_quantile(0.99, sum by (le, inference_server_id) (rate(stargate_proxy_duration_seconds_bucket{`+hb+`}[$__rate_interval])))`, "{{inference_server_id}}")}},
			}},
			{Title: "Outcomes and retries", Panels: []Panel{
				{Title: "Requests by final status", Unit: "reqps", Stacked: true,
					Description: "Final outcome of every proxied request: 2xx served, 404 no cluster registered for the model, 429 passed through, 502 retries exhausted on tunnel failures, 503 overloaded or admission, 499 the client left.",
					Queries:     []Query{q(`sum by (status) (rate(stargate_requests_total{`+hb+`}[$__rate_interval]))`, "{{status}}")}},
				{Title: "Upstream attempts by result", Unit: "ops", Stacked: true,
					Description: "Every attempt on a backend: upstream_<status> (the pylon answered) or proxy_502/proxy_499 (tunnel failure, client cancel). More attempts than requests means retries.",
					Queries:     []Query{q(`sum by (result) (rate(stargate_proxy_attempts_total{`+hb+`}[$__rate_interval]))`, "{{result}}")}},
				{Title: "Retries by reason", Unit: "ops", Stacked: true,
					Description: "Retries per second: queue_estimate_mismatch (a pylon's queue was longer than the hub thought; a sibling backend is tried), connect_failover (tunnel failure), a pylon reason, retryable_upstream_response.",
					Queries:     []Query{q(`sum by (reason) (rate(stargate_proxy_retries_total{`+hb+`}[$__rate_interval]))`, "{{reason}}")}},
				{Title: "Retries exhausted", Unit: "ops",
					Description: "Requests that ran out of retries, by reason (retry budget, connect retries, no eligible backend, a pylon reason): their last answer went to the client.",
					Queries:     []Query{q(`sum by (reason) (rate(stargate_proxy_retry_exhausted_total{`+hb+`}[$__rate_interval]))`, "{{reason}}")}},
			}},
			{Title: "Admission and capacity", Panels: []Panel{
				{Title: "Admission rejections by reason", Unit: "ops", Stacked: true,
					Description: "Requests refused before any upstream: routing_capacity_unavailable (no cluster usable before the wait ran out, 503 overloaded_error), input_work_limit_exceeded and input_work_capacity_unavailable (max_input_work_seconds, 503 input_work_limit_exceeded).",
					Queries:     []Query{q(`sum by (reason) (rate(stargate_admission_rejections_total{`+hb+`}[$__rate_interval]))`, "{{reason}}")}},
				{Title: "Share of requests shed", Unit: "percentunit", Ratio: true,
					Description: "Admission rejections / all requests, per model. Alert StargateHubShedding fires above 5 % for 5 minutes.",
					Queries:     []Query{q(`(sum by (model) (rate(stargate_admission_rejections_total{`+hb+`}[$__rate_interval])) or sum by (model) (rate(stargate_requests_total{`+hb+`}[$__rate_interval])) * 0) / sum by (model) (rate(stargate_requests_total{`+hb+`}[$__rate_interval]))`, "{{model}}")}},
				{Title: "Active backends per model", Unit: "short",
					Description: "Backends (pylon registrations) each hub replica can route the model to. 0 on every replica: nothing can serve the model (alert StargateModelNoActiveCluster).",
					Queries:     []Query{q(`stargate_active_inference_servers{`+hb+`}`, "{{model}} {{instance}}")}},
				{Title: "Requests waiting for a model's backends", Unit: "short",
					Description: "Requests for a known model with no backend right now (its pylons or this hub restarting), waiting for one to register, and how such waits ended: appeared (served), timed_out (503 model_temporarily_unavailable with Retry-After), client_gone.",
					Queries: []Query{
						q(`sum by (model) (stargate_model_unavailable_waiting{`+hb+`})`, "{{model}} waiting"),
						q(`sum by (outcome) (rate(stargate_model_unavailable_waits_total{`+hb+`}[$__rate_interval]))`, "{{outcome}} /s"),
					}},
				{Title: "Waiting room by session class", Unit: "short",
					Description: "Requests waiting now for a cluster with room, by class (returning: a session whose last cluster is a candidate; other: new, stale or no session), and per second: refusals of a full room (--proxy-max-waiting-requests, 503 waiting_room_full), new waiters displaced by a returning session (503 shed_for_returning_session), and yields (a new request letting waiting returning sessions take a freed cluster first). Refusals or displacements mean the fleet is past its capacity.",
					Queries: []Query{
						q(`sum by (class) (stargate_routing_waiting_requests{`+hb+`})`, "{{class}} waiting"),
						q(`sum by (class) (rate(stargate_routing_waiting_room_refusals_total{`+hb+`}[$__rate_interval]))`, "{{class}} refused /s"),
						q(`sum (rate(stargate_routing_waiting_room_displacements_total{`+hb+`}[$__rate_interval]))`, "displaced /s"),
						q(`sum (rate(stargate_routing_returning_priority_yields_total{`+hb+`}[$__rate_interval]))`, "yields /s"),
					}},
			}},
			{Title: "Routing configuration", Panels: []Panel{
				{Title: "Active lb-config per replica", Unit: "short",
					Description: "The lb-config each hub replica routes with, by the first 12 hex digits of its file's SHA-256 (1 per replica and hash). Two hashes at once: the replicas disagree, as they do for up to a minute while a ConfigMap update reaches each pod; longer means a replica rejected the file or does not watch it.",
					Queries:     []Query{q(`max by (instance, hash) (stargate_lb_config_info{model=""})`, "{{instance}} {{hash}}")}},
				{Title: "lb-config reloads", Unit: "short",
					Description: "Reloads of lb-config (SIGHUP or a change of the watched file) by result: applied (a new config serves new requests), unchanged (same bytes), rejected (invalid: the old config keeps serving; the hub's log names the field). A replica whose last reload was rejected shows below as 0.",
					Queries: []Query{
						q(`sum by (result) (increase(stargate_lb_config_reloads_total[$__rate_interval]))`, "{{result}}"),
						q(`min by (instance) (stargate_lb_config_last_reload_successful)`, "{{instance}} last reload ok"),
					}},
			}},
			{Title: "Faults and trust", Panels: []Panel{
				{Title: "Backend error breakers", Unit: "short",
					Description: "Backends whose error breaker is not closed, per hub replica: half-open (one probe allowed) and open (no requests). A backend whose answers keep failing (5xx, broken streams, tunnel errors) is taken out of routing until a probe succeeds; the hub routes to it anyway when every backend's breaker is open.",
					Queries: []Query{
						q(`count by (instance) (stargate_backend_breaker_state == 1)`, "{{instance}} half-open"),
						q(`count by (instance) (stargate_backend_breaker_state == 2)`, "{{instance}} open"),
					}},
				{Title: "Breaker transitions", Unit: "ops",
					Description: "Breaker transitions per second by backend and new state. Opens that repeat on one backend: its engine is failing; look at the pylon's logs and the engine.",
					Queries:     []Query{q(`sum by (inference_server_id, to) (rate(stargate_backend_breaker_transitions_total[$__rate_interval]))`, "{{inference_server_id}} {{to}}")}},
				{Title: "Requests refused for lacking the gateway token", Unit: "reqps",
					Description: "401s on the hub's client listener: something reaches the hub directly instead of through the gateway (or a gateway has the wrong token).",
					Queries:     []Query{q(`sum by (instance) (rate(stargate_unauthorized_requests_total[$__rate_interval]))`, "{{instance}}")}},
			}},
		},
	}
}
