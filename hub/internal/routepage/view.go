package routepage

import "time"

// Schema names the JSON layout of View; a change that breaks a reader
// bumps it.
const Schema = "stargate.routing-page/v1"

// View is the body of GET /debug/routing: one hub's routing activity over
// a time window, aggregated from its request records, and the clusters as
// its routing state sees them now. Lists are bounded by the query's
// limits; every list that was cut says so.
type View struct {
	Schema      string    `json:"schema"`
	HubID       string    `json:"hub_id"`
	GeneratedAt time.Time `json:"generated_at"`
	// Scope says that the view is this hub's alone: each hub replica
	// routes its own share of the traffic and keeps its own records.
	Scope   string   `json:"scope"`
	Query   Query    `json:"query"`
	Options Options  `json:"options"`
	Records Coverage `json:"records"`
	// Clusters are every cluster of every target the query selects, sorted
	// by region, then cluster id.
	Clusters  []Cluster  `json:"clusters"`
	Decisions []Decision `json:"decisions"`
	Timeline  Timeline   `json:"timeline"`
	Sessions  Sessions   `json:"sessions"`
	Prefix    Prefix     `json:"prefix"`
}

// Query is the filter the view was built with, after defaults and
// clamping: what the page shows in its controls.
type Query struct {
	// Model and Region select one model and one region; empty selects all.
	Model  string `json:"model"`
	Region string `json:"region"`
	// WindowSeconds is how far back records count.
	WindowSeconds int `json:"window_s"`
	// Sessions is the most sessions listed; Turns the most turns listed
	// per session (the newest).
	Sessions int `json:"sessions"`
	Turns    int `json:"turns"`
	// Flow, when set ("escape", "followed" or "bounced"), lists only the
	// sessions with a turn of that flow, before the Sessions limit.
	Flow string `json:"flow"`
}

// Options are the values the page's filters offer: every model and
// region the hub knows now or has records of.
type Options struct {
	Models  []string `json:"models"`
	Regions []string `json:"regions"`
	// MaxWindowSeconds, MaxSessions and MaxTurns are the clamps of Query.
	MaxWindowSeconds int `json:"max_window_s"`
	MaxSessions      int `json:"max_sessions"`
	MaxTurns         int `json:"max_turns"`
}

// Coverage describes the record ring the view was built from, so a reader
// knows when the window is longer than what the ring still holds.
type Coverage struct {
	// Capacity is the ring's size in records (--routing-page-records) and
	// Bytes its fixed memory.
	Capacity int   `json:"capacity"`
	Bytes    int64 `json:"bytes"`
	// Total counts the records appended since the hub started; Dropped
	// those lost because a writer found its slot still being written by
	// another (a ring too small for the request rate).
	Total   uint64 `json:"total"`
	Dropped uint64 `json:"dropped"`
	// InWindow is the records inside the window that match the filter.
	InWindow int `json:"in_window"`
	// OldestAt is the oldest record the ring holds (zero when empty);
	// WindowCovered is false when OldestAt is after the window's start,
	// i.e. older records in the window were overwritten, and
	// CoveredSeconds is then how much of the window the ring still holds
	// (the whole window otherwise).
	OldestAt       time.Time `json:"oldest_at"`
	WindowCovered  bool      `json:"window_covered"`
	CoveredSeconds float64   `json:"covered_s"`
}

