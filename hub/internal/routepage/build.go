package routepage

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
)

// Records is the request log a view reads (routelog.Log).
type Records interface {
	Each(fn func(*routelog.Record) bool)
	Oldest() (time.Time, bool)
	Capacity() int
	Bytes() int64
	Total() uint64
	Dropped() uint64
}

// Fleet is the routing state's clusters now (state.Store).
type Fleet interface {
	ClusterViews() []state.ClusterView
}

// Limits of Query and its defaults: the window defaults to the longest a
// default ring covers at a modest rate, and the lists to what a screen
// can show.
const (
	DefaultWindowSeconds = 900
	MaxWindowSeconds     = 3600
	minWindowSeconds     = 10
	DefaultSessions      = 50
	MaxSessions          = 500
	DefaultTurns         = 24
	MaxTurns             = 64
	// hottestPrefixes is how many hot prefixes a view lists.
	hottestPrefixes = 10
	// timelineBuckets is about how many buckets a timeline has.
	timelineBuckets = 30
	// StaleAfter is how old a cluster's newest statistics may be before it
	// shows as "stale": far beyond any pylon's update interval.
	StaleAfter = 30 * time.Second
)

// Input is everything one view is built from.
type Input struct {
	HubID  string
	Now    time.Time
	Query  Query
	Log    Records
	Fleet  Fleet
	Prefix Prefix // Enabled and Index; Build fills Tiers and Hottest
}

// Build aggregates a view. It reads the log once, newest first, and stops
// at the first record that ended before the window.
func Build(in Input) View {
	q := in.Query
	v := View{Schema: Schema, HubID: in.HubID, GeneratedAt: in.Now, Query: q,
		Scope: fmt.Sprintf("hub %s: only the requests this hub routed and the clusters registered with it; "+
			"each hub replica routes its own share and keeps its own records", in.HubID),
		Clusters: []Cluster{}, Decisions: []Decision{}}
	start := in.Now.Add(-time.Duration(q.WindowSeconds) * time.Second)
	views := in.Fleet.ClusterViews()
	regions, unlabelled := clusterRegions(views)
	v.Options = options(views, regions)

	a := newAggregate(q, start, bucketSeconds(q.WindowSeconds))
	for _, id := range unlabelled {
		a.unlabelled[id] = true
	}
	models := map[string]bool{}
	in.Log.Each(func(r *routelog.Record) bool {
		if r.End().Before(start) {
			return false
		}
		models[r.Model] = true
		if q.Model != "" && r.Model != q.Model {
			return true
		}
		if q.Region != "" && regions[r.Cluster] != q.Region {
			return true
		}
		a.add(r)
		return true
	})
	for m := range models {
		if !slices.Contains(v.Options.Models, m) {
			v.Options.Models = append(v.Options.Models, m)
		}
	}
	slices.Sort(v.Options.Models)

	v.Records = Coverage{Capacity: in.Log.Capacity(), Bytes: in.Log.Bytes(), Total: in.Log.Total(),
		Dropped: in.Log.Dropped(), InWindow: a.n, WindowCovered: true}
	v.Records.CoveredSeconds = float64(q.WindowSeconds)
	if oldest, ok := in.Log.Oldest(); ok {
		v.Records.OldestAt = oldest
		v.Records.WindowCovered = in.Log.Total() <= uint64(in.Log.Capacity()) || !oldest.After(start)
		if !v.Records.WindowCovered {
			v.Records.CoveredSeconds = in.Now.Sub(oldest).Seconds()
		}
	}
	v.Clusters = a.clusters(views, regions, in.Now)
	v.Decisions = a.decisions()
	v.Timeline = a.timeline(in.Now)
	v.Sessions = a.sessions()
	v.Prefix = in.Prefix
	v.Prefix.Tiers, v.Prefix.Hottest = a.prefixes()
	return v
}

