package proxy

import (
	"errors"
	"net/http"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// PrefixIndex is the hub's memory of which clusters hold which prompt
// prefixes, as the proxy reads and feeds it (prefixindex.Index). Match and
// Mark must be safe for concurrent use; Match must not retain dst.
type PrefixIndex interface {
	Match(model string, s prefixhash.Summary, dst []routing.PrefixHolder) []routing.PrefixHolder
	Mark(model string, s prefixhash.Summary, clusterID string)
}

// parsePrefix reads x-stargate-prompt-prefix for a route that uses
// prefixes: the summary, what the index knows of it, and the key that
// chooses the backend and engine inside the chosen cluster. Any route
// consumes the header (it is never forwarded); only a prefix-aware one
// pays for parsing it. A malformed summary or one of another version is
// no summary: the request routes as if the gateway had sent none, since
// the prefix is a hint, never a reason to refuse.
func (p *Proxy) parsePrefix(h http.Header, req *request, rr *routing.Request, route lb.Route) {
	if !route.UsesPrefix || p.cfg.Prefix == nil {
		return
	}
	v := headers.First(h, canonPromptPrefix)
	if v == "" {
		p.cfg.Metrics.prefixSummary(req.target, "absent")
		return
	}
	s, err := prefixhash.ParseHeader(v)
	switch {
	case errors.Is(err, prefixhash.ErrUnknownVersion):
		p.cfg.Metrics.prefixSummary(req.target, "unknown_version")
		return
	case err != nil:
		p.cfg.Metrics.prefixSummary(req.target, "invalid")
		p.cfg.Log.Debug("ignoring malformed prompt prefix summary", "request_id", rr.ID, "error", err)
		return
	case s.Empty():
		p.cfg.Metrics.prefixSummary(req.target, "absent")
		return
	}
	p.cfg.Metrics.prefixSummary(req.target, "ok")
	req.prefix = s
	req.anchor, _ = prefixhash.AnchorHash(s)
	rr.Prefix = routing.PrefixMatch{TotalBlocks: s.TotalBlocks, BlockTokens: s.BlockTokens, Stride: s.Stride,
		Holders: p.cfg.Prefix.Match(req.target.Model, s, nil)}
	if k := prefixhash.InnerKey(rr.AffinityKey, s); k != rr.AffinityKey {
		req.backendKey = k
	}
}

// markPrefix records that the request's cluster answered it: from now on
// the index names that cluster as a holder of every checkpoint of the
// prompt. It runs when the response's headers arrive with a 2xx, since
// only then has the cluster's engine taken the prompt, and only for
// decisions that asked for it (an overflow serves without becoming a
// holder).
func (p *Proxy) markPrefix(req *request, dec *routing.Decision, status int) {
	if req.prefix.Empty() || status < 200 || status > 299 {
		return
	}
	if tier := dec.PrefixTier.String(); tier != "" {
		p.cfg.Metrics.prefixRouted(req.target, tier)
	}
	if dec.PrefixMark {
		p.cfg.Prefix.Mark(req.target.Model, req.prefix, dec.ClusterID)
	}
}

var canonPromptPrefix = http.CanonicalHeaderKey(headers.StargatePromptPrefix)

func (m *Metrics) prefixSummary(t routing.Target, result string) {
	if m != nil {
		m.prefixSummaries.WithLabelValues(t.RoutingKey, t.Model, result).Inc()
	}
}

func (m *Metrics) prefixRouted(t routing.Target, tier string) {
	if m != nil {
		m.prefixTiers.WithLabelValues(t.RoutingKey, t.Model, tier).Inc()
	}
}