// Cluster is one cluster of one target as the routing state sees it now,
// with what the records say it served in the window.
type Cluster struct {
	ClusterID  string `json:"cluster_id"`
	Model      string `json:"model"`
	RoutingKey string `json:"routing_key"`
	// Region is the label its pylons registered with (--region), or, when
	// none did, "rtt-<n>": the n-th group of clusters by round trip,
	// split where the RTTs leave a gap (RegionSource "rtt"; "pylon"
	// otherwise).
	Region       string `json:"region"`
	RegionSource string `json:"region_source"`
	// Health is "ok", "full" (at its engines' concurrency),
	// "refusing" (every backend marked full by a queue refusal), "stale"
	// (statistics older than the staleness bound) or "down" (no active
	// backend).
	Health string `json:"health"`
	// StatsAgeSeconds is how old its newest statistics are.
	StatsAgeSeconds float64 `json:"stats_age_s"`
	Backends        int     `json:"backends"`
	// Active is the requests running on its engines and Capacity their
	// concurrency (0: not reported).
	Active   uint64 `json:"active"`
	Capacity uint64 `json:"capacity"`
	// QueuedInputTokens is the prompt tokens waiting for prefill.
	QueuedInputTokens uint64 `json:"queued_input_tokens"`
	KVUsedTokens      uint64 `json:"kv_used_tokens"`
	KVCapacityTokens  uint64 `json:"kv_capacity_tokens"`
	// InputTPS is the measured prefill throughput (tokens/s).
	InputTPS float64 `json:"input_tps"`
	// Reservations are the requests sent that its statistics do not show
	// yet, and ReservedTokens their prompt tokens.
	Reservations   int     `json:"reservations"`
	ReservedTokens uint64  `json:"reserved_tokens"`
	RTTMs          float64 `json:"rtt_ms"`
	// Served is the requests it answered in the window (any status), and
	// EscapesIn those of them that were sessions sent away from their own
	// cluster. Both count by cluster id over the filtered records, so a
	// cluster serving several targets repeats them in each entry.
	Served    int `json:"served"`
	EscapesIn int `json:"escapes_in"`
}

// Decision sums the window's requests of one target and algorithm.
type Decision struct {
	Model      string `json:"model"`
	RoutingKey string `json:"routing_key"`
	Algorithm  string `json:"algorithm"`
	Requests   int    `json:"requests"`
	// Primary and Fallback count the requests whose last choice was the
	// algorithm's first preference or a later one; Unplaced those that
	// ended without a choice (shed, rejected, no cluster).
	Primary  int `json:"primary"`
	Fallback int `json:"fallback"`
	Unplaced int `json:"unplaced"`
	// RankDepth counts choices by the chosen cluster's rank: "1", "2",
	// "3" and "4+".
	RankDepth map[string]int `json:"rank_depth"`
	// Waited counts the requests that waited at least once and Waits
	// their waits; Retried and Retries the same for retries.
	Waited  int `json:"waited"`
	Waits   int `json:"waits"`
	Retried int `json:"retried"`
	Retries int `json:"retries"`
	// SessionClasses counts "new", "returning", "stale" and
	// "unclassified" requests.
	SessionClasses map[string]int `json:"session_classes"`
	// Escapes counts sessions answered away from their own cluster, by
	// reason.
	Escapes map[string]int `json:"escapes"`
	// Status counts answers by class: "2xx", "4xx", "5xx" and "499"
	// (the client left).
	Status map[string]int `json:"status"`
	// PrefixTiers counts prefix-aware choices by tier.
	PrefixTiers map[string]int `json:"prefix_tiers"`
}

// Timeline is the window cut in equal buckets, oldest first.
type Timeline struct {
	BucketSeconds int      `json:"bucket_s"`
	Buckets       []Bucket `json:"buckets"`
}

// Bucket is one slice of the timeline.
type Bucket struct {
	At       time.Time `json:"at"`
	Requests int       `json:"requests"`
	Primary  int       `json:"primary"`
	Fallback int       `json:"fallback"`
	Waited   int       `json:"waited"`
	Escapes  int       `json:"escapes"`
	// Unplaced counts the requests that ended without a choice; Errors
	// those answered 5xx or not at all (a client that left counts as
	// neither).
	Unplaced int `json:"unplaced"`
	Errors   int `json:"errors"`
	// Returning, New and Stale count the session classes.
	New       int `json:"new"`
	Returning int `json:"returning"`
	Stale     int `json:"stale"`
}

// Sessions lists the window's most recently active sessions, newest first.
type Sessions struct {
	// Total is the sessions with a record in the window (with a flow
	// filter, those that match it); Shown the ones listed; Truncated is
	// Total > Shown.
	Total     int       `json:"total"`
	Shown     int       `json:"shown"`
	Truncated bool      `json:"truncated"`
	Items     []Session `json:"items"`
}