// clusterRegions maps each cluster id to its region: the label its pylons
// registered with, else its RTT group; it also returns the clusters whose
// region is an RTT group.
func clusterRegions(views []state.ClusterView) (map[string]string, []string) {
	out := map[string]string{}
	rtt := map[string]time.Duration{}
	for _, c := range views {
		if c.Region != "" && out[c.ClusterID] == "" {
			out[c.ClusterID] = c.Region
		}
		rtt[c.ClusterID] = max(rtt[c.ClusterID], c.RTT)
	}
	var unlabelled []string
	for id := range rtt {
		if out[id] == "" {
			unlabelled = append(unlabelled, id)
		}
	}
	for id, g := range rttGroups(unlabelled, rtt) {
		out[id] = g
	}
	return out, unlabelled
}

// rttGroups names clusters without a region label by their round trip:
// sorted by RTT, a new group starts where the RTT more than doubles and
// grows by more than 5 ms, so jitter inside a region does not split it.
func rttGroups(ids []string, rtt map[string]time.Duration) map[string]string {
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(rtt[a], rtt[b]), cmp.Compare(a, b)) })
	out := map[string]string{}
	group := 1
	var prev time.Duration
	for i, id := range ids {
		cur := rtt[id]
		if i > 0 && cur > 2*prev && cur-prev > 5*time.Millisecond {
			group++
		}
		out[id] = "rtt-" + strconv.Itoa(group)
		prev = cur
	}
	return out
}

func options(views []state.ClusterView, regions map[string]string) Options {
	o := Options{Models: []string{}, Regions: []string{}, MaxWindowSeconds: MaxWindowSeconds,
		MaxSessions: MaxSessions, MaxTurns: MaxTurns}
	for _, c := range views {
		if !slices.Contains(o.Models, c.Target.Model) {
			o.Models = append(o.Models, c.Target.Model)
		}
	}
	for _, r := range regions {
		if !slices.Contains(o.Regions, r) {
			o.Regions = append(o.Regions, r)
		}
	}
	slices.Sort(o.Regions)
	return o
}

// bucketSeconds cuts a window in about timelineBuckets buckets of a round
// length.
func bucketSeconds(window int) int {
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if window/s <= timelineBuckets {
			return s
		}
	}
	return 600
}

type decisionKey struct{ model, routingKey, algorithm string }

type prefixKey struct {
	model  string
	prefix uint64
}

type hot struct {
	requests, blocks int
	clusters         map[string]int
	tiers            map[string]int
}

// aggregate is one walk's sums.
type aggregate struct {
	q       Query
	start   time.Time
	bucket  int
	n       int
	dec     map[decisionKey]*Decision
	buckets map[int64]*Bucket
	served  map[string]int
	escapes map[string]int
	// seen counts the window's sessions; only the q.Sessions that ended
	// last (the first the walk meets) keep their records in turns, or
	// with a flow filter every session, since which match is known only
	// once a session's turns are all read.
	seen     map[uint64]struct{}
	order    []uint64
	turns    map[uint64][]routelog.Record
	tiers    map[string]int
	hot      map[prefixKey]*hot
	hotOrder []prefixKey
	// unlabelled are the clusters named by RTT group.
	unlabelled map[string]bool
}

func newAggregate(q Query, start time.Time, bucket int) *aggregate {
	return &aggregate{q: q, start: start, bucket: bucket, dec: map[decisionKey]*Decision{},
		buckets: map[int64]*Bucket{}, served: map[string]int{}, escapes: map[string]int{},
		seen: map[uint64]struct{}{}, turns: map[uint64][]routelog.Record{}, tiers: map[string]int{}, hot: map[prefixKey]*hot{},
		unlabelled: map[string]bool{}}
}

