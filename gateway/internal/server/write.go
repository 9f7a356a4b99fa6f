package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/stargate-router/stargate/gateway/internal/answer"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// maxUpstreamBody caps a non-streaming hub body the gateway buffers
// (embeddings of 2048 inputs stay far below it).
const maxUpstreamBody = 256 << 20

// copyHeaders copies the hub's response headers a client may see: no
// hop-by-hop, no Content-Length (the body may change), no hub-internal
// x-stargate-* / x-inference-server-* headers, and not the hub's request
// id (the gateway's own was set already).
func copyHeaders(dst, src http.Header) {
	n := 0
	for k, vs := range src {
		if clientVisible(k) {
			n += len(vs)
		}
	}
	// One backing array for every value, each capped at its own length.
	vals := make([]string, 0, n)
	for k, vs := range src {
		if clientVisible(k) {
			start := len(vals)
			vals = append(vals, vs...)
			dst[k] = vals[start:len(vals):len(vals)]
		}
	}
	for _, k := range headers.HopByHop {
		delete(dst, k)
	}
}

// clientVisible reports whether the hub's response header k may reach
// the client (see copyHeaders).
func clientVisible(k string) bool {
	return k != "Content-Length" && !headers.InternalResponse(k) && k != hRequestID
}

// passHubError passes the hub's non-2xx status and body through, keeping
// the OpenAI error shape (a non-JSON body is wrapped in it).
func passHubError(w http.ResponseWriter, resp *http.Response) {
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

// streamOutcome is how a client's stream ended, the status label of the
// stream duration metric.
type streamOutcome uint8

const (
	// streamCompleted: the hub's stream reached its terminating event.
	streamCompleted streamOutcome = iota
	// streamCanceled: the client went away.
	streamCanceled
	// streamFailed: the hub's stream broke, or ended before its
	// terminating event; the client's stream was cut short.
	streamFailed
)

// String returns the metric label.
func (o streamOutcome) String() string {
	switch o {
	case streamCanceled:
		return "canceled"
	case streamFailed:
		return "error"
	default:
		return "completed"
	}
}

// streamEvents forwards the hub's SSE to a streaming client and returns
// the last usage seen. Events go byte for byte except that an
// eventFilter may drop or re-encode one. The events one read from the hub
// brought are written together and flushed once, when the next event is
// not yet whole: nothing waits for more to arrive, and a burst of events
// costs one write to the client instead of one each.
func (x *exchange) streamEvents(resp *http.Response) *answer.Usage {
	copyHeaders(x.w.Header(), resp.Header)
	x.w.Header().Set("Cache-Control", "no-cache")
	if x.w.Header().Get("Content-Type") == "" {
		x.w.Header().Set("Content-Type", "text/event-stream")
	}
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	_ = rc.Flush()
	f := eventFilter{x: x, dropUsage: x.p.DropUsageChunk, model: x.chunkModel()}
	outcome := streamCompleted
	defer func() {
		x.s.d.Metrics.StreamDuration.WithLabelValues(x.e.String(), outcome.String(), x.fn).Observe(x.s.d.Clock.Since(x.start).Seconds())
	}()
	rd := answer.NewEventReader(resp.Body)
	defer rd.Release()
	pending := false
	for {
		ev, err := rd.Next()
		if err != nil {
			outcome = x.streamEnd(err, &f, rc)
			return f.usage
		}
		if f.pass(ev) {
			if _, err := x.w.Write(ev.Raw); err != nil {
				outcome = streamCanceled
				return f.usage
			}
			pending = true
		}
		if pending && !rd.Buffered() {
			if err := rc.Flush(); err != nil {
				outcome = streamCanceled
				return f.usage
			}
			pending = false
		}
	}
}

// chunkModel is the model streamed chat and completions chunks must carry
// when it differs from the hub's: the client's original
// "<routing-key>/<model>", so the client sees the model it asked for. ""
// means chunks keep theirs.
func (x *exchange) chunkModel() string {
	if x.p.Model != x.p.Req.Model && (x.e == request.Chat || x.e == request.Completions) {
		return x.p.Req.Model
	}
	return ""
}

// streamEnd is the outcome of a stream whose reader returned err (io.EOF
// at the end of the body). A stream that reached its terminating event is
// complete whatever follows; otherwise, unless the client went away, the
// hub's stream broke (reset, connection lost, read error) or ended too
// early, and the client's stream is cut short.
func (x *exchange) streamEnd(err error, f *eventFilter, rc *http.ResponseController) streamOutcome {
	switch {
	case f.ended:
		return streamCompleted
	case x.r.Context().Err() != nil:
		return streamCanceled
	}
	x.cutShort(err, f, rc)
	return streamFailed
}

// streamCutShort is the error a client's stream ends with when the hub's
// stream did not reach its end.
var streamCutShort = openai.Error{Type: openai.TypeServer, Code: "upstream_stream_interrupted",
	Message: "the upstream stream ended before the answer was complete; the answer is cut short"}

// cutShort ends a stream the hub did not finish: the headers are sent, so
// the status can no longer say it. The client gets an error event in the
// shape the OpenAI SDKs raise on (unless the hub already relayed one), of
// code deadline_exceeded when the request's deadline ended the stream,
// and never a [DONE]; endpoint then aborts the response.
func (x *exchange) cutShort(err error, f *eventFilter, rc *http.ResponseController) {
	e := streamCutShort
	if te := x.timedOut(); errors.Is(te, errDeadlineExceeded) {
		e, err = deadlineCut, te
	}
	x.s.d.Log.Warn("hub stream ended before its last event; cutting the client's stream short",
		"request_id", x.st.requestID, "endpoint", x.e.String(), "err", err)
	x.abort = true
	if f.errorSent {
		return
	}
	ev := answer.ErrorEvent(&e)
	if x.e == request.Responses {
		ev = answer.ResponsesErrorEvent(&e, f.seq+1)
	}
	if _, err := x.w.Write(ev); err == nil {
		_ = rc.Flush()
	}
}

// eventFilter looks at each streamed event on its way to the client: it
// keeps the usage, times the first token, drops the usage-only chunk the
// gateway asked for on the client's behalf, rewrites the model of chunks
// when model is set, and notes how far the stream got.
type eventFilter struct {
	x         *exchange
	dropUsage bool
	model     string
	usage     *answer.Usage
	// ended is set by the stream's terminating event: [DONE], or a
	// Responses terminal event (Responses streams have no [DONE]).
	ended bool
	// errorSent is set once an error event went to the client.
	errorSent bool
	// seq is the highest sequence_number relayed (Responses).
	seq int64
}

// pass reports whether ev goes to the client; ev.Raw may be replaced.
func (f *eventFilter) pass(ev *answer.Event) bool {
	if ev.Done() {
		f.ended = true
		return true
	}
	if len(ev.Data) == 0 {
		return true
	}
	info := answer.Inspect(ev.Data)
	f.ended = f.ended || info.Terminal
	f.errorSent = f.errorSent || info.Error
	f.seq = max(f.seq, info.Seq)
	if info.Usage != nil {
		f.usage = info.Usage
	}
	if info.Output {
		f.x.sawOutput(true)
	}
	if f.dropUsage && info.UsageOnly {
		return false
	}
	if f.model != "" {
		if b, ok := answer.WithModel(ev.Data, f.model); ok {
			ev.Raw = b
		}
	}
	return true
}

// aggregateChat serves a non-streaming chat client from the upstream
// stream: one chat.completion carrying the client's model string. Only a
// stream that reached its [DONE] is a whole answer: one that broke or
// ended before it, or that carried an error event, is a 502 (504 when
// --hub-request-timeout cut it), never a partial completion.
func (x *exchange) aggregateChat(resp *http.Response) *answer.Usage {
	w, clientModel := x.w, x.p.Req.Model
	var agg answer.ChatAggregator
	rd := answer.NewEventReader(resp.Body)
	defer rd.Release()
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			x.upstreamFailed("upstream stream ended before [DONE]")
			return nil
		}
		if err != nil {
			x.upstreamFailed("upstream stream failed")
			return nil
		}
		if ev.Done() {
			break
		}
		if len(ev.Data) == 0 {
			continue
		}
		if err := agg.Add(ev.Data); err != nil {
			var ue *answer.UpstreamError
			if errors.As(err, &ue) {
				x.upstreamFailed("upstream stream reported an error: " + ue.Message)
				return nil
			}
			x.upstreamFailed("upstream stream is malformed")
			return nil
		}
		if agg.Output() {
			x.sawOutput(false)
		}
	}
	out, err := agg.Result(clientModel, "chat.completion")
	if err != nil {
		writeBadGateway(w, err.Error())
		return nil
	}
	copyHeaders(w.Header(), resp.Header)
	writeWhole(w, out, resp.Body)
	u, ok := answer.ParseUsage(agg.Usage())
	if !ok {
		return nil
	}
	return &u
}

