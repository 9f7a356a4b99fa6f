package server

import (
	"errors"
	"net/http"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/estimate"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	promptprefix "github.com/stargate-router/stargate/gateway/internal/prefix"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

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
	// client's chat stream for rate-limit settlement: the usage-only chunk
	// the client did not ask for is then dropped on the way back.
	DropUsageChunk bool
}

// Options are the gateway settings Prepare reads.
type Options struct {
	// RoutingKeyPrefix splits the model on its first '/'.
	RoutingKeyPrefix bool
	Models           config.Models
	// DefaultMaxOutputTokens is reserved when a request sets no maximum.
	DefaultMaxOutputTokens int64
	// Limiting says a rate limiter is active: a streaming chat to a model
	// with a token limit then asks upstream for usage so the reservation
	// settles against real usage.
	Limiting bool
	// PromptPrefix adds the prompt's prefix summary
	// (x-stargate-prompt-prefix) to the hub headers.
	PromptPrefix bool
	// Anchor derives a keyless request's conversation anchor, which
	// last-cluster tracking keys it by.
	Anchor bool
}

// Prepare does everything the gateway computes for a request from its
// body and headers: parse, split the model, derive the session, estimate
// tokens and build the outbound body and headers. It is the unit the
// benchmarks measure.
func Prepare(e request.Endpoint, body []byte, h http.Header, requestID string, o Options) (*Prepared, *openai.Error) {
	r, oe := request.Parse(e, body)
	if oe != nil {
		return nil, oe
	}
	p := &Prepared{Req: r, Model: r.Model}
	if o.RoutingKeyPrefix {
		if oe := p.splitRoutingKey(); oe != nil {
			return nil, oe
		}
	}
	if e != request.Embeddings {
		if oe := p.deriveSession(h, o.Anchor); oe != nil {
			return nil, oe
		}
	}
	p.Input = estimate.Input(r)
	p.MaxOutput = estimate.MaxOutput(r, o.DefaultMaxOutputTokens)
	mc := o.Models.For(p.Model)
	p.setOutbound(e, h, requestID, mc)
	if o.PromptPrefix {
		p.Out.PromptPrefix = promptprefix.Header(r, body)
	}
	if oe := p.setUpstreamBody(e, body, o.RoutingKeyPrefix, o.Limiting && mc.TokensPerMinute > 0); oe != nil {
		return nil, oe
	}
	return p, nil
}

// splitRoutingKey splits the body's "<routing-key>/<model>".
func (p *Prepared) splitRoutingKey() *openai.Error {
	rk, m, oe := request.SplitModel(p.Req.Model)
	if oe != nil {
		return oe
	}
	p.RoutingKey, p.Model = rk, m
	return nil
}

// deriveSession picks the request's session from the body and the
// x-multi-turn-session-id header, with a keyless request's conversation
// anchor when anchor is set; an invalid id is a 400.
func (p *Prepared) deriveSession(h http.Header, anchor bool) *openai.Error {
	r := p.Req
	in := session.Inputs{PromptCacheKey: r.PromptCacheKey, ConversationID: r.ConversationID, Payload: r.AppendPayload, Anchor: anchor && !r.Continues()}
	if vs := h[hMultiTurnSessionID]; len(vs) > 0 {
		in.Header, in.HeaderSet = vs[0], true
	}
	sess, err := session.Derive(in)
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return openai.BadRequest(se.Param, "invalid_session_id", "%s", se.Message)
		}
		return openai.BadRequest("", "invalid_session_id", "%s", err.Error())
	}
	p.Session = sess
	return nil
}

// setOutbound fills the trusted hub headers from what was derived: the
// outbound set is built from scratch, so nothing the client sent reaches
// the hub except the mock engine's x-output-tokens, re-formatted.
func (p *Prepared) setOutbound(e request.Endpoint, h http.Header, requestID string, mc config.ModelConfig) {
	p.Out = hubclient.Outbound{
		RequestID: requestID, Model: p.Model, RoutingKey: p.RoutingKey, RoutingMethod: mc.RoutingMethod,
		AffinityKey: p.Session.AffinityKey, InputTokens: p.Input, TokenEstimate: p.Input,
		RequestSLOMs: mc.RequestSLOMs, MaxWaitMs: mc.MaxWaitMs, Stream: p.Req.Stream,
	}
	// x-token-estimate keeps the meaning upstream Stargate's gateway gave
	// it, which hubs behind such a gateway may log: the output maximum is
	// included on Responses only (docs/design/headers.md#gateway-to-hub).
	if e == request.Responses {
		p.Out.TokenEstimate = p.Input + p.MaxOutput
	}
	if v, err := headers.ParseUint64(headers.OutputTokens, headers.First(h, hOutputTokens)); err == nil {
		p.Out.OutputTokens = headers.FormatUint(v)
	}
}

// setUpstreamBody decides the body sent to the hub. The pylon serves chat
// and Responses only as streams, so a non-streaming client request goes
// upstream as a stream (chat with usage) and is aggregated on the way
// back. A client's chat stream to a model with a token limit (tokenLimited)
// also asks for usage, so the reservation settles against real usage. The
// body is forwarded byte for byte unless one of these, or the routed model
// of a routing-key prefix, needs a rewrite.
func (p *Prepared) setUpstreamBody(e request.Endpoint, body []byte, prefix, tokenLimited bool) *openai.Error {
	r := p.Req
	forceStream := !r.Stream && (e == request.Chat || e == request.Responses)
	addUsage := e == request.Chat && (forceStream || r.Stream && !r.IncludeUsage && tokenLimited)
	p.DropUsageChunk = r.Stream && addUsage
	p.Body = body
	if !forceStream && !addUsage && (!prefix || p.Model == r.Model) {
		return nil
	}
	model := ""
	if p.Model != r.Model {
		model = p.Model
	}
	nb, err := request.Rewrite(body, forceStream, addUsage, model)
	if err != nil {
		return openai.BadRequest("", "invalid_json", "request body is not a JSON object")
	}
	p.Body = nb
	// Only a forced stream changes what the hub is asked to answer: a
	// rewrite for the routed model alone keeps the client's choice
	// (found by FuzzPrepare: a prefixed embeddings call asked for SSE).
	p.Out.Stream = p.Out.Stream || forceStream
	p.Out.Aggregated = forceStream
	return nil
}