func (a *aggregate) add(r *routelog.Record) {
	a.n++
	k := decisionKey{r.Model, r.RoutingKey, r.Algorithm}
	d := a.dec[k]
	if d == nil {
		d = &Decision{Model: r.Model, RoutingKey: r.RoutingKey, Algorithm: r.Algorithm,
			RankDepth: map[string]int{}, SessionClasses: map[string]int{}, Escapes: map[string]int{},
			Status: map[string]int{}, PrefixTiers: map[string]int{}}
		a.dec[k] = d
	}
	d.Requests++
	switch r.Selection {
	case routelog.SelectionPrimary:
		d.Primary++
	case routelog.SelectionFallback:
		d.Fallback++
	default:
		d.Unplaced++
	}
	if r.Selection != routelog.SelectionNone {
		d.RankDepth[rankLabel(r.RankDepth)]++
	}
	if r.Waits > 0 {
		d.Waited++
		d.Waits += r.Waits
	}
	if r.Retries > 0 {
		d.Retried++
		d.Retries += r.Retries
	}
	d.SessionClasses[className(r.Class)]++
	if r.Escape != "" {
		d.Escapes[r.Escape]++
		a.escapes[r.Cluster]++
	}
	d.Status[statusClass(r.Status)]++
	if t := r.PrefixTier.String(); t != "" {
		d.PrefixTiers[t]++
		a.tiers[t]++
	}
	if r.Cluster != "" {
		a.served[r.Cluster]++
	}
	a.addBucket(r)
	if r.Session != 0 {
		if _, seen := a.seen[r.Session]; !seen {
			a.seen[r.Session] = struct{}{}
			if len(a.order) < a.q.Sessions || a.q.Flow != "" {
				a.order = append(a.order, r.Session)
				a.turns[r.Session] = nil
			}
		}
		if turns, listed := a.turns[r.Session]; listed {
			a.turns[r.Session] = append(turns, *r)
		}
	}
	if r.Prefix != 0 {
		pk := prefixKey{r.Model, r.Prefix}
		h := a.hot[pk]
		if h == nil {
			h = &hot{clusters: map[string]int{}, tiers: map[string]int{}}
			a.hot[pk] = h
			a.hotOrder = append(a.hotOrder, pk)
		}
		h.requests++
		h.blocks += r.PrefixBlocks
		if r.Cluster != "" {
			h.clusters[r.Cluster]++
		}
		if t := r.PrefixTier.String(); t != "" {
			h.tiers[t]++
		}
	}
}

func (a *aggregate) addBucket(r *routelog.Record) {
	size := int64(a.bucket) * int64(time.Second)
	key := r.End().UnixNano() / size
	b := a.buckets[key]
	if b == nil {
		b = &Bucket{At: time.Unix(0, key*size).UTC()}
		a.buckets[key] = b
	}
	b.Requests++
	switch r.Selection {
	case routelog.SelectionPrimary:
		b.Primary++
	case routelog.SelectionFallback:
		b.Fallback++
	default:
		b.Unplaced++
	}
	if r.Waits > 0 {
		b.Waited++
	}
	if r.Escape != "" {
		b.Escapes++
	}
	if r.Status >= 500 || r.Status == 0 {
		b.Errors++
	}
	switch r.Class {
	case routing.SessionNew:
		b.New++
	case routing.SessionReturning:
		b.Returning++
	case routing.SessionStale:
		b.Stale++
	}
}

func rankLabel(d int) string {
	if d >= 4 {
		return "4+"
	}
	return strconv.Itoa(max(d, 1))
}

func className(c routing.SessionState) string {
	if s := c.String(); s != "" && c != routing.SessionUnclassified {
		return s
	}
	return "unclassified"
}

// statusClass names an answer's class; 499 is the client leaving.
func statusClass(s int) string {
	switch {
	case s == 499:
		return "499"
	case s >= 500 || s == 0:
		return "5xx"
	case s >= 400:
		return "4xx"
	}
	return "2xx"
}

