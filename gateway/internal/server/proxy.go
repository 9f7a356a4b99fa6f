package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/estimate"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/relay"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// maxUpstreamBody caps a non-streaming hub body the gateway buffers
// (embeddings of 2048 inputs stay far below it).
const maxUpstreamBody = 256 << 20

// Prepared is the gateway's own per-request work, before any I/O: the
// parsed body, session, estimates, outbound headers and body.
type Prepared struct {
	Req        *request.Request
	RoutingKey string
	Model      string
	Session    session.Session
	Input      int64
	MaxOutput  int64
	Out        hubclient.Outbound
	// Body is what is sent to the hub.
	Body []byte
	// DropUsageChunk is true when the gateway added include_usage to a
	// client's chat stream for rate-limit settlement: the relay then drops
	// the usage-only chunk the client did not ask for.
	DropUsageChunk bool
}

// Prepare does everything the gateway computes for a request from its
// body and headers: parse, split the model, derive the session, estimate
// tokens and build the outbound body and headers. It is the unit the
// benchmarks measure.
//
// limiting says a rate limiter is active: a streaming chat to a model with
// a token limit then asks upstream for usage so the reservation settles
// against real usage.
func Prepare(e request.Endpoint, body []byte, h http.Header, requestID string, prefix bool, models config.Models, defMaxOut int64, limiting bool) (*Prepared, *openai.Error) {
	r, oe := request.Parse(e, body)
	if oe != nil {
		return nil, oe
	}
	p := &Prepared{Req: r, Model: r.Model}
	if prefix {
		rk, m, oe := request.SplitModel(r.Model)
		if oe != nil {
			return nil, oe
		}
		p.RoutingKey, p.Model = rk, m
	}
	if e != request.Embeddings {
		vs := h.Values(headers.MultiTurnSessionID)
		in := session.Inputs{PromptCacheKey: r.PromptCacheKey, ConversationID: r.ConversationID, Payload: r.Payload}
		if len(vs) > 0 {
			in.Header, in.HeaderSet = vs[0], true
		}
		sess, err := session.Derive(in)
		if err != nil {
			var se *session.Error
			if errors.As(err, &se) {
				return nil, openai.BadRequest(se.Param, "invalid_session_id", "%s", se.Message)
			}
			return nil, openai.BadRequest("", "invalid_session_id", "%s", err.Error())
		}
		p.Session = sess
	}
	p.Input = estimate.Input(r)
	p.MaxOutput = estimate.MaxOutput(r, defMaxOut)
	mc := models.For(p.Model)
	p.Out = hubclient.Outbound{
		RequestID: requestID, Model: p.Model, RoutingKey: p.RoutingKey, RoutingMethod: mc.RoutingMethod,
		AffinityKey: p.Session.AffinityKey, InputTokens: p.Input, TokenEstimate: p.Input,
		RequestSLOMs: mc.RequestSLOMs, MaxWaitMs: mc.MaxWaitMs, Stream: r.Stream,
	}
	if e == request.Responses {
		p.Out.TokenEstimate = p.Input + p.MaxOutput
	}
	if v, err := headers.ParseUint64(headers.OutputTokens, h.Get(headers.OutputTokens)); err == nil {
		p.Out.OutputTokens = headers.FormatUint(v)
	}
	// The pylon only serves chat and Responses as streams, so a
	// non-streaming client request goes upstream as a stream (with usage)
	// and is aggregated on the way back (gateway.md §1.3, §1.4).
	forceStream := !r.Stream && (e == request.Chat || e == request.Responses)
	addUsage := e == request.Chat && (forceStream || r.Stream && !r.IncludeUsage && limiting && mc.TokensPerMinute > 0)
	p.DropUsageChunk = r.Stream && addUsage
	p.Body = body
	if forceStream || addUsage || (prefix && p.Model != r.Model) {
		model := ""
		if p.Model != r.Model {
			model = p.Model
		}
		nb, err := request.Rewrite(body, forceStream, addUsage, model)
		if err != nil {
			return nil, openai.BadRequest("", "invalid_json", "request body is not a JSON object")
		}
		p.Body = nb
		p.Out.Stream = true
	}
	return p, nil
}

