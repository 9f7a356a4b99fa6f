package hubclient

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
)

// New returns a client for the one hub base (scheme and host only),
// dialed by its host name and never resolved by the pool: the single-hub
// client of tests and benchmarks (NewPool is production's). tokenFile,
// when set, is read on every request so a rotated token applies at once.
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
}

// Header builds the outbound header set from o alone.
func (o *Outbound) Header() http.Header {
	h := make(http.Header, 15)
	h.Set("Content-Type", "application/json")
	if o.Stream {
		h.Set("Accept", "text/event-stream")
	} else {
		h.Set("Accept", "application/json")
	}
	h.Set(headers.RequestID, o.RequestID)
	h.Set(headers.Model, o.Model)
	if o.RoutingKey != "" {
		h.Set(headers.RoutingKey, o.RoutingKey)
	}
	if o.RoutingMethod != "" {
		h.Set(headers.RoutingMethod, o.RoutingMethod)
	}
	if o.AffinityKey != "" {
		h.Set(headers.CacheAffinityKey, o.AffinityKey)
	}
	// The hub requires x-input-tokens, even when the estimate is 0.
	h.Set(headers.InputTokens, strconv.FormatInt(o.InputTokens, 10))
	h.Set(headers.TokenEstimate, strconv.FormatInt(o.TokenEstimate, 10))
	if o.RequestSLOMs > 0 {
		h.Set(headers.RequestSLOMs, headers.FormatUint(o.RequestSLOMs))
	}
	if o.MaxWaitMs > 0 {
		h.Set(headers.MaxWaitMs, headers.FormatUint(o.MaxWaitMs))
	}
	if o.LastCluster != "" {
		h.Set(headers.StargateLastClusterID, o.LastCluster)
	}
	if o.PromptPrefix != "" {
		h.Set(headers.StargatePromptPrefix, o.PromptPrefix)
	}
	if o.DeadlineMs > 0 {
		h.Set(headers.StargateDeadlineMs, headers.FormatUint(o.DeadlineMs))
	}
	if o.RetryBudgetMs > 0 {
		h.Set(headers.StargateMaxWaitMs, headers.FormatUint(o.RetryBudgetMs))
	}
	if o.OutputTokens != "" {
		h.Set(headers.OutputTokens, o.OutputTokens)
	}
	return h
}

// ErrToken is returned when the hub token file cannot be read.
type ErrToken struct{ Err error }

func (e *ErrToken) Error() string { return "reading --hub-token-file: " + e.Err.Error() }

// Unwrap returns the file error.
func (e *ErrToken) Unwrap() error { return e.Err }

// newRequest returns the request for path on base with header h and
// body, carrying the gateway's token from tokenFile when set.
func newRequest(ctx context.Context, base *url.URL, tokenFile, method, path string, h http.Header, body []byte) (*http.Request, error) {
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
	if tokenFile != "" {
		tok, err := cli.ReadSecretFile(tokenFile)
		if err != nil {
			return nil, &ErrToken{Err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}