func (a *aggregate) clusters(views []state.ClusterView, regions map[string]string, now time.Time) []Cluster {
	out := []Cluster{}
	for _, c := range views {
		if a.q.Model != "" && c.Target.Model != a.q.Model {
			continue
		}
		region := regions[c.ClusterID]
		if a.q.Region != "" && region != a.q.Region {
			continue
		}
		source := "pylon"
		if a.unlabelled[c.ClusterID] {
			source = "rtt"
		}
		out = append(out, Cluster{ClusterID: c.ClusterID, Model: c.Target.Model, RoutingKey: c.Target.RoutingKey,
			Region: region, RegionSource: source, Health: health(c, now), Backends: c.Backends,
			StatsAgeSeconds: max(now.Sub(c.UpdatedAt).Seconds(), 0),
			Active:          c.Running, Capacity: c.MaxConcurrency, QueuedInputTokens: c.QueuedInputTokens,
			KVUsedTokens: c.KVUsedTokens, KVCapacityTokens: c.KVCapacityTokens, InputTPS: c.InputTPS,
			Reservations: c.Reservations, ReservedTokens: c.ReservedTokens, RTTMs: float64(c.RTT.Microseconds()) / 1000,
			Served: a.served[c.ClusterID], EscapesIn: a.escapes[c.ClusterID]})
	}
	slices.SortFunc(out, func(x, y Cluster) int {
		return cmp.Or(cmp.Compare(x.Region, y.Region), cmp.Compare(x.ClusterID, y.ClusterID),
			cmp.Compare(x.Model, y.Model), cmp.Compare(x.RoutingKey, y.RoutingKey))
	})
	return out
}

func health(c state.ClusterView, now time.Time) string {
	switch {
	case c.Backends == 0:
		return "down"
	case c.FullByRefusal:
		return "refusing"
	case !c.UpdatedAt.IsZero() && now.Sub(c.UpdatedAt) > StaleAfter:
		return "stale"
	case c.MaxConcurrency > 0 && c.Running >= c.MaxConcurrency:
		return "full"
	}
	return "ok"
}

func (a *aggregate) decisions() []Decision {
	out := make([]Decision, 0, len(a.dec))
	for _, d := range a.dec {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(x, y Decision) int {
		return cmp.Or(cmp.Compare(x.Model, y.Model), cmp.Compare(x.RoutingKey, y.RoutingKey), cmp.Compare(x.Algorithm, y.Algorithm))
	})
	return out
}

// timeline lists every bucket from the window's start to now, empty ones
// included, so the chart's x axis is time.
func (a *aggregate) timeline(now time.Time) Timeline {
	size := int64(a.bucket) * int64(time.Second)
	t := Timeline{BucketSeconds: a.bucket, Buckets: []Bucket{}}
	for k := a.start.UnixNano() / size; k <= now.UnixNano()/size; k++ {
		if b := a.buckets[k]; b != nil {
			t.Buckets = append(t.Buckets, *b)
		} else {
			t.Buckets = append(t.Buckets, Bucket{At: time.Unix(0, k*size).UTC()})
		}
	}
	return t
}

func (a *aggregate) sessions() Sessions {
	s := Sessions{Total: len(a.seen), Items: []Session{}}
	if a.q.Flow != "" {
		s.Total = 0
	}
	for _, id := range a.order {
		ss := session(id, a.turns[id], a.q.Turns)
		if a.q.Flow != "" {
			if !ss.has(a.q.Flow) {
				continue
			}
			s.Total++
		}
		if len(s.Items) < a.q.Sessions {
			s.Items = append(s.Items, ss)
		}
	}
	s.Shown = len(s.Items)
	s.Truncated = s.Total > s.Shown
	return s
}