// Session is one session's turns. ID is a keyed hash of its affinity key,
// stable for the life of the hub process and meaningless outside it: the
// raw key (a conversation id, a prompt_cache_key) never leaves the hub.
type Session struct {
	ID string `json:"id"`
	// Model, RoutingKey and Algorithm are its newest turn's.
	Model      string    `json:"model"`
	RoutingKey string    `json:"routing_key"`
	Algorithm  string    `json:"algorithm"`
	LastAt     time.Time `json:"last_at"`
	// TurnsTotal is the session's turns in the window; TurnsTruncated is
	// true when only the newest Query.Turns are listed.
	TurnsTotal     int  `json:"turns_total"`
	TurnsTruncated bool `json:"turns_truncated"`
	// Clusters is the distinct clusters that served it, in first-served
	// order; Escapes, Followed and Bounced count those flows over all its
	// turns in the window, listed or not.
	Clusters []string `json:"clusters"`
	Escapes  int      `json:"escapes"`
	Followed int      `json:"followed"`
	Bounced  int      `json:"bounced"`
	Turns    []Turn   `json:"turns"`
	// flows is the set of its turns' flows, for Query.Flow.
	flows map[string]bool
}

// Turn is one request of a session, oldest first.
type Turn struct {
	At time.Time `json:"at"`
	// ClusterID served it ("" when no cluster did); HintClusterID is the
	// session's last cluster the gateway sent.
	ClusterID     string `json:"cluster_id"`
	HintClusterID string `json:"hint_cluster_id"`
	// Class is the session classification: "new", "returning", "stale"
	// or "unclassified".
	Class string `json:"class"`
	// Selection is "primary", "fallback" or "" (not placed).
	Selection string `json:"selection"`
	RankDepth int    `json:"rank_depth"`
	Waits     int    `json:"waits"`
	Retries   int    `json:"retries"`
	// Escape is why it was answered away from the session's own cluster
	// ("" when it was not).
	Escape string `json:"escape"`
	Status int    `json:"status"`
	// DurationMs is the time from arrival to the end of the answer.
	DurationMs float64 `json:"duration_ms"`
	// Flow relates the turn to the one before it: "first", "stay",
	// "escape" (sent away from its own cluster), "followed" (the turn
	// after an escape, served where the escape went), "bounced" (the turn
	// after an escape, served back where the session was before it),
	// "moved" (another cluster without an escape: algorithms without
	// sessions) or "unplaced".
	Flow string `json:"flow"`
}

// Prefix is the content-prefix view: the index's size and the window's
// prefix-aware requests.
type Prefix struct {
	// Enabled is true once a prefix-aware route of this hub has looked up
	// or marked a prompt since the hub started.
	Enabled bool `json:"enabled"`
	// Index is the prefix index's size and counters since start.
	Index PrefixIndex `json:"index"`
	// Tiers counts the window's prefix-aware choices by tier: "cache",
	// "split", "overflow", "load".
	Tiers map[string]int `json:"tiers"`
	// Hottest are the prompt prefixes most requested in the window, most
	// first. A prefix is the prompt up to its first checkpoint at or past
	// 32 blocks (prefixhash.AnchorKey's), so prompts that share a system
	// prompt or a document count as one however long each is.
	Hottest []HotPrefix `json:"hottest"`
}

// PrefixIndex is the prefix index's size and counters.
type PrefixIndex struct {
	Nodes    int    `json:"nodes"`
	Holders  int    `json:"holders"`
	Blocks   int64  `json:"blocks"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	Clusters int    `json:"clusters"`
	Marks    uint64 `json:"marks"`
	Lookups  uint64 `json:"lookups"`
	Hits     uint64 `json:"hits"`
}

// HotPrefix is one prompt prefix and the clusters that answered it in the
// window (each answer marks its cluster a holder in the index).
type HotPrefix struct {
	// Prefix is a keyed hash of that checkpoint, like Session.ID.
	Prefix   string `json:"prefix"`
	Model    string `json:"model"`
	Requests int    `json:"requests"`
	// MatchedBlocksMean is the mean number of prompt blocks the index
	// found held somewhere when the request arrived.
	MatchedBlocksMean float64         `json:"matched_blocks_mean"`
	Clusters          []PrefixCluster `json:"clusters"`
	Tiers             map[string]int  `json:"tiers"`
}

// PrefixCluster is one cluster that answered a hot prefix.
type PrefixCluster struct {
	ClusterID string `json:"cluster_id"`
	Served    int    `json:"served"`
}
