package loadgen

import (
	"math"
	"net/http"
	"slices"
	"sort"
)

// Percentile is the nearest-rank percentile of sorted values: the
// smallest value such that at least p % of the values are ≤ it, i.e.
// sorted[ceil(p/100·n) − 1]. It never interpolates, so every percentile is
// a latency some request actually saw. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	return sorted[min(max(rank, 1), n)-1]
}

// Median is the middle value of vs, or the mean of the two middle values
// for an even count; 0 for none. It does not modify vs.
func Median(vs []float64) float64 {
	n := len(vs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Dist summarises a latency-like distribution (milliseconds, or tokens/s).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// NewDist computes a Dist over vs (nearest-rank percentiles).
func NewDist(vs []float64) Dist {
	if len(vs) == 0 {
		return Dist{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Dist{N: len(s), Mean: sum / float64(len(s)), P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99), Max: s[len(s)-1]}
}

// Class is the statistics of a subset of requests (new or returning
// sessions, one stream of a mixed workload).
type Class struct {
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	// UsageRequests are the successful requests that reported usage; the
	// cache-hit figures are over them.
	UsageRequests int   `json:"usage_requests"`
	PromptTokens  int64 `json:"prompt_tokens"`
	CachedTokens  int64 `json:"cached_tokens"`
	// CacheableTokens is the cache ceiling of the same requests: the
	// prompt tokens an unbounded prefix cache in the mock engine's
	// geometry would have served (Record.CacheableTokens).
	CacheableTokens int64 `json:"cacheable_tokens"`
	// CacheHitPct is 100·cached/prompt tokens; HitSharePct the share of
	// those requests with any cached token; CeilingPct is
	// 100·cached/cacheable tokens, how close the routing came to the best
	// any routing could do (0 when nothing was cacheable).
	CacheHitPct float64 `json:"cache_hit_pct"`
	HitSharePct float64 `json:"hit_share_pct"`
	CeilingPct  float64 `json:"cached_of_ceiling_pct"`
	TTFT        Dist    `json:"ttft_ms"`
	Latency     Dist    `json:"latency_ms"`
}

// ClusterShare is how many successful requests one cluster served.
type ClusterShare struct {
	Cluster  string  `json:"cluster"`
	Requests int     `json:"requests"`
	SharePct float64 `json:"share_pct"`
}

// Stats is the statistics of one run, or of several runs aggregated by
// Aggregate.
type Stats struct {
	// Runs is how many runs these statistics cover.
	Runs int `json:"runs"`
	// Counts (summed across runs by Aggregate).
	Requests int `json:"requests"` // due: sent, skipped or aborted
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	Skipped  int `json:"skipped"`
	Aborted  int `json:"aborted"`
	Retries  int `json:"retries"`
	// Rejected counts the failed requests that were refused before their
	// first byte: answered 429, 502 or 503, or that got no answer at all
	// for a reason other than loadgen's own timeout or deadline (a refused
	// or reset connection). A router that never refuses by itself keeps it
	// at 0. With --retries, a refusal a retry made good counts in Retries
	// only.
	Rejected int `json:"rejected"`
	// Copies per block across clusters, over the requests that reached a
	// known cluster (Record.FleetNewBlocks, ClusterNewBlocks): FleetBlocks
	// is the distinct full prompt blocks they sent, ClusterBlocks the sum
	// over clusters of the distinct blocks each received, and
	// CopiesPerBlock their ratio: the mean over blocks of how many clusters
	// received the block (1 when no block went to two clusters, up to the
	// cluster count; 0 when no block reached a known cluster). Evictions
	// are ignored, so it bounds from above the copies held at any one
	// time. Summed (the blocks) or the median of the runs (the ratio)
	// across runs.
	FleetBlocks    int64   `json:"fleet_blocks"`
	ClusterBlocks  int64   `json:"cluster_blocks"`
	CopiesPerBlock float64 `json:"copies_per_block"`
	// Rates (medians across runs).
	DurationS float64 `json:"duration_s"`
	// TargetRate is the workload's open-loop rate (0 for closed loop);
	// AchievedRate is requests sent over the send window.
	TargetRate   float64 `json:"target_rate,omitempty"`
	AchievedRate float64 `json:"achieved_rate"`
	// ThroughputRPS is successful requests per second of run time;
	// OutputTPS output tokens per second of run time.
	ThroughputRPS float64 `json:"throughput_rps"`
	OutputTPS     float64 `json:"output_tokens_per_s"`
	// All is every successful request; New are turn 1 (and anonymous)
	// requests, Returning turn > 1.
	All       Class            `json:"all"`
	New       Class            `json:"new"`
	Returning Class            `json:"returning"`
	Streams   map[string]Class `json:"streams,omitempty"`
	// DecodeTPS is the per-request decode speed: (output tokens − 1) /
	// (latency − TTFT), over requests with at least two output tokens.
	DecodeTPS Dist `json:"decode_tokens_per_s"`
	// Clusters is the share of successful requests per serving cluster
	// ("" = unknown), by request count.
	Clusters []ClusterShare `json:"clusters,omitempty"`
	// Session movement, over sessions with a known cluster on ≥ 2
	// successful turns: Escaped sessions changed cluster between two
	// consecutive turns; of the escaped sessions with a turn after their
	// first change (FollowEligible), Followed stayed on the cluster they
	// moved to for every later turn. Moves counts every change.
	Sessions       int `json:"sessions"`
	Escaped        int `json:"escaped"`
	FollowEligible int `json:"follow_eligible"`
	Followed       int `json:"followed"`
	Moves          int `json:"moves"`
	// Errors counts failures by message (first 200 bytes), summed.
	Errors map[string]int `json:"errors,omitempty"`
	// Counters is what the engines and the hub counted during the run
	// (evictions, escapes by reason), when the stack recorded counter
	// files into the run's folder (campaign --compare); summed across
	// runs.
	Counters *Counters `json:"counters,omitempty"`
}

// Compute builds the statistics of one run from its records. duration is
// the run's wall time; window its send window (first to last send);
// targetRate the workload's open-loop rate, 0 for closed loop.
func Compute(records []Record, durationS, windowS, targetRate float64) Stats {
	st := Stats{Runs: 1, Requests: len(records), DurationS: durationS, TargetRate: targetRate}
	var all, newer, ret classAcc
	streams := map[string]*classAcc{}
	clusters := map[string]int{}
	var decode []float64
	var outTokens int64
	sent := 0
	for i := range records {
		r := &records[i]
		st.Retries += r.Retries
		st.FleetBlocks += int64(r.FleetNewBlocks)
		st.ClusterBlocks += int64(r.ClusterNewBlocks)
		if r.rejected() {
			st.Rejected++
		}
		if r.Outcome == OutcomeOK || r.Outcome == OutcomeError {
			sent++
		}
		switch r.Outcome {
		case OutcomeOK:
			st.OK++
		case OutcomeError:
			st.Failed++
		case OutcomeSkipped:
			st.Skipped++
		case OutcomeAborted:
			st.Aborted++
		}
		if r.Outcome != OutcomeOK {
			if r.Outcome == OutcomeError {
				if st.Errors == nil {
					st.Errors = map[string]int{}
				}
				msg := r.Error
				if len(msg) > 200 {
					msg = msg[:200]
				}
				st.Errors[msg]++
			}
			all.count(r)
			continue
		}
		all.add(r)
		if r.Turn > 1 {
			ret.add(r)
		} else {
			newer.add(r)
		}
		if r.Stream != "" {
			if streams[r.Stream] == nil {
				streams[r.Stream] = &classAcc{}
			}
			streams[r.Stream].add(r)
		}
		clusters[r.Cluster]++
		outTokens += int64(r.OutputTokens)
		if gen := r.LatencyMs - r.TTFTMs; r.OutputTokens > 1 && gen > 0 {
			decode = append(decode, float64(r.OutputTokens-1)/(gen/1000))
		}
	}
	// Failed, skipped and aborted requests of a stream still count in its
	// Requests.
	for i := range records {
		r := &records[i]
		if r.Outcome == OutcomeOK {
			continue
		}
		if r.Turn > 1 {
			ret.count(r)
		} else {
			newer.count(r)
		}
		if r.Stream != "" {
			if streams[r.Stream] == nil {
				streams[r.Stream] = &classAcc{}
			}
			streams[r.Stream].count(r)
		}
	}
	st.All, st.New, st.Returning = all.class(), newer.class(), ret.class()
	if len(streams) > 0 {
		st.Streams = map[string]Class{}
		for k, a := range streams {
			st.Streams[k] = a.class()
		}
	}
	st.DecodeTPS = NewDist(decode)
	if durationS > 0 {
		st.ThroughputRPS = float64(st.OK) / durationS
		st.OutputTPS = float64(outTokens) / durationS
	}
	switch {
	case windowS > 0:
		st.AchievedRate = float64(sent) / windowS
	case durationS > 0:
		st.AchievedRate = float64(sent) / durationS
	}
	st.Clusters = shares(clusters, st.OK)
	st.Sessions, st.Escaped, st.FollowEligible, st.Followed, st.Moves = movement(records)
	if st.FleetBlocks > 0 {
		st.CopiesPerBlock = float64(st.ClusterBlocks) / float64(st.FleetBlocks)
	}
	return st
}

// rejected reports whether r failed before any byte of an answer for a
// reason of the system under test (Stats.Rejected).
func (r *Record) rejected() bool {
	if r.Outcome != OutcomeError {
		return false
	}
	switch r.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable:
		return true
	case 0:
		return r.Error != errTimeout.Error()
	}
	return false
}

// classAcc accumulates one Class.
type classAcc struct {
	requests, ok, usage       int
	prompt, cached, cacheable int64
	hits                      int
	ttft, latency             []float64
}

func (a *classAcc) count(*Record) { a.requests++ }

func (a *classAcc) add(r *Record) {
	a.requests++
	a.ok++
	a.ttft = append(a.ttft, r.TTFTMs)
	a.latency = append(a.latency, r.LatencyMs)
	if r.Usage && r.PromptTokens > 0 {
		a.usage++
		a.prompt += int64(r.PromptTokens)
		a.cached += int64(r.CachedTokens)
		a.cacheable += int64(r.CacheableTokens)
		if r.CachedTokens > 0 {
			a.hits++
		}
	}
}

func (a *classAcc) class() Class {
	c := Class{Requests: a.requests, OK: a.ok, UsageRequests: a.usage, PromptTokens: a.prompt, CachedTokens: a.cached,
		CacheableTokens: a.cacheable, TTFT: NewDist(a.ttft), Latency: NewDist(a.latency)}
	if a.prompt > 0 {
		c.CacheHitPct = 100 * float64(a.cached) / float64(a.prompt)
	}
	if a.cacheable > 0 {
		c.CeilingPct = 100 * float64(a.cached) / float64(a.cacheable)
	}
	if a.usage > 0 {
		c.HitSharePct = 100 * float64(a.hits) / float64(a.usage)
	}
	return c
}

func shares(counts map[string]int, total int) []ClusterShare {
	out := make([]ClusterShare, 0, len(counts))
	for c, n := range counts {
		s := ClusterShare{Cluster: c, Requests: n}
		if total > 0 {
			s.SharePct = 100 * float64(n) / float64(total)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// movement follows every session's successful turns with a known cluster
// in turn order (see Stats for the definitions).
func movement(records []Record) (sessions, escaped, eligible, followed, moves int) {
	type turn struct {
		n       int
		cluster string
	}
	by := map[string][]turn{}
	for i := range records {
		r := &records[i]
		if r.Session == "" || r.Outcome != OutcomeOK || r.Cluster == "" {
			continue
		}
		by[r.Session] = append(by[r.Session], turn{r.Turn, r.Cluster})
	}
	for _, ts := range by {
		if len(ts) < 2 {
			continue
		}
		sessions++
		sort.Slice(ts, func(i, j int) bool { return ts[i].n < ts[j].n })
		first := -1
		for k := 1; k < len(ts); k++ {
			if ts[k].cluster != ts[k-1].cluster {
				moves++
				if first < 0 {
					first = k
				}
			}
		}
		if first < 0 {
			continue
		}
		escaped++
		if first == len(ts)-1 {
			continue
		}
		eligible++
		stayed := true
		for k := first + 1; k < len(ts); k++ {
			stayed = stayed && ts[k].cluster == ts[first].cluster
		}
		if stayed {
			followed++
		}
	}
	return sessions, escaped, eligible, followed, moves
}

// Aggregate combines the statistics of repeated runs by the reporting
// rules (docs/loadgen.md#reporting-rules): counts are sums across runs;
// rates, cache-hit percentages and latency percentiles are medians of the
// per-run values (never percentiles of pooled requests). Cluster shares
// are recomputed from the summed counts.
func Aggregate(runs []Stats) Stats {
	if len(runs) == 1 {
		return runs[0]
	}
	var out Stats
	med := func(f func(*Stats) float64) float64 {
		vs := make([]float64, len(runs))
		for i := range runs {
			vs[i] = f(&runs[i])
		}
		return Median(vs)
	}
	clusters := map[string]int{}
	streams := map[string][]Class{}
	var all, newer, ret []Class
	for i := range runs {
		r := &runs[i]
		out.Runs += r.Runs
		out.Requests += r.Requests
		out.OK += r.OK
		out.Failed += r.Failed
		out.Skipped += r.Skipped
		out.Aborted += r.Aborted
		out.Retries += r.Retries
		out.Rejected += r.Rejected
		out.FleetBlocks += r.FleetBlocks
		out.ClusterBlocks += r.ClusterBlocks
		out.Sessions += r.Sessions
		out.Escaped += r.Escaped
		out.FollowEligible += r.FollowEligible
		out.Followed += r.Followed
		out.Moves += r.Moves
		for _, c := range r.Clusters {
			clusters[c.Cluster] += c.Requests
		}
		for k, n := range r.Errors {
			if out.Errors == nil {
				out.Errors = map[string]int{}
			}
			out.Errors[k] += n
		}
		all, newer, ret = append(all, r.All), append(newer, r.New), append(ret, r.Returning)
		for k, c := range r.Streams {
			streams[k] = append(streams[k], c)
		}
		if r.Counters != nil {
			if out.Counters == nil {
				out.Counters = &Counters{}
			}
			out.Counters.Add(r.Counters)
		}
	}
	out.DurationS = med(func(s *Stats) float64 { return s.DurationS })
	out.TargetRate = med(func(s *Stats) float64 { return s.TargetRate })
	out.AchievedRate = med(func(s *Stats) float64 { return s.AchievedRate })
	out.ThroughputRPS = med(func(s *Stats) float64 { return s.ThroughputRPS })
	out.OutputTPS = med(func(s *Stats) float64 { return s.OutputTPS })
	out.DecodeTPS = medDist(runs, func(s *Stats) Dist { return s.DecodeTPS })
	var copies []float64
	for i := range runs {
		if runs[i].FleetBlocks > 0 {
			copies = append(copies, runs[i].CopiesPerBlock)
		}
	}
	out.CopiesPerBlock = Median(copies)
	out.All, out.New, out.Returning = aggClass(all), aggClass(newer), aggClass(ret)
	if len(streams) > 0 {
		out.Streams = map[string]Class{}
		for k, cs := range streams {
			out.Streams[k] = aggClass(cs)
		}
	}
	out.Clusters = shares(clusters, out.OK)
	return out
}

func medDist(runs []Stats, f func(*Stats) Dist) Dist {
	ds := make([]Dist, len(runs))
	for i := range runs {
		ds[i] = f(&runs[i])
	}
	return aggDist(ds)
}

func aggDist(ds []Dist) Dist {
	var out Dist
	pick := func(f func(Dist) float64) float64 {
		vs := make([]float64, 0, len(ds))
		for _, d := range ds {
			if d.N > 0 {
				vs = append(vs, f(d))
			}
		}
		return Median(vs)
	}
	for _, d := range ds {
		out.N += d.N
	}
	out.Mean = pick(func(d Dist) float64 { return d.Mean })
	out.P50 = pick(func(d Dist) float64 { return d.P50 })
	out.P90 = pick(func(d Dist) float64 { return d.P90 })
	out.P99 = pick(func(d Dist) float64 { return d.P99 })
	out.Max = pick(func(d Dist) float64 { return d.Max })
	return out
}

func aggClass(cs []Class) Class {
	var out Class
	var hit, share, ceiling []float64
	ttft, lat := make([]Dist, len(cs)), make([]Dist, len(cs))
	for i, c := range cs {
		out.Requests += c.Requests
		out.OK += c.OK
		out.UsageRequests += c.UsageRequests
		out.PromptTokens += c.PromptTokens
		out.CachedTokens += c.CachedTokens
		out.CacheableTokens += c.CacheableTokens
		if c.UsageRequests > 0 {
			hit = append(hit, c.CacheHitPct)
			share = append(share, c.HitSharePct)
		}
		if c.CacheableTokens > 0 {
			ceiling = append(ceiling, c.CeilingPct)
		}
		ttft[i], lat[i] = c.TTFT, c.Latency
	}
	out.CacheHitPct, out.HitSharePct, out.CeilingPct = Median(hit), Median(share), Median(ceiling)
	out.TTFT, out.Latency = aggDist(ttft), aggDist(lat)
	return out
}