var canonicalRequestID = http.CanonicalHeaderKey(headers.RequestID)

// propagator carries W3C trace context and baggage from the client to the
// hub; it is the only client-supplied header family forwarded.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func isJSONContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "text/json")
}

// endpoint serves one POST API.
func (s *Server) endpoint(e request.Endpoint) http.HandlerFunc {
	path := map[request.Endpoint]string{request.Chat: "/v1/chat/completions", request.Responses: "/v1/responses",
		request.Completions: "/v1/completions", request.Embeddings: "/v1/embeddings"}[e]
	return func(w http.ResponseWriter, r *http.Request) {
		st := state(r.Context())
		start := s.d.Clock.Now()
		if !isJSONContentType(r.Header.Get("Content-Type")) {
			openai.WriteError(w, &openai.Error{Status: http.StatusUnsupportedMediaType, Type: openai.TypeInvalidRequest,
				Code: "unsupported_media_type", Message: "Content-Type must be application/json"})
			return
		}
		body, oe := openai.ReadBody(w, r, s.d.MaxBodyBytes)
		if oe != nil {
			openai.WriteError(w, oe)
			return
		}
		p, oe := Prepare(e, body, r.Header, st.requestID, s.d.RoutingKeyPrefix, s.d.Models, s.d.DefaultMaxOutputTokens, s.d.Limiter != nil)
		if oe != nil {
			openai.WriteError(w, oe)
			return
		}
		s.setRoutingKey(st, p.RoutingKey)
		mc := s.d.Models.For(p.Model)
		// Model URI allowlist (gateway.md §1.2): always enforced on
		// Responses, elsewhere only with --model-uri-allowlist-enabled;
		// every miss is counted.
		if !mc.AllowsPath(path) {
			s.d.Metrics.AllowlistMisses.WithLabelValues(e.String()).Inc()
			if e == request.Responses || s.d.ModelURIAllowlist {
				openai.WriteError(w, openai.BadRequest("model", "model_not_supported", "model %q does not support %s", p.Model, path))
				return
			}
			s.d.Log.Info("model called outside its uris", "request_id", st.requestID, "model", p.Model, "path", path, "mode", "log")
		}

		var res *ratelimit.Reservation
		if s.d.Limiter != nil {
			var dec ratelimit.Decision
			res, dec = s.d.Limiter.Reserve(r.Context(), st.principal, p.Model,
				ratelimit.Limits{RequestsPerMinute: mc.RequestsPerMinute, TokensPerMinute: mc.TokensPerMinute}, p.Input+p.MaxOutput)
			setRateLimitHeaders(w.Header(), dec)
			if dec.Err != nil {
				openai.WriteError(w, openai.Unavailable("rate_limit_unavailable", "rate limiting is unavailable; retry later"))
				return
			}
			if !dec.Allowed {
				openai.WriteError(w, openai.RateLimited("rate_limit_exceeded", "rate limit exceeded for this API key and model", retryAfterSeconds(dec.RetryAfter)))
				return
			}
		}
		// Settle exactly once whatever happens below; handlers that learn
		// the usage settle earlier with it.
		used := p.Input
		defer func() { res.Settle(r.Context(), used) }()

		// The client's trace context (W3C traceparent/tracestate, baggage)
		// parents the gateway's spans and continues to the hub.
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, r.Method+" "+path, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			// gateway.md §6.2's server span attributes.
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", path),
				attribute.String("http.request_id", st.requestID), attribute.String("gateway.routing_key", p.RoutingKey))
			if p.RoutingKey != "" {
				span.SetAttributes(attribute.String("nvcf.function.id", p.RoutingKey))
			}
			if sw, ok := w.(*statusWriter); ok {
				defer func() {
					code := sw.code()
					span.SetAttributes(attribute.Int("http.response.status_code", code))
					if code >= 400 {
						span.SetStatus(codes.Error, http.StatusText(code))
					}
				}()
			}
		}
		target := lastcluster.Target{RoutingKey: p.RoutingKey, Model: p.Model, Session: p.Session, RequestID: st.requestID}
		p.Out.LastCluster = s.d.Tracker.Lookup(ctx, target)

		if !p.Req.Stream && s.d.HubRequestTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.d.HubRequestTimeout)
			defer cancel()
		}
		hreq, err := s.d.Hub.NewRequest(ctx, http.MethodPost, path, p.Out.Header(), p.Body)
		if err != nil {
			s.d.Log.Error("building hub request", "request_id", st.requestID, "err", err)
			openai.WriteError(w, openai.Internal("gateway cannot reach the hub"))
			return
		}
		propagator.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
		resp, err := s.d.Hub.Do(hreq)
		fn := p.RoutingKey
		if fn == "" {
			fn = "none"
		}
		if err != nil {
			s.upstreamMetric(fn, "error", "error", start)
			if r.Context().Err() != nil {
				return // the client went away; nobody to answer
			}
			s.d.Log.Warn("hub request failed", "request_id", st.requestID, "err", err)
			if errors.Is(err, context.DeadlineExceeded) {
				openai.WriteError(w, &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer, Code: "upstream_timeout", Message: "the hub did not answer in time"})
				return
			}
			openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "upstream_unavailable", Message: "the hub is unreachable"})
			return
		}
		defer func() { _ = resp.Body.Close() }()
		result := "success"
		if resp.StatusCode >= 400 {
			result = "error"
		}
		s.upstreamMetric(fn, result, strconv.Itoa(resp.StatusCode), start)
		if p.Session.ID != "" {
			w.Header().Set(headers.MultiTurnSessionID, p.Session.ID)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			used = 0
			s.relayError(w, resp)
			return
		}
		// Remember the serving cluster as soon as 2xx headers arrive,
		// before relaying a byte (gateway.md §7.6 step 3).
		cid := resp.Header.Values(headers.StargateClusterID)
		var clusterID string
		if len(cid) > 0 {
			clusterID = cid[0]
		}
		s.d.Tracker.Remember(ctx, target, clusterID, len(cid) > 0)

		var u *relay.Usage
		upstreamJSON := !headers.IsStreamingContentType(resp.Header.Get("Content-Type"))
		switch {
		case upstreamJSON && !p.Req.Stream:
			// An upstream that answered JSON despite stream:true (some
			// engines ignore it) is passed through as it is.
			u = s.copyBody(w, resp)
		case p.Req.Stream:
			rewriteModel := ""
			if p.Model != p.Req.Model && (e == request.Chat || e == request.Completions) {
				rewriteModel = p.Req.Model
			}
			u = s.relayStream(w, r, resp, e, fn, start, p.DropUsageChunk, rewriteModel)
		case e == request.Chat:
			u = s.aggregateChat(w, resp, p.Req.Model)
		case e == request.Responses:
			u = s.terminalResponse(w, resp)
		default:
			u = s.copyBody(w, resp)
		}
		stream := strconv.FormatBool(p.Req.Stream)
		if u != nil {
			used = u.Total
			s.d.Metrics.Tokens.WithLabelValues(e.String(), "prompt", stream, fn).Add(float64(u.Prompt))
			s.d.Metrics.Tokens.WithLabelValues(e.String(), "completion", stream, fn).Add(float64(u.Completion))
			s.d.Metrics.Tokens.WithLabelValues(e.String(), "total", stream, fn).Add(float64(u.Total))
			s.d.Metrics.Tokens.WithLabelValues(e.String(), "cached", stream, fn).Add(float64(u.Cached))
			// Per-phase times exist only when the backend reports them in
			// its usage (gateway.md §6.1); total is always our wall time.
			for _, ph := range u.Phases {
				s.d.Metrics.ProviderTime.WithLabelValues(e.String(), ph.Phase, stream, fn).Observe(ph.Seconds)
			}
		}
		s.d.Metrics.ProviderTime.WithLabelValues(e.String(), "total", stream, fn).Observe(s.d.Clock.Since(start).Seconds())
	}
}

