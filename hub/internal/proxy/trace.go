package proxy

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/headers"
)

// tracerName names the hub's request spans' instrumentation scope.
const tracerName = "github.com/stargate-router/stargate/hub/internal/proxy"

// Span names (docs/design/hub-request.md#tracing).
const (
	spanRequest = "proxy_openai_request"
	spanAttempt = "proxy_upstream_http_request"
)

// startRequestSpan starts the root span, continuing the caller's trace
// when the request carries a W3C traceparent.
func (p *Proxy) startRequestSpan(r *http.Request) (context.Context, trace.Span) {
	ctx := p.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return p.tracer.Start(ctx, spanRequest, serverSpan...)
}

// The spans' start options, made once: each option is an interface value,
// and a variadic slice passed through the Tracer interface is allocated
// on every call.
var (
	serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// traceParsed records the parsed request on the root span.
func traceParsed(span trace.Span, r *http.Request, req *request, requested string) {
	if !span.IsRecording() {
		return
	}
	rr := &req.pass.Req
	span.SetAttributes(
		attribute.String("request.endpoint", endpointName(r.URL.Path)),
		attribute.String("request.path", r.URL.Path),
		attribute.String("request.routing_key", req.target.RoutingKey),
		attribute.String("request.model_id", req.target.Model),
		attribute.Int64("request.input_tokens", int64(min(rr.InputTokens, 1<<62))),
		attribute.Int("request.priority", int(rr.Priority)),
		attribute.Int64("request.max_wait_ms", rr.MaxWait.Milliseconds()),
		attribute.Int64("request.slo_ms", rr.SLO.Milliseconds()),
		attribute.Bool("request.cache_affinity_key_present", rr.AffinityKey != ""),
		attribute.String("routing.requested_algorithm", requested),
		attribute.String("routing.algorithm", req.pass.Route.Algorithm),
	)
}

// traceSelection records a load-balancer choice on the root span: the
// latest selection wins, as each retry re-selects.
func traceSelection(span trace.Span, req *request, snap *routing.Snapshot, dec *routing.Decision, st *loop) {
	if span == nil || !span.IsRecording() {
		return
	}
	c := &snap.Clusters[dec.Cluster]
	s := &c.Stats
	attrs := []attribute.KeyValue{
		attribute.Int("routing.num_candidates", len(snap.Clusters)),
		attribute.Int("routing.rank_depth", dec.RankDepth),
		attribute.Bool("routing.selected_after_kv_free_tokens_skip", dec.SelectedAfterKVFreeTokensSkip),
		attribute.Int("routing.retry_attempts", st.waits),
		attribute.String("selected_cluster.id", c.ClusterID),
		attribute.Float64("selected_inst.output_tps", s.OutputTPS),
		attribute.Float64("selected_inst.last_mean_input_tps", s.LastMeanInputTPS),
		attribute.Float64("selected_inst.max_output_tps", s.MaxOutputTPS),
		attribute.Int64("selected_inst.queue_size", int64(min(s.QueueSize, 1<<62))),
		attribute.Int64("selected_inst.queued_input_size", int64(min(s.QueuedInputSize, 1<<62))),
		attribute.Int64("selected_inst.num_running_queries", int64(min(s.NumRunningQueries, 1<<62))),
		attribute.Int64("selected_inst.max_engine_concurrency", int64(min(s.MaxEngineConcurrency, 1<<62))),
		attribute.Int64("selected_inst.kv_cache_free_tokens", int64(min(s.KVCacheFreeTokens, 1<<62))),
		attribute.Float64("selected_inst.rtt_ms", float64(c.RTT)/float64(time.Millisecond)),
	}
	if dec.Sampled > 0 {
		attrs = append(attrs, attribute.Int("routing.sample_count_effective", dec.Sampled))
	}
	if dec.QueueEstimateKnown {
		attrs = append(attrs, attribute.Int64("proxy.queue.expected_ms", int64(min(dec.QueueEstimateMs, 1<<62))))
	}
	if s := req.pass.Req.Session; s != routing.SessionUnclassified {
		attrs = append(attrs, attribute.String("routing.session_state", s.String()))
	}
	span.SetAttributes(attrs...)
}

// startAttemptSpan starts the child span of one upstream attempt and
// injects its context into the upstream headers, so the pylon and engine
// continue the trace.
func (p *Proxy) startAttemptSpan(ctx context.Context, out *http.Request, req *request, st *loop, dec *routing.Decision,
	b state.Backend) (context.Context, trace.Span) {
	ctx, span := p.tracer.Start(ctx, spanAttempt, clientSpan...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("http.method", out.Method),
			attribute.String("http.path", out.URL.Path),
			attribute.Int("proxy.attempt", st.attempts),
			attribute.String("selected_cluster.id", dec.ClusterID),
			attribute.String("selected_inst.id", b.ID),
			attribute.String("routing.algorithm", req.pass.Route.Algorithm),
			attribute.Bool("proxy.queue.expected_present", dec.QueueEstimateKnown),
		)
	}
	p.propagator.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return ctx, span
}

// endAttemptSpan records an attempt's outcome: the upstream status and time
// to the response head, or the transport error.
func endAttemptSpan(span trace.Span, resp *http.Response, err error, ttfb time.Duration) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String("proxy.error", err.Error()))
		} else {
			span.SetAttributes(attribute.Int("proxy.upstream_status", resp.StatusCode),
				attribute.Float64("proxy.time_to_first_byte_ms", float64(ttfb)/float64(time.Millisecond)))
		}
	}
	span.End()
}

// done records a request's final outcome: requests_total and the root
// span's status and serving backend. A 499 (client gone) whose context the
// request's deadline ended is not recorded but marked expired: a 499 is
// only ever recorded for a request nothing was written to, so serve can
// still answer it with the 504, and records that.
func (p *Proxy) done(req *request, backendID string, status int) {
	req.status = status
	if status == statusClientClosed && req.deadlinePassed() {
		req.expired = true
		return
	}
	p.cfg.Metrics.request(req.target, backendID, status)
	span := req.span
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("proxy.upstream_status", status))
	if backendID != "" {
		span.SetAttributes(attribute.String("selected_inst.id", backendID))
	}
	if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// traceCounters records the routing loop's counters on the root span.
func traceCounters(span trace.Span, st *loop, replayBytes int) {
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attribute.Int("proxy.attempt", st.attempts),
		attribute.Int("proxy.connect_attempts", st.connectRetries),
		attribute.Int("proxy.request_retries", st.requestRetries),
		attribute.Int("proxy.queue_mismatch_retries", st.mismatchRetries),
		attribute.Int("proxy.failed_backends", len(st.failedBackends)),
		attribute.Int("proxy.replay_body_bytes", replayBytes),
		attribute.Int("routing.retry_attempts", st.waits),
	)
}

// traceRejected records a request refused before routing (a 400): the
// error code, and for a bad x-routing-method the reason it was refused.
func traceRejected(span trace.Span, status int, code, param string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("proxy.upstream_status", status), attribute.String("request.error_code", code))
	if param == headers.RoutingMethod {
		span.SetAttributes(attribute.String("routing.invalid_requested_algorithm", code))
	}
}

// endpointName is the span's request.endpoint for a proxied path.
func endpointName(path string) string {
	switch path {
	case "/v1/chat/completions":
		return "chat_completions"
	case "/v1/responses":
		return "responses"
	case "/v1/embeddings":
		return "embeddings"
	case "/v1/completions":
		return "completions"
	}
	return "other"
}