// session builds one session from its records, newest first as the walk
// met them.
func session(id uint64, recs []routelog.Record, limit int) Session {
	slices.Reverse(recs)
	turns := flows(recs)
	last := &recs[len(recs)-1]
	s := Session{ID: fmt.Sprintf("%016x", id), Model: last.Model, RoutingKey: last.RoutingKey, Algorithm: last.Algorithm,
		LastAt: last.At.UTC(), TurnsTotal: len(turns), Clusters: []string{}, flows: map[string]bool{}}
	for _, t := range turns {
		if t.ClusterID != "" && !slices.Contains(s.Clusters, t.ClusterID) {
			s.Clusters = append(s.Clusters, t.ClusterID)
		}
		s.flows[t.Flow] = true
		switch t.Flow {
		case FlowEscape:
			s.Escapes++
		case FlowFollowed:
			s.Followed++
		case FlowBounced:
			s.Bounced++
		}
	}
	if len(turns) > limit {
		turns = turns[len(turns)-limit:]
		s.TurnsTruncated = true
	}
	s.Turns = turns
	return s
}

// has reports whether any of the session's turns in the window, listed
// or not, has the flow.
func (s *Session) has(flow string) bool { return s.flows[flow] }

// The flows of Turn.Flow.
const (
	FlowFirst    = "first"
	FlowStay     = "stay"
	FlowEscape   = "escape"
	FlowFollowed = "followed"
	FlowBounced  = "bounced"
	FlowMoved    = "moved"
	FlowUnplaced = "unplaced"
)

// flows turns a session's records, oldest first, into turns, relating each
// placed turn to the placed turn before it. The cluster a session
// "belonged to" before an escape is the hint the escaping turn carried,
// or when it had none the cluster of the turn before.
func flows(recs []routelog.Record) []Turn {
	out := make([]Turn, 0, len(recs))
	var last string  // cluster of the previous placed turn
	var escaped bool // the previous placed turn escaped
	var home string  // where the session was before that escape
	for i := range recs {
		r := &recs[i]
		t := Turn{At: r.At.UTC(), ClusterID: r.Cluster, HintClusterID: r.Hint, Class: className(r.Class),
			Selection: r.Selection.String(), RankDepth: r.RankDepth, Waits: r.Waits, Retries: r.Retries,
			Escape: r.Escape, Status: r.Status, DurationMs: float64(r.Duration.Microseconds()) / 1000}
		switch {
		case r.Cluster == "":
			t.Flow = FlowUnplaced
		case r.Escape != "":
			t.Flow = FlowEscape
		case last == "":
			t.Flow = FlowFirst
		case escaped && r.Cluster == last:
			t.Flow = FlowFollowed
		case escaped && r.Cluster == home:
			t.Flow = FlowBounced
		case r.Cluster == last:
			t.Flow = FlowStay
		default:
			t.Flow = FlowMoved
		}
		if r.Cluster != "" {
			escaped = r.Escape != ""
			if escaped {
				home = cmp.Or(r.Hint, last)
			}
			last = r.Cluster
		}
		out = append(out, t)
	}
	return out
}

func (a *aggregate) prefixes() (map[string]int, []HotPrefix) {
	keys := slices.Clone(a.hotOrder)
	slices.SortStableFunc(keys, func(x, y prefixKey) int { return cmp.Compare(a.hot[y].requests, a.hot[x].requests) })
	out := []HotPrefix{}
	for _, k := range keys[:min(len(keys), hottestPrefixes)] {
		h := a.hot[k]
		hp := HotPrefix{Prefix: fmt.Sprintf("%016x", k.prefix), Model: k.model, Requests: h.requests,
			MatchedBlocksMean: float64(h.blocks) / float64(h.requests), Clusters: []PrefixCluster{}, Tiers: h.tiers}
		for _, id := range slices.Sorted(maps.Keys(h.clusters)) {
			hp.Clusters = append(hp.Clusters, PrefixCluster{ClusterID: id, Served: h.clusters[id]})
		}
		slices.SortStableFunc(hp.Clusters, func(x, y PrefixCluster) int { return cmp.Compare(y.Served, x.Served) })
		out = append(out, hp)
	}
	return a.tiers, out
}