// writeTerminalResponse serves a non-streaming Responses client: the
// response object of the stream's terminal event (completed, failed or
// incomplete), with 200 whichever it is, as upstream Stargate's gateway
// does; the object's status tells the client. The first terminal event
// is the answer: a stream has one, and what follows it is not parsed.
func (x *exchange) writeTerminalResponse(resp *http.Response) *answer.Usage {
	w := x.w
	rd := answer.NewEventReader(resp.Body)
	defer rd.Release()
	var terminal json.RawMessage
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) || (err == nil && ev.Done()) {
			break
		}
		if err != nil {
			x.upstreamFailed("upstream stream failed")
			return nil
		}
		x.checkResponsesOutput(ev.Data)
		if obj, ok := answer.Terminal(ev.Data); ok {
			terminal = obj
			break
		}
	}
	if terminal == nil {
		writeBadGateway(w, answer.ErrNoTerminal.Error())
		return nil
	}
	copyHeaders(w.Header(), resp.Header)
	writeWhole(w, terminal, resp.Body)
	if u, ok := answer.BodyUsage(terminal); ok {
		return &u
	}
	return nil
}

// passJSON passes a JSON body through unchanged.
func (x *exchange) passJSON(resp *http.Response) *answer.Usage {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		x.upstreamFailed("reading the hub response failed")
		return nil
	}
	writeBody(x.w, resp, b)
	if u, ok := answer.BodyUsage(b); ok {
		return &u
	}
	return nil
}

