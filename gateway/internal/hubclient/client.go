package hubclient

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
)

// New returns a client for the one hub base (scheme and host only),
// dialed by its host name and never resolved by the pool: the single-hub
// client of tests and benchmarks (NewPool is production's). tokenFile,
// when set, is read again whenever it changed (checked on every request),
// so a rotated token applies at once.
func New(base *url.URL, connectTimeout time.Duration, tokenFile string) *Client {
	return newStatic(base, newTransport("", connectTimeout), tokenFile)
}

// NewWithTransport is New over the caller's transport instead of the
// production one, which speaks HTTP/1.1 only: tests use it to reach an
// HTTP/2 upstream, whose broken streams arrive as stream resets rather
// than closed connections.
func NewWithTransport(base *url.URL, rt http.RoundTripper, tokenFile string) *Client {
	return newStatic(base, rt, tokenFile)
}

// Outbound is what the gateway sends for one request: the trusted header
// values it derived. Zero values are omitted.
type Outbound struct {
	RequestID     string
	Model         string
	RoutingKey    string
	RoutingMethod string
	AffinityKey   string
	InputTokens   int64
	TokenEstimate int64
	RequestSLOMs  uint64
	MaxWaitMs     uint64
	LastCluster   string
	// PromptPrefix is the prompt's prefix summary
	// (x-stargate-prompt-prefix, docs/design/prefix-summary.md); "" sends
	// none.
	PromptPrefix string
	// DeadlineMs is what is left of the request's deadline when it is
	// sent (x-stargate-deadline-ms); 0 means no deadline, since the
	// gateway answers a request with less than 1 ms left itself.
	DeadlineMs uint64
	// RetryBudgetMs is the hub's retry budget (x-stargate-max-wait-ms),
	// set from the deadline so that a hub which does not read the
	// deadline still stops retrying when it passes; 0 sends none.
	RetryBudgetMs uint64
	// OutputTokens is the client's x-output-tokens, passed through for the
	// mock engine and load generator (it steers no routing).
	OutputTokens string
	// Stream asks for text/event-stream.
	Stream bool
	// Aggregated says the gateway turns the answer's events into one JSON
	// body (x-stargate-aggregated: true), so the pylon need not flush
	// each event after the first carrying text.
	Aggregated bool
}

// The outbound header names in the form net/http keeps them, computed
// once: Header.Set would canonicalize (and allocate) each name again on
// every request.
var (
	hContentType      = http.CanonicalHeaderKey("Content-Type")
	hAccept           = http.CanonicalHeaderKey("Accept")
	hAuthorization    = http.CanonicalHeaderKey("Authorization")
	hRequestID        = http.CanonicalHeaderKey(headers.RequestID)
	hModel            = http.CanonicalHeaderKey(headers.Model)
	hRoutingKey       = http.CanonicalHeaderKey(headers.RoutingKey)
	hRoutingMethod    = http.CanonicalHeaderKey(headers.RoutingMethod)
	hAffinityKey      = http.CanonicalHeaderKey(headers.CacheAffinityKey)
	hInputTokens      = http.CanonicalHeaderKey(headers.InputTokens)
	hTokenEstimate    = http.CanonicalHeaderKey(headers.TokenEstimate)
	hRequestSLOMs     = http.CanonicalHeaderKey(headers.RequestSLOMs)
	hMaxWaitMs        = http.CanonicalHeaderKey(headers.MaxWaitMs)
	hLastCluster      = http.CanonicalHeaderKey(headers.StargateLastClusterID)
	hPromptPrefix     = http.CanonicalHeaderKey(headers.StargatePromptPrefix)
	hDeadlineMs       = http.CanonicalHeaderKey(headers.StargateDeadlineMs)
	hStargateMaxWait  = http.CanonicalHeaderKey(headers.StargateMaxWaitMs)
	hOutputTokens     = http.CanonicalHeaderKey(headers.OutputTokens)
	hAggregated       = http.CanonicalHeaderKey(headers.StargateAggregated)
	mediaJSON         = "application/json"
	mediaEventStream  = "text/event-stream"
	outboundHeaderCap = 19
)

// Header builds the outbound header set from o alone. Its values share
// one backing array, each capped at its own length so that adding a
// value to one name cannot touch another's.
func (o *Outbound) Header() http.Header {
	h := make(http.Header, outboundHeaderCap)
	vals := make([]string, 0, outboundHeaderCap)
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
	}
	set(hContentType, mediaJSON)
	if o.Stream {
		set(hAccept, mediaEventStream)
	} else {
		set(hAccept, mediaJSON)
	}
	set(hRequestID, o.RequestID)
	set(hModel, o.Model)
	if o.RoutingKey != "" {
		set(hRoutingKey, o.RoutingKey)
	}
	if o.RoutingMethod != "" {
		set(hRoutingMethod, o.RoutingMethod)
	}
	if o.AffinityKey != "" {
		set(hAffinityKey, o.AffinityKey)
	}
	// The hub requires x-input-tokens, even when the estimate is 0.
	set(hInputTokens, strconv.FormatInt(o.InputTokens, 10))
	set(hTokenEstimate, strconv.FormatInt(o.TokenEstimate, 10))
	if o.RequestSLOMs > 0 {
		set(hRequestSLOMs, headers.FormatUint(o.RequestSLOMs))
	}
	if o.MaxWaitMs > 0 {
		set(hMaxWaitMs, headers.FormatUint(o.MaxWaitMs))
	}
	if o.LastCluster != "" {
		set(hLastCluster, o.LastCluster)
	}
	if o.PromptPrefix != "" {
		set(hPromptPrefix, o.PromptPrefix)
	}
	if o.DeadlineMs > 0 {
		set(hDeadlineMs, headers.FormatUint(o.DeadlineMs))
	}
	if o.RetryBudgetMs > 0 {
		set(hStargateMaxWait, headers.FormatUint(o.RetryBudgetMs))
	}
	if o.OutputTokens != "" {
		set(hOutputTokens, o.OutputTokens)
	}
	if o.Aggregated {
		set(hAggregated, "true")
	}
	return h
}

// ErrToken is returned when the hub token file cannot be read.
type ErrToken struct{ Err error }

func (e *ErrToken) Error() string { return "reading --hub-token-file: " + e.Err.Error() }

// Unwrap returns the file error.
func (e *ErrToken) Unwrap() error { return e.Err }

// newRequest returns the request for path on base with header h and
// body, carrying the gateway's token from tok when set.
func newRequest(ctx context.Context, base *url.URL, tok *tokenFile, method, path string, h http.Header, body []byte) (*http.Request, error) {
	u := *base
	u.Path = path
	var req *http.Request
	var err error
	if body == nil {
		req, err = http.NewRequestWithContext(ctx, method, u.String(), nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	}
	if err != nil {
		return nil, fmt.Errorf("building hub request: %w", err)
	}
	req.Header = h
	if tok != nil {
		v, err := tok.bearer()
		if err != nil {
			return nil, &ErrToken{Err: err}
		}
		req.Header[hAuthorization] = []string{v}
	}
	return req, nil
}
