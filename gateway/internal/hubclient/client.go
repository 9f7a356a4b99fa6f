package hubclient

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Client talks to one hub base URL.
type Client struct {
	base      *url.URL
	hc        *http.Client
	tokenFile string
}

// New returns a client for base (scheme and host only). tokenFile, when
// set, is read on every request so a rotated token applies at once.
func New(base *url.URL, connectTimeout time.Duration, tokenFile string) *Client {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:       nil,
		DialContext: d.DialContext,
		// Every gateway request goes to the same few hub hosts: the
		// default of 2 idle connections per host would redial constantly.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// Bodies are relayed byte for byte; transparent gzip would change
		// what the client sees.
		DisableCompression: true,
		// The wait for the response head is bounded per request by the
		// server on its injected clock (--hub-response-header-timeout),
		// not here, so tests can drive it without sleeping.
		ResponseHeaderTimeout: 0,
		ForceAttemptHTTP2:     false,
	}
	return NewWithTransport(base, tr, tokenFile)
}

// NewWithTransport is New over the caller's transport instead of the
// production one, which speaks HTTP/1.1 only: tests use it to reach an
// HTTP/2 upstream, whose broken streams arrive as stream resets rather
// than closed connections.
func NewWithTransport(base *url.URL, rt http.RoundTripper, tokenFile string) *Client {
	return &Client{base: base, hc: &http.Client{Transport: rt}, tokenFile: tokenFile}
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
	h := make(http.Header, 14)
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

// NewRequest returns the hub request for path with header h and body.
func (c *Client) NewRequest(ctx context.Context, method, path string, h http.Header, body []byte) (*http.Request, error) {
	u := *c.base
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
	if c.tokenFile != "" {
		tok, err := cli.ReadSecretFile(c.tokenFile)
		if err != nil {
			return nil, &ErrToken{Err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// Do sends req.
func (c *Client) Do(req *http.Request) (*http.Response, error) { return c.hc.Do(req) }

// CloseIdle closes idle hub connections (shutdown, tests).
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }
