package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/server"
)

// start brings up the stores (the Olric node and its DMaps, or the
// in-process ones), builds the API handler over them and installs it. p
// gets whatever started, also on error, so Run can take it down.
func (g *Gateway) start(ctx context.Context, p *parts) error {
	// The hubs are resolved once before the API opens, so the first
	// requests have somewhere to go; Run keeps them current.
	g.hub.Resolve(ctx)
	if n := g.hub.Len(); n == 0 {
		g.log.Warn("--hub-url resolves to no hub yet; requests answer 503 hub_unavailable until one resolves", "resolve_interval", g.cfg.HubResolveInterval.String())
	} else {
		g.log.Info("hubs", "count", n, "hubs", g.hub.Hubs())
	}
	store, counter, err := g.openStores(ctx, p)
	if err != nil {
		return err
	}
	lc := g.cfg.LastCluster
	// The global provider: the OTLP exporter main installed with
	// --otel-endpoint. Without one tracing is off and the server gets no
	// provider, which lets it skip the span machinery for requests that
	// carry no trace context (the client's is still continued to the hub).
	var tp trace.TracerProvider
	if g.cfg.Tracing.Endpoint != "" {
		tp = otel.GetTracerProvider()
	}
	tc := lastcluster.Config{Enabled: lc.Enabled && store != nil, TTL: lc.TTL, LookupTimeout: lc.LookupTimeout, WriteTimeout: lc.WriteTimeout}
	if p.node != nil {
		// Without Olric the store is an in-process LRU already.
		tc.LocalTTL, tc.LocalMaxEntries = lc.LocalTTL, lc.LocalMaxEntries
	}
	p.tracker = lastcluster.New(tc, store, g.m, tp, g.log, g.clk)
	var limiter *ratelimit.Limiter
	if rl := g.cfg.RateLimit; rl.Enabled {
		lcfg := ratelimit.Config{FailOpen: rl.FailOpen, StoreTimeout: rl.StoreTimeout}
		if p.node == nil {
			// The in-process counter answers under a mutex: nothing to
			// bound.
			lcfg.StoreTimeout = 0
		}
		if p.node != nil && rl.Mode == config.RateLimitLocal {
			p.synced = ratelimit.NewSynced(counter, ratelimit.SyncConfig{Interval: rl.SyncInterval, StoreTimeout: rl.StoreTimeout}, g.clk, g.m)
			if n, err := p.node.Members(ctx); err == nil {
				p.synced.SetReplicas(n)
			}
			lcfg.Synced = p.synced
		}
		limiter = ratelimit.New(counter, lcfg, g.clk, g.m, g.log)
	}
	cfg := g.cfg
	var h http.Handler = server.New(server.Deps{
		Hub: g.hub, HubAttempts: cfg.HubAttempts, Tracker: p.tracker, Limiter: limiter, Metrics: g.m, Log: g.log, Clock: g.clk,
		Keys: cfg.APIKeys, Models: cfg.Models, MaxBodyBytes: cfg.MaxBodyBytes, RoutingKeyPrefix: cfg.RoutingKeyPrefix,
		PromptPrefix: cfg.PromptPrefix, ConversationAnchor: cfg.LastCluster.Anchor, ModelURIAllowlist: cfg.ModelURIAllowlist, DefaultMaxOutputTokens: cfg.RateLimit.DefaultMaxOutputTokens,
		HubResponseHeaderTimeout: cfg.HubResponseHeaderTimeout, HubRequestTimeout: cfg.HubRequestTimeout, RequestDeadline: cfg.RequestDeadline,
		TracerProvider: tp,
	})
	g.api.Store(&h)
	return nil
}

// openStores returns the last-cluster store and the rate-limit counter:
// DMaps on the embedded Olric node when it is enabled (shared by every
// replica), otherwise an in-process LRU (only when last-cluster tracking
// is on; nil otherwise) and an in-process counter, per replica.
func (g *Gateway) openStores(ctx context.Context, p *parts) (lastcluster.Store, ratelimit.Counter, error) {
	if !g.cfg.Olric.Enabled {
		var store lastcluster.Store
		if lc := g.cfg.LastCluster; lc.Enabled {
			store = lastcluster.NewLRU(lc.LocalMaxEntries, lc.TTL)
		}
		return store, ratelimit.NewLocal(g.clk), nil
	}
	o := g.cfg.Olric
	n, err := olricnode.Start(ctx, o.Config, g.log)
	if err != nil {
		return nil, nil, err
	}
	p.node = n
	if err := g.reg.Register(olricnode.NewCollector(n)); err != nil {
		return nil, nil, fmt.Errorf("registering the olric collector: %w", err)
	}
	// The last-cluster store takes the embedded client (its Put with
	// expiry is one write wherever it runs); the counters take the
	// cluster client, whose Incr runs on the key's owner.
	lc, err := n.Embedded().NewDMap(o.LastClusterDMap)
	if err != nil {
		return nil, nil, fmt.Errorf("olric dmap %s: %w", o.LastClusterDMap, err)
	}
	rl, err := n.Cluster().NewDMap(o.RateLimitDMap)
	if err != nil {
		return nil, nil, fmt.Errorf("olric dmap %s: %w", o.RateLimitDMap, err)
	}
	return lastcluster.Olric{DM: lc}, ratelimit.Olric{DM: rl}, nil
}

// watchMembers keeps the Olric member gauge current, and the local rate
// limiter's replica count (synced may be nil) and, when membership
// changes, refreshes the cluster client's partition owners at once rather
// than at its next periodic fetch: until then rate-limit adds may run on a
// former owner, where they are not atomic.
func watchMembers(ctx context.Context, node *olricnode.Node, m *metrics.Metrics, synced *ratelimit.Synced) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := -1
	for {
		if n, err := node.Members(ctx); err == nil {
			m.OlricMembers.Set(float64(n))
			if synced != nil {
				synced.SetReplicas(n)
			}
			if last >= 0 && n != last {
				_ = node.RefreshRouting(ctx)
			}
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