// writeBody writes the hub's status, client-visible headers and body b.
func writeBody(w http.ResponseWriter, resp *http.Response, b []byte) {
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b) //nolint:gosec // G705: passing the hub's JSON on unchanged is this proxy's job; Content-Type is the hub's
}

// upstreamFailed answers a client whose hub answer could not be read or
// used before anything was written: 504 when a hub deadline ended the
// exchange, 502 with msg otherwise.
func (x *exchange) upstreamFailed(msg string) {
	if te := x.timedOut(); te != nil {
		x.s.d.Log.Warn("hub request timed out", "request_id", x.st.requestID, "err", te)
		writeTimeout(x.w, te)
		return
	}
	x.s.d.Log.Warn("hub answer unusable", "request_id", x.st.requestID, "reason", msg)
	writeBadGateway(x.w, msg)
}

func writeBadGateway(w http.ResponseWriter, msg string) {
	openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "bad_upstream_response", Message: msg})
}

// drainLimit bounds what reuseConn reads of a hub body: the end of its
// chunked encoding, and nothing a hub sends after a whole answer.
const drainLimit = 4 << 10

// reuseConn reads what is left of a hub body whose answer is complete
// (the last chunk of its chunked encoding, which often arrives after the
// [DONE] event), so that the HTTP client puts the connection back in its
// pool: a body closed before its end closes the connection, and the next
// request dials the hub again (about one JSON request in eight did). The
// hub ends its body right after [DONE], so the read does not wait.
func reuseConn(body io.Reader) {
	_, _ = io.CopyN(io.Discard, body, drainLimit)
}

// writeWhole sends b and a newline as the whole 200 answer built from the
// hub's stream, its length declared, then reads what is left of hubBody
// (reuseConn). The answer is flushed first: it is complete then, and the
// end of the hub's body follows the engine's, the pylon's and the hub's
// own, which the client need not wait for.
func writeWhole(w http.ResponseWriter, b []byte, hubBody io.Reader) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b) + 1)}
	delete(h, "Cache-Control")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) //nolint:gosec // G705: a JSON body built from the hub's answer, served as application/json
	_, _ = w.Write([]byte("\n"))
	_ = http.NewResponseController(w).Flush()
	reuseConn(hubBody)
}
