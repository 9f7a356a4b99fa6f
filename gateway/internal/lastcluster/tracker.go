package lastcluster

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Config is the tracker's part of the gateway's last-cluster settings
// (the STARGATE_LAST_CLUSTER_* variables).
type Config struct {
	Enabled       bool
	TTL           time.Duration
	LookupTimeout time.Duration
	WriteTimeout  time.Duration
	// TimeoutLogEvery logs one in this many timeout warnings (sampled so
	// a slow store cannot flood the log); 0 means 100.
	TimeoutLogEvery int
	// LocalTTL, when > 0, puts a cache of LocalMaxEntries entries in front
	// of the store: an entry this replica read or wrote answers its
	// lookups for LocalTTL, and a write of the same cluster within LocalTTL
	// of this replica's last write is not sent. Hits and skipped writes do
	// not renew an entry, so no hint served from it is more than LocalTTL
	// behind the store, and the store's entry is rewritten (its TTL
	// renewed) at least every LocalTTL while the session is served here.
	LocalTTL        time.Duration
	LocalMaxEntries int
}

// cached is an entry of the local cache: the cluster, until when it may
// answer, and whether this replica wrote it (false: read from the store).
type cached struct {
	id      string
	expires time.Time
	written bool
}

// Tracker performs lookups and writes. Its zero value is not usable; build
// it with New.
type Tracker struct {
	cfg    Config
	store  Store
	m      *metrics.Metrics
	tracer trace.Tracer
	log    *slog.Logger
	clock  clock.Clock
	wg     sync.WaitGroup
	// local is the cache in front of the store; nil without LocalTTL.
	local *lru.Cache[string, cached]
}

// New returns a tracker over store. tp may be nil (no-op tracing).
func New(cfg Config, store Store, m *metrics.Metrics, tp trace.TracerProvider, log *slog.Logger, clk clock.Clock) *Tracker {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	if cfg.TimeoutLogEvery <= 0 {
		cfg.TimeoutLogEvery = 100
	}
	tr := &Tracker{cfg: cfg, store: store, m: m, tracer: tp.Tracer(tracerName), log: log, clock: clk}
	if cfg.LocalTTL > 0 && cfg.LocalMaxEntries > 0 {
		// lru.New fails only for a size below 1.
		tr.local, _ = lru.New[string, cached](cfg.LocalMaxEntries)
	}
	return tr
}

// tracerName is the gateway's tracer, the same as its service name;
// lookupSpan and writeSpan are the spans of the two store calls.
const (
	tracerName = "stargate-gateway"
	lookupSpan = tracerName + ".last_cluster_lookup"
	writeSpan  = tracerName + ".last_cluster_write"
)

// routingKeyAttr is the span attribute naming the request's routing key.
const routingKeyAttr = "stargate.routing_key"

// Target identifies what a session's entry is keyed by.
type Target struct {
	RoutingKey string
	Model      string
	Session    session.Session
	// RequestID goes into warn logs (the key and session never do).
	RequestID string
}

// Enabled reports whether the tracker looks up and records anything:
// without it a conversation anchor is not worth deriving.
func (tr *Tracker) Enabled() bool { return tr != nil && tr.cfg.Enabled }

// entry returns the affinity key t's entry is keyed by: an eligible
// session's own, or a payload session's conversation anchor (a key that
// survives the next turn, where the payload key does not); "" when the
// feature does not apply to t. lookup is false when nothing can be found
// under it: a first turn, which records its anchor for the next one.
func (tr *Tracker) entry(t Target) (affinity string, lookup bool) {
	if !tr.Enabled() || t.Model == "" {
		return "", false
	}
	s := t.Session
	switch {
	case s.Source.Eligible():
		return s.AffinityKey, s.AffinityKey != ""
	case s.Source == session.SourcePayload && s.Anchor.Key != "":
		return s.Anchor.Key, s.Anchor.Later
	}
	return "", false
}

// Lookup returns the remembered cluster id for t, or "" on a miss, an
// error, a timeout or an ineligible session. It never blocks longer than
// the lookup timeout and never fails the request.
func (tr *Tracker) Lookup(ctx context.Context, t Target) string {
	if !tr.Enabled() || t.Session.Source == session.SourceNone {
		return ""
	}
	// skipped counts sessions the feature cannot use (a payload hash
	// without an anchor, a first turn, an incomplete target); no session,
	// or the feature off, counts nothing.
	affinity, lookup := tr.entry(t)
	if !lookup {
		tr.m.LastClusterLookup.WithLabelValues("skipped").Inc()
		return ""
	}
	start := tr.clock.Now()
	key := Key(t.RoutingKey, t.Model, affinity)
	if id, ok := tr.cachedID(key, start); ok {
		tr.m.LookupDuration.Observe(tr.clock.Since(start).Seconds())
		tr.m.LastClusterLookup.WithLabelValues("hit").Inc()
		return id
	}
	ctx, span := tr.tracer.Start(ctx, lookupSpan)
	defer span.End()
	lctx, cancel := context.WithTimeout(ctx, tr.cfg.LookupTimeout)
	defer cancel()
	result, value, failure := tr.get(lctx, key)
	tr.m.LookupDuration.Observe(tr.clock.Since(start).Seconds())
	tr.m.LastClusterLookup.WithLabelValues(result).Inc()
	if result == "hit" && tr.local != nil {
		tr.local.Add(key, cached{id: value, expires: tr.clock.Now().Add(tr.cfg.LocalTTL)})
	}
	span.SetAttributes(attribute.String("result", result), attribute.String(routingKeyAttr, t.RoutingKey))
	if failure != nil {
		span.SetStatus(codes.Error, result)
		tr.warn("last-cluster lookup failed", result, t, failure)
	}
	return value
}

