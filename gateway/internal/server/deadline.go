package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// errDeadlineExceeded is the cause of a hub exchange the request's own
// deadline ended (docs/gateway.md#request-deadline); it answers 504
// deadline_exceeded, or cuts a started stream with an error event of that
// code.
var errDeadlineExceeded = errors.New("the request's deadline passed (the client's X-Stainless-Timeout or --request-deadline)")

// requestBudget is the request's end-to-end budget from its arrival: the
// smaller of the client's own timeout, when it covers this request (see
// clientTimeout), and the configured --request-deadline; 0 means none.
func requestBudget(h http.Header, stream bool, configured time.Duration) time.Duration {
	client := clientTimeout(h, stream)
	switch {
	case client == 0:
		return configured
	case configured == 0:
		return client
	}
	return min(client, configured)
}

// clientTimeout is the client's timeout from X-Stainless-Timeout, 0 when it
// sent none the gateway can rely on. The OpenAI SDKs send it in seconds:
// whole from Go and Node, a decimal such as "600.0" from others, and "0"
// or nothing when there is none. A value that is not a plain non-negative
// decimal, or is above headers.MaxDeadline, is ignored rather than refused:
// the header is advice about the client, not part of the API.
//
// What the timeout covers differs by SDK. The Go SDK's bounds the whole
// exchange, a stream's body included; the Node SDK's ends at the response
// head, and httpx (Python) applies it to each read. A non-streaming answer
// is written only once it is whole, so there every SDK's timeout is the
// whole exchange; a stream's head goes out at once, so its timeout is taken
// only from the Go SDK (X-Stainless-Lang: go): cutting a Node or Python
// stream at a bound its client never applies would end answers the client
// is still reading.
func clientTimeout(h http.Header, stream bool) time.Duration {
	v := strings.TrimSpace(headers.First(h, canonStainlessTimeout))
	if v == "" {
		return 0
	}
	if stream && !strings.EqualFold(strings.TrimSpace(headers.First(h, canonStainlessLang)), "go") {
		return 0
	}
	d, ok := parseSeconds(v)
	if !ok || d > headers.MaxDeadline {
		return 0
	}
	return d
}

// The client headers clientTimeout reads, canonical.
var (
	canonStainlessTimeout = http.CanonicalHeaderKey(headers.StainlessTimeout)
	canonStainlessLang    = http.CanonicalHeaderKey(headers.StainlessLang)
)

// parseSeconds parses digits with an optional fraction ("2", "2.5",
// "600.0") as seconds. Signs, exponents, "inf" and "nan", which
// strconv.ParseFloat would accept, are refused first, as is a value too
// long to be a sane timeout.
func parseSeconds(s string) (time.Duration, bool) {
	if len(s) > 32 {
		return 0, false
	}
	whole, frac, dot := strings.Cut(s, ".")
	if !digits(whole) || (dot && !digits(frac)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f > headers.MaxDeadline.Seconds() {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sendDeadline puts what is left of the request's deadline on the hub
// request: x-stargate-deadline-ms, x-max-wait-ms capped by it (no routing
// wait may outlast the deadline) and the hub's retry budget
// x-stargate-max-wait-ms (so a hub that does not read the deadline still
// stops retrying when it passes). Whole milliseconds rounded up
// (headers.DeadlineMillis): the gateway's own timer ends the exchange at
// the deadline, so the hub's may only come after it and never answers
// for the gateway. False means nothing is left: the client has its 504
// and the hub is not called.
func (x *exchange) sendDeadline() bool {
	if x.deadline.IsZero() {
		return true
	}
	ms := headers.DeadlineMillis(x.deadline.Sub(x.s.d.Clock.Now()))
	if ms == 0 {
		x.s.d.Log.Warn("request deadline passed before the hub was called", "request_id", x.st.requestID, "err", errDeadlineExceeded)
		writeTimeout(x.w, errDeadlineExceeded)
		return false
	}
	out := &x.p.Out
	out.DeadlineMs, out.RetryBudgetMs = ms, ms
	if out.MaxWaitMs > ms {
		out.MaxWaitMs = ms
	}
	return true
}

// refreshDeadline puts what is left of the deadline on the hub request
// again before a retry, so the next hub gets the true remainder; a
// deadline that has passed leaves the values as they were (deadlineLeft
// refuses the retry first).
func (x *exchange) refreshDeadline() {
	if x.deadline.IsZero() {
		return
	}
	if ms := headers.DeadlineMillis(x.deadline.Sub(x.s.d.Clock.Now())); ms > 0 {
		out := &x.p.Out
		out.DeadlineMs, out.RetryBudgetMs = ms, ms
		out.MaxWaitMs = min(out.MaxWaitMs, ms)
	}
}

// deadlineLeft reports whether any of the request's deadline is left (no
// deadline: always), which a retry needs.
func (x *exchange) deadlineLeft() bool {
	return x.deadline.IsZero() || x.s.d.Clock.Now().Before(x.deadline)
}

// deadlineCut is the error event of a stream the request's deadline cut.
var deadlineCut = openai.Error{Type: openai.TypeServer, Code: headers.ErrorCodeDeadlineExceeded,
	Message: "the request's deadline passed before the answer was complete; the answer is cut short"}
