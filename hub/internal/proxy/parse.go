package proxy

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// MaxInputTokens is the largest x-input-tokens the hub accepts; a larger
// value is a 400. It is far beyond any model's context (and beyond what a
// 64 MiB body can hold), and it bounds what one request adds to a
// cluster's queued input: a sender of 2^64-1 would otherwise make its
// cluster look infinitely loaded until the next registration.
const MaxInputTokens = 1<<32 - 1

// request is one parsed inbound request.
type request struct {
	target routing.Target
	// gen is the load-balancer configuration the request captured when it
	// arrived; every pass, wait and retry uses it.
	gen *Generation
	// pass is the request's routing state across passes: its route, the
	// request as the load balancer sees it, and its wait deadlines.
	pass        dispatch.Pass
	body        []byte
	start       time.Time
	budgetUntil time.Time // zero: no budget header (retries limited by counts only)
	noRetries   bool      // budget header 0
	span        trace.Span
	// deadline is when the request's x-stargate-deadline-ms runs out on
	// the hub's clock; zero means none. ctx, set with it, is the request's
	// context that ends at the deadline (see withDeadline).
	deadline time.Time
	ctx      context.Context
	// expired is set when the deadline ended the request before any
	// answer was written: serve then answers the 504.
	expired bool
	// prefix is the prompt's summary when the route uses prefixes and the
	// gateway sent a valid one (parsePrefix); the zero value otherwise.
	prefix prefixhash.Summary
	// anchor is the summary's anchor checkpoint (prefixhash.AnchorHash),
	// 0 without a summary: the routing page groups prompts by it.
	anchor uint64
	// backendKey, when set, replaces the affinity key for choosing the
	// backend and engine inside a cluster (prefixhash.AnchorKey).
	backendKey string
	// status is the answer's status as done saw it, and served the
	// cluster whose answer was written ("" when the hub answered itself).
	status int
	served string
}

// innerKey is the key that picks the backend, and through the forwarded
// x-cache-affinity-key the engine, inside the chosen cluster.
func (req *request) innerKey() string {
	if req.backendKey != "" {
		return req.backendKey
	}
	return req.pass.Req.AffinityKey
}

// parse reads the headers in the order of
// docs/design/hub-request.md#parse-order; the first failure is a 400 that
// names the header. Upstream Stargate answers these 400s with an empty
// body; we keep its status and say why in the OpenAI error shape.
func (p *Proxy) parse(r *http.Request, gen *Generation) (*request, *openai.Error) {
	h := r.Header
	req := &request{start: p.cfg.Clock.Now(), gen: gen}
	rr := routing.Request{ReceivedAt: req.start}
	if oerr := parseTarget(h, req, &rr); oerr != nil {
		return nil, oerr
	}
	requested, oerr := p.parseMethod(gen.Resolver, h, &rr, req.target)
	if oerr != nil {
		return nil, oerr
	}
	maxWait, hasMaxWait, oerr := parseQoS(h, &rr, p.limits.MaxRoutingWait)
	if oerr != nil {
		return nil, oerr
	}
	rr.AffinityKey, _ = headers.GetText(h, headers.CacheAffinityKey)
	route, oerr := p.resolve(gen.Resolver, &rr, req.target, requested)
	if oerr != nil {
		return nil, oerr
	}
	if oerr := p.parseBudget(h, req); oerr != nil {
		return nil, oerr
	}
	rr.LastClusterID = lastClusterHint(h)
	p.parsePrefix(h, req, &rr, route)
	if oerr := parseDeadline(h, req); oerr != nil {
		return nil, oerr
	}
	req.pass = dispatch.NewPass(route, rr, maxWait, hasMaxWait, p.limits)
	return req, nil
}

// parseTarget reads the required identity headers (x-request-id,
// x-input-tokens, x-model) and the optional x-routing-key.
func parseTarget(h http.Header, req *request, rr *routing.Request) *openai.Error {
	id, ok := headers.GetText(h, headers.RequestID)
	if !ok {
		return openai.BadRequest(headers.RequestID, "missing_header", "header %s is required", headers.RequestID)
	}
	tok, present, err := headers.GetUint64(h, headers.InputTokens)
	if !present {
		return openai.BadRequest(headers.InputTokens, "missing_header", "header %s is required", headers.InputTokens)
	}
	if err != nil {
		return openai.BadRequest(headers.InputTokens, "invalid_header", "%v", err)
	}
	if tok > MaxInputTokens {
		return openai.BadRequest(headers.InputTokens, "invalid_header",
			"invalid %s header: value is out of range (want a decimal integer from 0 to %d)", headers.InputTokens, uint64(MaxInputTokens))
	}
	model, ok := headers.GetText(h, headers.Model)
	if !ok {
		return openai.BadRequest(headers.Model, "missing_header", "header %s is required", headers.Model)
	}
	rk, _ := headers.GetText(h, headers.RoutingKey)
	req.target = routing.Target{RoutingKey: rk, Model: model}
	rr.ID, rr.InputTokens = id, tok
	return nil
}