func (s *Server) upstreamMetric(fn, result, status string, start time.Time) {
	s.d.Metrics.UpstreamRequests.WithLabelValues("hub", result, status, fn).Inc()
	s.d.Metrics.UpstreamDuration.WithLabelValues("hub", result, status, fn).Observe(s.d.Clock.Since(start).Seconds())
}

// copyHeaders copies the hub's response headers a client may see: no
// hop-by-hop, no Content-Length (the body may change), no hub-internal
// x-stargate-* / x-inference-server-* headers.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if k == "Content-Length" || headers.InternalResponse(k) || k == canonicalRequestID {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
	for _, k := range headers.HopByHop {
		dst.Del(k)
	}
}

// relayError passes the hub's non-2xx status and body through, keeping
// the OpenAI error shape (a non-JSON body is wrapped in it).
func (s *Server) relayError(w http.ResponseWriter, resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &probe) == nil && len(probe.Error) > 0 && probe.Error[0] == '{' {
		copyHeaders(w.Header(), resp.Header)
		w.Header().Set("Content-Type", "application/json")
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
		return
	}
	msg := string(bytes.TrimSpace(b))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	typ := openai.TypeServer
	if resp.StatusCode < 500 {
		typ = openai.TypeInvalidRequest
	}
	openai.WriteError(w, &openai.Error{Status: resp.StatusCode, Type: typ, Code: "upstream_error", Message: msg})
}

