package engineproxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
)

// errDeadlineExceeded is the cause with which a request's context ends at
// its deadline (x-stargate-deadline-ms). The engine request, the wait for
// its head and the relayed body all run on that context, so the deadline
// cancels the engine's work; the cause tells that end from the hub
// resetting the stream.
var errDeadlineExceeded = errors.New("the request's deadline (" + headers.StargateDeadlineMs + ") passed")

// The stages at which a deadline ends a request: the stage label of
// pylon_deadline_exceeded_total.
const (
	// stageReceived: no time was left before the engine was called (the
	// hub sent 0, or the body and admission used the rest).
	stageReceived = "received"
	// stageEngine: the engine had the request and had sent no head.
	stageEngine = "engine"
	// stageStreaming: the engine's answer was being relayed; the stream
	// to the hub is reset.
	stageStreaming = "streaming"
)

// readDeadline reads x-stargate-deadline-ms, what the hub had left of the
// request's deadline when it sent the attempt, as a deadline on the
// pylon's clock from start; zero means none. bad is the problem detail of
// a malformed or out-of-range value.
func readDeadline(h http.Header, start time.Time) (deadline time.Time, bad string) {
	left, present, err := headers.GetDeadline(h)
	switch {
	case err != nil:
		return time.Time{}, "invalid " + headers.StargateDeadlineMs + " header"
	case !present:
		return time.Time{}, ""
	}
	return start.Add(left), ""
}

// withDeadline returns r with a context that ends at deadline with
// errDeadlineExceeded as its cause, timed on the proxy's clock. The
// returned func stops the timer.
func (px *Proxy) withDeadline(r *http.Request, deadline time.Time) (*http.Request, func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	t := px.cfg.Clock.AfterFunc(deadline.Sub(px.cfg.Clock.Now()), func() { cancel(errDeadlineExceeded) })
	return r.WithContext(ctx), func() {
		t.Stop()
		cancel(nil)
	}
}

// deadlinePassed reports whether the request's deadline ended ctx (rather
// than the hub going away first).
func deadlinePassed(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errDeadlineExceeded)
}

// deadlineExceeded answers a request whose deadline passed before the
// engine's head: 504 in the pylon's problem shape, reason
// deadline_exceeded, also in x-stargate-error-code so the hub can tell it
// from an engine's 504 and answer it as its own deadline (it does not
// retry it: no time is left, and it is no failure of this backend).
func (px *Proxy) deadlineExceeded(w http.ResponseWriter, info RequestInfo, stage string) {
	px.logDeadline(info, stage)
	w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeDeadlineExceeded)
	problem(w, http.StatusGatewayTimeout, "the request's deadline passed before the engine answered",
		map[string]any{"reason": headers.ErrorCodeDeadlineExceeded})
}

// logDeadline counts and logs a request its deadline ended.
func (px *Proxy) logDeadline(info RequestInfo, stage string) {
	px.metrics.deadlineExceeded(info, stage)
	px.cfg.Log.Warn("request deadline passed; the engine request is cancelled", "request_id", info.ID, "model", info.Model, "stage", stage)
}
