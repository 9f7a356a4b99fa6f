package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/headers"
)

// forwardHeaders is the request header set sent to the pylon: everything
// but hop-by-hop headers, Host, the routing method, the hint the hub
// consumes, and the headers only the hub or the pylon may set
// (docs/design/headers.md#who-strips-what).
//
// The names the hub knows are written in lower case (sendNames), the form
// HTTP/2 puts on the wire: the tunnel's client lowers every name that is
// not, allocating a new string for each uncommon name of every request,
// while a lower-case name passes as it is. Such a name is not canonical,
// so the set is read and written only through the keys of sendNames, never
// with Header.Get or Set.
func forwardHeaders(in http.Header) http.Header {
	// Room for the headers the hub adds (queue estimate, deadline,
	// affinity key, trace context), so that adding them never grows the map.
	out := make(http.Header, len(in)+4)
	headers.CopyExceptAs(out, in, notForwarded, sendNames)
	return out
}

// sendNames maps the canonical form of each header the gateway sends and
// the hub forwards, or the hub sets on an attempt, to its lower-case form,
// the key forwardHeaders files it under. The trace context is not in it:
// the propagator writes its canonical keys, and an inbound copy under
// another key would be sent beside the attempt's own.
var sendNames = func() map[string]string {
	names := []string{headers.RequestID, headers.Model, headers.RoutingKey, headers.InputTokens, headers.TokenEstimate,
		headers.OutputTokens, headers.CacheAffinityKey, headers.Priority, headers.RequestSLOMs, headers.MaxWaitMs,
		headers.StargateMaxWaitMs, headers.StargateDeadlineMs, headers.StargateExpectedQueueMs, headers.StargateAggregated}
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[http.CanonicalHeaderKey(n)] = strings.ToLower(n)
	}
	return m
}()

// The keys under which an attempt's own headers are set: sendNames' keys,
// so that each replaces the copy forwardHeaders made of the inbound value.
var (
	sendExpectedQueueMs  = sendNames[http.CanonicalHeaderKey(headers.StargateExpectedQueueMs)]
	sendCacheAffinityKey = sendNames[http.CanonicalHeaderKey(headers.CacheAffinityKey)]
	sendDeadlineMs       = sendNames[http.CanonicalHeaderKey(headers.StargateDeadlineMs)]
)

// notForwarded is the set forwardHeaders leaves out.
var notForwarded = headers.NewSet(append([]string{"Host", headers.RoutingMethod, headers.StargateLastClusterID, headers.StargatePromptPrefix, headers.StargateRetryable,
	headers.StargateRetryReason, headers.StargateRetryAfterMs, headers.StargateExpectedQueueMs, headers.StargateErrorCode,
	headers.StargateSessionState}, headers.HopByHop...)...)

// notRelayed is the set of upstream response headers copyResponse leaves
// out: the pylon's retry signals and error code are for the hub only, and
// the session state and the lb-config hash are the hub's to say, so an
// upstream copy never passes for them.
var notRelayed = headers.NewSet(append([]string{"Content-Length", headers.StargateRetryable, headers.StargateRetryReason,
	headers.StargateRetryAfterMs, headers.StargateExpectedQueueMs, headers.StargateErrorCode, headers.StargateSessionState,
	headers.StargateLBConfigHash}, headers.HopByHop...)...)

// sessionStateValues are the x-stargate-session-state values by class, nil
// for an unclassified request. Every answer shares these slices instead of
// allocating one per request: nothing writes into a response header's
// value slice, and each has len == cap, so an append copies it.
var sessionStateValues = [...][]string{
	routing.SessionNew:       {headers.SessionStateNew},
	routing.SessionReturning: {headers.SessionStateReturning},
	routing.SessionStale:     {headers.SessionStateStale},
}

// sessionStateValue is the x-stargate-session-state value of s, nil when
// the request was not classified.
func sessionStateValue(s routing.SessionState) []string {
	if int(s) >= len(sessionStateValues) {
		return nil
	}
	return sessionStateValues[s]
}

// The headers the hub sets or reads on every request and answer, in
// canonical form: Header.Set and Get canonicalise their key, allocating a
// new string for these lower-case names on every call.
var (
	canonInferenceServerID  = http.CanonicalHeaderKey(headers.InferenceServerID)
	canonInferenceServerURL = http.CanonicalHeaderKey(headers.InferenceServerURL)
	canonClusterID          = http.CanonicalHeaderKey(headers.StargateClusterID)
	canonRetryReason        = http.CanonicalHeaderKey(headers.StargateRetryReason)
	canonRetryable          = http.CanonicalHeaderKey(headers.StargateRetryable)
	canonSessionState       = http.CanonicalHeaderKey(headers.StargateSessionState)
)

// copyResponse writes the upstream answer to the client: status and headers
// first (with the serving backend's identity and, for a classified
// request, its session state), then the body flushed chunk by chunk so SSE
// events are never held back. It returns the error that ended reading the
// upstream body: nil at its end, and nil when writing to the client failed
// (the client is gone).
func (p *Proxy) copyResponse(w http.ResponseWriter, resp *http.Response, clusterID string, b state.Backend, session routing.SessionState) error {
	defer func() { _ = resp.Body.Close() }()
	h := w.Header()
	headers.CopyExcept(h, resp.Header, notRelayed)
	// One array backs the three identity values, each capped at its own
	// element so that an append to one copies it instead of overwriting
	// the next.
	ids := &[3]string{b.ID, b.URL, clusterID}
	h[canonInferenceServerID] = ids[0:1:1]
	if b.URL != "" {
		h[canonInferenceServerURL] = ids[1:2:2]
	}
	h[canonClusterID] = ids[2:3:3]
	if v := sessionStateValue(session); v != nil {
		h[canonSessionState] = v
	}
	w.WriteHeader(resp.StatusCode)
	// Every chunk is flushed as it arrives, since a body of any type may be
	// a stream. The head goes out on its own only for declared streams (SSE,
	// NDJSON), so they show their status before the first event; other
	// answers send it with their first chunk, one write fewer.
	rc := http.NewResponseController(w)
	if headers.IsStreamingContentType(resp.Header.Get("Content-Type")) {
		_ = rc.Flush()
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	remaining := resp.ContentLength // -1: unknown
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			// The chunk that completes the body is not flushed alone: it
			// goes out with the end of the response when the handler
			// returns, so a short answer costs one write to the client
			// instead of two, and the client cannot complete it any
			// earlier. The pylon sends Content-Length for the answers it
			// relays whole, and the next Read only confirms the end.
			remaining -= int64(n)
			if !errors.Is(err, io.EOF) && remaining != 0 && rc.Flush() != nil {
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// copyBuffers recycles copyResponse's 32 KiB buffers across requests.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
