package dashboards

// ss filters the gateway's session series; sh the hub's.
const (
	ss = `function_id=~"$function_id"`
	sh = `model=~"$model", algorithm=~"$algorithm"`
)

// Sessions is whether multi-turn sessions keep their KV cache: how many
// return, their cache hits and TTFT per class, and how often they escape
// their cluster and are followed.
func Sessions() Dashboard {
	return Dashboard{
		File: "sessions.json", UID: "stargate-sessions", Title: "stargate / Sessions",
		Description: "Multi-turn sessions: the returning share, prompt-cache hits and time to first token per session class (new, returning, stale), and sessions escaping their cluster and being followed.",
		Tags:        []string{"stargate", "sessions"},
		Vars: []Var{
			{Name: "function_id", Label: "Routing key (function_id)", Metric: "llm_api_gateway_session_requests_total", Field: "function_id"},
			{Name: "model", Label: "Model (hub)", Metric: "stargate_routing_session_selections_total", Field: "model"},
			{Name: "algorithm", Label: "Algorithm (hub)", Metric: "stargate_routing_session_selections_total", Field: "algorithm"},
		},
		Rows: []Row{
			{Title: "Who returns", Panels: []Panel{
				{Kind: Stat, Title: "Returning share", Unit: "percentunit", Ratio: true,
					Description: "Share of classified requests (new, returning, stale) that the hub classified returning: they carried the session's last cluster and it could serve them.",
					Queries:     []Query{q(`sum(rate(llm_api_gateway_session_requests_total{session_state="returning", `+ss+`}[$__rate_interval])) / sum(rate(llm_api_gateway_session_requests_total{session_state=~"new|returning|stale", `+ss+`}[$__rate_interval]))`, "returning")}},
				{Title: "Requests by session class", Unit: "reqps", Stacked: true,
					Description: "Requests per second by the hub's class: new (no hint), returning, stale (the hinted cluster cannot serve it now), none (the model's algorithm does not classify).",
					Queries:     []Query{q(`sum by (session_state) (rate(llm_api_gateway_session_requests_total{`+ss+`}[$__rate_interval]))`, "{{session_state}}")}},
				{Title: "Prompt tokens by class and cache", Unit: "short", Stacked: true,
					Description: "Prompt tokens per second by session class, served from the engine's prefix cache (hit) or prefilled (miss).",
					Queries:     []Query{q(`sum by (session_state, cache) (rate(llm_api_gateway_session_prompt_tokens_total{`+ss+`}[$__rate_interval]))`, "{{session_state}} {{cache}}")}},
			}},
			{Title: "Cache and time to first token per class", Panels: []Panel{
				{Title: "Prompt-cache hit ratio per class", Unit: "percentunit", Ratio: true,
					Description: "Prompt tokens served from the prefix cache / all prompt tokens, per class. Returning sessions should hit most of their prompt (85 to 90 % on the demo stack); a collapse is cache thrash (alert StargateReturningSessionCacheHitCollapsed).",
					Queries:     []Query{q(`sum by (session_state) (rate(llm_api_gateway_session_prompt_tokens_total{cache="hit", `+ss+`}[$__rate_interval])) / sum by (session_state) (rate(llm_api_gateway_session_prompt_tokens_total{`+ss+`}[$__rate_interval]))`, "{{session_state}}")}},
				{Title: "Time to first token per class (p50)", Unit: "s",
					Description: "Median request start to first output token at the gateway, per class. With long prompts, returning requests are faster than new ones: their prefill is mostly cached.",
					Queries:     []Query{q(`histogram_quantile(0.5, sum by (le, session_state) (rate(llm_api_gateway_session_first_token_seconds_bucket{`+ss+`}[$__rate_interval])))`, "{{session_state}}")}},
				{Title: "Time to first token per class (p95)", Unit: "s",
					Description: "The same at p95: the tail a session feels when it waits for its busy cluster or escapes to a cold one.",
					Queries:     []Query{q(`histogram_quantile(0.95, sum by (le, session_state) (rate(llm_api_gateway_session_first_token_seconds_bucket{`+ss+`}[$__rate_interval])))`, "{{session_state}}")}},
			}},
			{Title: "Escapes and follows", Panels: []Panel{
				{Title: "Hinted requests: followed or moved", Unit: "reqps", Stacked: true,
					Description: "Requests that carried a last-cluster hint, by whether the hub served them on the hinted cluster (followed) or elsewhere (moved: the session escaped).",
					Queries:     []Query{q(`sum by (result) (rate(llm_api_gateway_last_cluster_hint_results_total[$__rate_interval]))`, "{{result}}")}},
				{Title: "Share of hinted requests followed", Unit: "percentunit", Ratio: true,
					Description: "followed / (followed + moved). High is good: sessions stay with their cache. A fall under load is expected (escapes); a fall without load is not.",
					Queries:     []Query{q(`sum(rate(llm_api_gateway_last_cluster_hint_results_total{result="followed"}[$__rate_interval])) / sum(rate(llm_api_gateway_last_cluster_hint_results_total[$__rate_interval]))`, "followed")}},
				{Title: "Returning sessions per algorithm: followed or escaped", Unit: "ops", Stacked: true,
					Description: "The hub's view: returning requests that went to their last cluster (primary: followed) or elsewhere (fallback: escaped), per algorithm.",
					Queries: []Query{
						q(`sum by (algorithm) (rate(stargate_routing_session_selections_total{session_state="returning", selection="primary", `+sh+`}[$__rate_interval]))`, "{{algorithm}} followed"),
						q(`sum by (algorithm) (rate(stargate_routing_session_selections_total{session_state="returning", selection="fallback", `+sh+`}[$__rate_interval]))`, "{{algorithm}} escaped"),
					}},
				{Title: "Escape ratio per algorithm", Unit: "percentunit", Ratio: true,
					Description: "Escaped / all returning selections, per algorithm: how often a session had to leave its cache because its cluster was saturated.",
					Queries:     []Query{q(`sum by (algorithm) (rate(stargate_routing_session_selections_total{session_state="returning", selection="fallback", `+sh+`}[$__rate_interval])) / sum by (algorithm) (rate(stargate_routing_session_selections_total{session_state="returning", `+sh+`}[$__rate_interval]))`, "{{algorithm}}")}},
				{Title: "Why sessions leave their cluster", Unit: "ops", Stacked: true,
					Description: "Served requests (2xx) of classified sessions that ended on another cluster than their own, by the hub's reason: new_not_waiting (a new session placed outside its affinity group: new sessions do not wait), group_saturated (a returning session sent away while its cluster was a candidate but full), cluster_lost (its cluster left, is excluded, or the hint was stale), retry (an attempt on its cluster failed and it ended elsewhere). group_saturated under load is the affinity wait doing its job; cluster_lost without a deploy or an incident is not.",
					Queries:     []Query{q(`sum by (reason) (rate(stargate_session_escapes_total{model=~"$model"}[$__rate_interval]))`, "{{reason}}")}},
				{Title: "Stale hints per algorithm", Unit: "ops",
					Description: "Requests whose hinted cluster was not a candidate (gone, not serving the model): they are routed as new. Bursts follow a cluster leaving.",
					Queries:     []Query{q(`sum by (algorithm) (rate(stargate_routing_session_selections_total{session_state="stale", `+sh+`}[$__rate_interval]))`, "{{algorithm}}")}},
			}},
			{Title: "Content-prefix affinity", Panels: []Panel{
				{Title: "Prefix tiers of answered requests", Unit: "reqps", Stacked: true,
					Description: "Requests of prefix-aware routes (prefix-affinity, or prefix_affinity on wait-and-widen) answered 2xx, by the tier of the decision that served them: cache (a cluster holding the prompt's prefix had room), split (every holder was saturated, so another cluster took a copy), overflow (nothing cleared the split guard: served once without becoming a holder), load (no cluster was known to hold any of it). A growing split or overflow share means the clusters holding the hot prefixes are full.",
					Queries:     []Query{q(`sum by (tier) (rate(stargate_prefix_routed_total{model=~"$model"}[$__rate_interval]))`, "{{tier}}")}},
				{Title: "Prompt summaries by result", Unit: "reqps", Stacked: true,
					Description: "x-stargate-prompt-prefix on requests of prefix-aware routes: ok, absent (embeddings, a prompt under one block, or the gateway's --prompt-prefix-enabled off), invalid or unknown_version (routed as absent). invalid or unknown_version above zero means a gateway of another version or a broken client path.",
					Queries:     []Query{q(`sum by (result) (rate(stargate_prefix_summaries_total{model=~"$model"}[$__rate_interval]))`, "{{result}}")}},
				{Title: "Prefix index: lookups that found a holder", Unit: "percentunit", Ratio: true,
					Description: "Share of the hub's prefix index lookups that found some cluster holding a prefix of the prompt, per hub replica. Each replica learns only from the requests it routed; the session hint covers turns another replica routed.",
					Queries:     []Query{q(`sum by (instance) (rate(stargate_prefix_index_lookups_total{result="hit"}[$__rate_interval])) / sum by (instance) (rate(stargate_prefix_index_lookups_total[$__rate_interval]))`, "{{instance}}")}},
				{Title: "Prefix index memory against its bound", Unit: "bytes",
					Description: "Approximate memory of the stored checkpoints per hub replica, against the hard bound set by --prefix-index-max-nodes and --prefix-index-max-holders. At the bound the least recently marked checkpoints are evicted (capacity evictions).",
					Queries: []Query{
						q(`sum by (instance) (stargate_prefix_index_bytes)`, "{{instance}}"),
						q(`sum by (instance) (stargate_prefix_index_max_bytes)`, "{{instance}} bound"),
					}},
				{Title: "Prefix index size", Unit: "short",
					Description: "Checkpoints stored, holder entries (one per copy of a checkpoint on a cluster: holders / nodes is the copies per checkpoint), distinct prompt blocks covered, and clusters with a slot.",
					Queries: []Query{
						q(`sum by (instance) (stargate_prefix_index_nodes)`, "{{instance}} nodes"),
						q(`sum by (instance) (stargate_prefix_index_holders)`, "{{instance}} holders"),
						q(`sum by (instance) (stargate_prefix_index_blocks)`, "{{instance}} blocks"),
						q(`sum by (instance) (stargate_prefix_index_clusters)`, "{{instance}} clusters"),
					}},
				{Title: "Prefix index marks and evictions", Unit: "ops",
					Description: "Marks (answered requests recorded as held by their cluster), holder entries evicted by reason (ttl: not re-marked within --prefix-index-ttl; capacity: the index was full; cluster_left; holder_cap: a checkpoint already had --prefix-index-max-holders), and marks dropped for want of a cluster slot (should stay 0).",
					Queries: []Query{
						q(`sum(rate(stargate_prefix_index_marks_total[$__rate_interval]))`, "marks"),
						q(`sum by (reason) (rate(stargate_prefix_index_evictions_total[$__rate_interval]))`, "evicted {{reason}}"),
						q(`sum(rate(stargate_prefix_index_dropped_marks_total[$__rate_interval]))`, "dropped marks"),
					}},
			}},
		},
	}
}
