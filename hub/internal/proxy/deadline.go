package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// errDeadlineExceeded is the cause with which a request's context ends at
// its deadline (x-stargate-deadline-ms). Everything the request waits on
// watches that context (routing waits, the wait for a backend, the
// attempt's round trip and the relayed body), so the deadline ends each of
// them; the cause tells that end from a client that went away.
var errDeadlineExceeded = errors.New("the request's deadline (" + headers.StargateDeadlineMs + ") passed")

// The stages at which a deadline ends a request: the stage label of
// stargate_deadline_exceeded_total.
const (
	// stageReceived: the deadline had passed when the request arrived
	// (x-stargate-deadline-ms: 0).
	stageReceived = "received"
	// stageRouting: the request was waiting for a cluster with room or
	// for a backend to register.
	stageRouting = "routing"
	// stageUpstream: an attempt was sent and no response head had come.
	stageUpstream = "upstream"
	// stageStreaming: the answer was being relayed; the stream is cut.
	stageStreaming = "streaming"
)

// parseDeadline reads x-stargate-deadline-ms, the budget left when the
// gateway sent the request, into a deadline on the hub's clock from the
// request's start. A malformed value, or one above headers.MaxDeadline, is
// a 400 like any malformed numeric header; absent is no deadline.
func parseDeadline(h http.Header, req *request) *openai.Error {
	d, present, err := headers.GetDeadline(h)
	if err != nil {
		return openai.BadRequest(headers.StargateDeadlineMs, "invalid_header", "%v", err)
	}
	if present {
		req.deadline = req.start.Add(d)
	}
	return nil
}

// withDeadline returns r with a context that ends at the request's
// deadline with errDeadlineExceeded as its cause, timed on the proxy's
// clock. The returned func stops the timer.
func (p *Proxy) withDeadline(r *http.Request, req *request) (*http.Request, func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	t := p.cfg.Clock.AfterFunc(req.deadline.Sub(p.cfg.Clock.Now()), func() { cancel(errDeadlineExceeded) })
	req.ctx = ctx
	return r.WithContext(ctx), func() {
		t.Stop()
		cancel(nil)
	}
}

// deadlinePassed reports whether the request's deadline ended its
// context (rather than the client leaving first).
func (req *request) deadlinePassed() bool {
	return req.ctx != nil && errors.Is(context.Cause(req.ctx), errDeadlineExceeded)
}

// pastDeadline reports whether the request's deadline ended it, or has
// passed on the clock although the deadline's timer has not fired yet: a
// timer on a busy machine fires late, and the pylon's deadline, which
// falls after the hub's, can then end the attempt first. A failure seen
// past the deadline is the deadline's doing, never the backend's.
func (p *Proxy) pastDeadline(req *request) bool {
	return req.deadlinePassed() || (!req.deadline.IsZero() && !p.cfg.Clock.Now().Before(req.deadline))
}

// forwardDeadline sets x-stargate-deadline-ms on an attempt to what is left
// of the request's deadline now, so a retry sends less than the first
// attempt. It is rounded up (headers.DeadlineMillis): the hub's own timer
// ends the request at its deadline, and the pylon's, a moment later, only
// ends work whose cancellation was lost. The inbound value, which
// forwardHeaders copied, is replaced; a request without a deadline sends
// none.
func (p *Proxy) forwardDeadline(out *http.Request, req *request) {
	if req.deadline.IsZero() {
		return
	}
	out.Header[sendDeadlineMs] = []string{headers.FormatUint(headers.DeadlineMillis(req.deadline.Sub(p.cfg.Clock.Now())))}
}

var (
	canonErrorCode = http.CanonicalHeaderKey(headers.StargateErrorCode)
)

// pylonDeadline reports whether an upstream answer is the pylon's 504 for
// the request's deadline (x-stargate-error-code: deadline_exceeded). The
// pylon's deadline comes after the hub's, so this answer only wins a race
// with the hub's own timer; the hub then answers as its timer would have.
func pylonDeadline(resp *http.Response) bool {
	return resp.StatusCode == http.StatusGatewayTimeout && headers.First(resp.Header, canonErrorCode) == headers.ErrorCodeDeadlineExceeded
}

// deadlineExceeded answers a request whose deadline passed before any
// upstream head was written: 504 deadline_exceeded (also in
// x-stargate-error-code), counted by stage.
func (p *Proxy) deadlineExceeded(w http.ResponseWriter, req *request, backendID, stage string) {
	p.logDeadline(req, backendID, stage)
	w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeDeadlineExceeded)
	openai.WriteError(w, &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer,
		Code: headers.ErrorCodeDeadlineExceeded, Message: "the request's deadline passed before an answer began"})
	p.done(req, backendID, http.StatusGatewayTimeout)
}

// logDeadline counts and logs a request its deadline ended.
func (p *Proxy) logDeadline(req *request, backendID, stage string) {
	t := req.target
	p.cfg.Metrics.deadlineExceeded(t, stage)
	p.cfg.Log.Warn("request deadline passed; its work is cancelled", "request_id", req.pass.Req.ID, "model", t.Model,
		"routing_key", t.RoutingKey, "inference_server_id", backendID, "stage", stage,
		"elapsed", p.cfg.Clock.Since(req.start).Round(time.Millisecond))
}