// cachedID answers a lookup from the local cache when it holds a live
// entry for key; without a cache it reports false and counts nothing.
func (tr *Tracker) cachedID(key string, now time.Time) (string, bool) {
	if tr.local == nil {
		return "", false
	}
	if e, ok := tr.local.Get(key); ok && now.Before(e.expires) {
		tr.m.LastClusterCache.WithLabelValues("lookup", "hit").Inc()
		return e.id, true
	}
	tr.m.LastClusterCache.WithLabelValues("lookup", "miss").Inc()
	return "", false
}

// suppress reports whether a write of id for key can be skipped: this
// replica wrote the same cluster less than LocalTTL ago. Otherwise it
// records the write about to be sent, and returns the entry to match when
// the write fails.
func (tr *Tracker) suppress(key, id string) (bool, cached) {
	if tr.local == nil {
		return false, cached{}
	}
	now := tr.clock.Now()
	if e, ok := tr.local.Peek(key); ok && e.written && e.id == id && now.Before(e.expires) {
		tr.m.LastClusterCache.WithLabelValues("write", "suppressed").Inc()
		return true, e
	}
	e := cached{id: id, expires: now.Add(tr.cfg.LocalTTL), written: true}
	tr.local.Add(key, e)
	tr.m.LastClusterCache.WithLabelValues("write", "stored").Inc()
	return false, e
}

// get reads key under lctx's deadline and classifies the outcome: hit
// (with the cluster id), miss, timeout or error (with the failure).
func (tr *Tracker) get(lctx context.Context, key string) (result, value string, failure error) {
	type res struct {
		v     string
		found bool
		err   error
	}
	// The store call runs in its own goroutine so a store that ignores its
	// context still cannot hold the request past the deadline.
	ch := make(chan res, 1)
	go func() {
		v, found, err := tr.store.Get(lctx, key)
		ch <- res{v, found, err}
	}()
	select {
	case r := <-ch:
		switch {
		case r.err != nil && (errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, context.Canceled)):
			return "timeout", "", r.err
		case r.err != nil:
			return "error", "", r.err
		case !r.found:
			return "miss", "", nil
		}
		id, err := headers.ParseClusterID(r.v)
		if err != nil {
			return "error", "", err
		}
		return "hit", id, nil
	case <-lctx.Done():
		// A client that went away counts as timeout too: for the store,
		// the lookup simply ran out of time.
		return "timeout", "", lctx.Err()
	}
}

// Remember stores clusterID for t off the request path: it returns at once
// and the write runs on a context detached from the request (which ends as
// soon as the handler returns), bounded by the write timeout. Call it only
// for 2xx responses, as soon as their headers arrive.
func (tr *Tracker) Remember(ctx context.Context, t Target, clusterID string, present bool) {
	affinity, _ := tr.entry(t)
	if affinity == "" {
		return
	}
	id, err := headers.ParseClusterID(clusterID)
	if !present || err != nil {
		tr.m.LastClusterWrite.WithLabelValues("skipped").Inc()
		return
	}
	key := Key(t.RoutingKey, t.Model, affinity)
	skip, entry := tr.suppress(key, id)
	if skip {
		return
	}
	wctx := context.WithoutCancel(ctx)
	tr.wg.Go(func() {
		wctx, cancel := context.WithTimeout(wctx, tr.cfg.WriteTimeout)
		defer cancel()
		wctx, span := tr.tracer.Start(wctx, writeSpan)
		defer span.End()
		err := tr.store.Set(wctx, key, id, tr.cfg.TTL)
		result := "success"
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil:
			result = "timeout"
		default:
			result = "error"
		}
		tr.m.LastClusterWrite.WithLabelValues(result).Inc()
		span.SetAttributes(attribute.String("result", result), attribute.String(routingKeyAttr, t.RoutingKey))
		if err != nil {
			span.SetStatus(codes.Error, result)
			tr.warn("last-cluster write failed", result, t, err)
			// The store may not hold it: let the next turn write again.
			if tr.local != nil {
				if e, ok := tr.local.Peek(key); ok && e == entry {
					tr.local.Remove(key)
				}
			}
		}
	})
}

// warn logs without the key or session id; timeouts are sampled.
func (tr *Tracker) warn(msg, result string, t Target, err error) {
	if result == "timeout" && rand.IntN(tr.cfg.TimeoutLogEvery) != 0 { //nolint:gosec // sampling, not security
		return
	}
	tr.log.Warn(msg, "result", result, "request_id", t.RequestID, "function_id", t.RoutingKey, "err", err)
}

// Wait blocks until in-flight writes finish or ctx ends (shutdown bounds
// it so a dead store cannot hold the process).
func (tr *Tracker) Wait(ctx context.Context) {
	if tr == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		tr.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