// relayStream relays the hub's SSE event by event, flushing each, and
// returns the usage seen.
//
// rewriteModel, when set, replaces each chunk's model with the client's
// original "<routing-key>/<model>" (gateway.md §1.3); those chunks are
// re-encoded, every other event is relayed byte for byte.
func (s *Server) relayStream(w http.ResponseWriter, r *http.Request, resp *http.Response, e request.Endpoint, fn string, start time.Time, dropUsage bool, rewriteModel string) *relay.Usage {
	copyHeaders(w.Header(), resp.Header)
	w.Header().Set("Cache-Control", "no-cache")
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	rd := relay.NewReader(resp.Body)
	var usage *relay.Usage
	first := true
	status := "completed"
	defer func() {
		s.d.Metrics.StreamDuration.WithLabelValues(e.String(), status, fn).Observe(s.d.Clock.Since(start).Seconds())
	}()
	for {
		ev, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				status = "error"
				if r.Context().Err() != nil {
					status = "canceled"
				}
			}
			return usage
		}
		if !ev.Done() && len(ev.Data) > 0 {
			info := relay.Inspect(ev.Data)
			if info.Usage != nil {
				usage = info.Usage
			}
			if first && info.Output {
				first = false
				s.d.Metrics.FirstToken.WithLabelValues(e.String(), fn).Observe(s.d.Clock.Since(start).Seconds())
			}
			if dropUsage && info.UsageOnly {
				continue
			}
			if rewriteModel != "" {
				if b, ok := relay.WithModel(ev.Data, rewriteModel); ok {
					ev.Raw = b
				}
			}
		}
		if _, err := w.Write(ev.Raw); err != nil {
			status = "canceled"
			return usage
		}
		if err := rc.Flush(); err != nil {
			status = "canceled"
			return usage
		}
	}
}

// aggregateChat serves a non-streaming chat (or completions) client from
// the upstream stream.
func (s *Server) aggregateChat(w http.ResponseWriter, resp *http.Response, clientModel string) *relay.Usage {
	var agg relay.ChatAggregator
	rd := relay.NewReader(resp.Body)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeBadGateway(w, "upstream stream failed")
			return nil
		}
		if ev.Done() {
			break
		}
		if len(ev.Data) == 0 {
			continue
		}
		if err := agg.Add(ev.Data); err != nil {
			writeBadGateway(w, "upstream stream is malformed")
			return nil
		}
	}
	out, err := agg.Result(clientModel, "chat.completion")
	if err != nil {
		writeBadGateway(w, err.Error())
		return nil
	}
	copyHeaders(w.Header(), resp.Header)
	writeJSON(w, out)
	u, ok := relay.ParseUsage(agg.Usage())
	if !ok {
		return nil
	}
	return &u
}