// parseMethod reads x-routing-method and returns its trimmed value, ""
// when absent. An unknown method is refused here, before the numeric
// headers are read; whether a known one is configured for the model is
// Resolve's answer, later. Only the method is checked: the parameters of a
// routing expression (method;k=v…) are the resolver's, which reports its
// own error classes.
func (p *Proxy) parseMethod(resolver lb.Resolver, h http.Header, rr *routing.Request, t routing.Target) (string, *openai.Error) {
	vs := h.Values(headers.RoutingMethod)
	if len(vs) == 0 {
		return "", nil
	}
	v, ok := headers.ParseText(vs[0])
	if !ok {
		return "", openai.BadRequest(headers.RoutingMethod, "invalid_routing_method", "header %s must be visible ASCII and not blank", headers.RoutingMethod)
	}
	method, _, _ := strings.Cut(v, ";")
	if !resolver.KnownMethod(method) {
		p.cfg.Log.Warn("invalid routing algorithm header", "request_id", rr.ID, "model", t.Model, "rejection_reason", "unknown_method")
		return "", openai.BadRequest(headers.RoutingMethod, "unknown_method", "unknown routing method %q", v)
	}
	return v, nil
}

// parseQoS reads x-priority, x-max-wait-ms and x-request-slo-ms into rr,
// and returns the wait and whether the request sent it: an absent
// x-max-wait-ms still allows the load balancer's timed waits, a present
// one bounds them and allows untimed waits. x-max-wait-ms is clamped to
// maxWait (the routing wait cap, 60 s), so no later deadline arithmetic
// sees more; x-request-slo-ms saturates at the largest Duration, which is
// safe because it is only ever a divisor of elapsed time
// (docs/hub.md#request-contract).
func parseQoS(h http.Header, rr *routing.Request, maxWait time.Duration) (time.Duration, bool, *openai.Error) {
	prio, _, err := headers.GetUint32(h, headers.Priority)
	if err != nil {
		return 0, false, openai.BadRequest(headers.Priority, "invalid_header", "%v", err)
	}
	wait, hasMaxWait, err := headers.GetUint64(h, headers.MaxWaitMs)
	if err != nil {
		return 0, false, openai.BadRequest(headers.MaxWaitMs, "invalid_header", "%v", err)
	}
	slo, _, err := headers.GetUint64(h, headers.RequestSLOMs)
	if err != nil {
		return 0, false, openai.BadRequest(headers.RequestSLOMs, "invalid_header", "%v", err)
	}
	rr.Priority, rr.MaxWait, rr.SLO = prio, min(headers.MillisDuration(wait), maxWait), headers.MillisDuration(slo)
	return rr.MaxWait, hasMaxWait, nil
}

// resolve finds the request's route and applies its affinity-key
// requirement.
func (p *Proxy) resolve(resolver lb.Resolver, rr *routing.Request, t routing.Target, requested string) (lb.Route, *openai.Error) {
	route, rej := resolver.Resolve(t, requested)
	if rej != nil {
		p.cfg.Log.Warn("invalid routing algorithm header", "request_id", rr.ID, "model", t.Model, "rejection_reason", rej.Class)
		return lb.Route{}, openai.BadRequest(headers.RoutingMethod, rej.Class, "%s", rej.Message)
	}
	if route.RequireAffinityKey && rr.AffinityKey == "" {
		p.cfg.Log.Warn("missing cache affinity key for load-balanced proxy request", "request_id", rr.ID, "model", t.Model)
		return lb.Route{}, openai.BadRequest(headers.CacheAffinityKey, "missing_header", "header %s is required for model %s", headers.CacheAffinityKey, t.Model)
	}
	return route, nil
}

// parseBudget reads the retry budget header (--proxy-retry-budget-header):
// a deadline from the request's start for retries, 0 meaning none at all.
func (p *Proxy) parseBudget(h http.Header, req *request) *openai.Error {
	name := p.cfg.RetryBudgetHeader
	if name == "" {
		return nil
	}
	budget, present, err := headers.GetUint64(h, name)
	if err != nil {
		return openai.BadRequest(name, "invalid_header", "%v", err)
	}
	if !present {
		return nil
	}
	// Overflow is a deadline a time.Duration cannot hold (about 292
	// years); any shorter budget is valid.
	if budget > math.MaxInt64/uint64(time.Millisecond) {
		return openai.BadRequest(name, "invalid_header", "header %s is out of range", name)
	}
	req.budgetUntil = req.start.Add(headers.MillisDuration(budget))
	req.noRetries = budget == 0
	return nil
}

// lastClusterHint reads x-stargate-last-cluster-id. The hint is consumed
// here and never forwarded (forwardHeaders drops it); a malformed one is
// no hint.
func lastClusterHint(h http.Header) string {
	last, _ := headers.GetText(h, headers.StargateLastClusterID)
	if len(last) > headers.MaxClusterIDLen {
		return ""
	}
	return last
}