// terminalResponse serves a non-streaming Responses client with the
// terminal event's response object (gateway.md §1.4).
func (s *Server) terminalResponse(w http.ResponseWriter, resp *http.Response) *relay.Usage {
	rd := relay.NewReader(resp.Body)
	var last json.RawMessage
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) || (err == nil && ev.Done()) {
			break
		}
		if err != nil {
			writeBadGateway(w, "upstream stream failed")
			return nil
		}
		if obj, ok := relay.Terminal(ev.Data); ok {
			last = obj
		}
	}
	if last == nil {
		writeBadGateway(w, relay.ErrNoTerminal.Error())
		return nil
	}
	copyHeaders(w.Header(), resp.Header)
	writeJSON(w, last)
	var env struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(last, &env)
	if u, ok := relay.ParseUsage(env.Usage); ok {
		return &u
	}
	return nil
}

// copyBody passes a JSON body through unchanged.
func (s *Server) copyBody(w http.ResponseWriter, resp *http.Response) *relay.Usage {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		writeBadGateway(w, "reading the hub response failed")
		return nil
	}
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b) //nolint:gosec // G705: relaying the hub's JSON unchanged is this proxy's job; Content-Type is the hub's

	if u, ok := relay.BodyUsage(b); ok {
		return &u
	}
	return nil
}

func writeBadGateway(w http.ResponseWriter, msg string) {
	openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "bad_upstream_response", Message: msg})
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Cache-Control")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) //nolint:gosec // G705: a JSON body built from the hub's answer, served as application/json
	_, _ = w.Write([]byte("\n"))
}

// retryAfterSeconds is gateway.md §4.5's Retry-After: the wait rounded up
// to whole seconds, at least 1 (Retry-After: 0 invites an immediate retry
// into the same refusal).
func retryAfterSeconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

// setRateLimitHeaders writes gateway.md §4.5's headers: for each limited
// dimension (tokens, and requests only when a request limit applies) the
// limit, what is left after this request and the time until the window
// resets as a Go duration truncated to milliseconds (at least 1ms); on a
// refusal whose Retry-After is over 60 seconds, X-Should-Retry: false. A
// fail-open admission (store down) reports nothing: the gateway does not
// know the counters then.
func setRateLimitHeaders(h http.Header, d ratelimit.Decision) {
	put := func(limit, remaining, reset string, dim *ratelimit.Dim) {
		if dim == nil {
			return
		}
		h.Set(limit, strconv.FormatInt(dim.Limit, 10))
		h.Set(remaining, strconv.FormatInt(dim.Remaining, 10))
		h.Set(reset, max(dim.Reset.Truncate(time.Millisecond), time.Millisecond).String())
	}
	put(headers.RateLimitLimitTokens, headers.RateLimitRemainingTokens, headers.RateLimitResetTokens, d.Tokens)
	put(headers.RateLimitLimitRequests, headers.RateLimitRemainingRequests, headers.RateLimitResetRequests, d.Requests)
	if !d.Allowed && d.Err == nil && retryAfterSeconds(d.RetryAfter) > 60 {
		h.Set(headers.ShouldRetry, "false")
	}
}

// models relays the hub's GET /v1/models.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	st := state(r.Context())
	h := http.Header{}
	h.Set(headers.RequestID, st.requestID)
	h.Set("Accept", "application/json")
	u := "/v1/models"
	hreq, err := s.d.Hub.NewRequest(r.Context(), http.MethodGet, u, h, nil)
	if err != nil {
		openai.WriteError(w, openai.Internal("gateway cannot reach the hub"))
		return
	}
	hreq.URL.RawQuery = r.URL.RawQuery
	resp, err := s.d.Hub.Do(hreq)
	if err != nil {
		writeBadGateway(w, "the hub is unreachable")
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		s.relayError(w, resp)
		return
	}
	s.copyBody(w, resp)
}
