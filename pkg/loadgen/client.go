package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
	"github.com/stargate-router/stargate/pkg/workload"
)

// Targets: what the base URL points at.
const (
	// TargetGateway sends what a client sends: bearer auth, session ids in
	// the body or x-multi-turn-session-id; the gateway derives the rest.
	TargetGateway = "gateway"
	// TargetHub adds the headers the gateway would set
	// (docs/design/headers.md#gateway-to-hub): x-model, x-input-tokens,
	// x-cache-affinity-key and x-stargate-prompt-prefix.
	TargetHub = "hub"
)

// Message is one message of a conversation as loadgen re-sends it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Client sends one workload request and measures it. Its zero value is
// not usable; fill every field but Retries, SLO and MaxWait.
type Client struct {
	// HTTP is the HTTP client; its Timeout should be 0 (the runner bounds
	// each request with its own timer).
	HTTP *http.Client
	// BaseURL is the scheme://host:port the /v1 paths are appended to.
	BaseURL string
	// Target is TargetGateway or TargetHub.
	Target string
	// APIKey is sent as Authorization: Bearer when non-empty.
	APIKey string
	// Model is the model every request names.
	Model string
	// Stream asks for SSE (with stream_options.include_usage on chat).
	Stream bool
	// Retries is how many times a request refused before its first byte
	// (429, 502, 503, connection error) is sent again; 0 = never.
	Retries int
	// RetryBackoff is the first pause before a retry, doubled each time.
	RetryBackoff time.Duration
	// SLO and MaxWait, when > 0, are sent as x-request-slo-ms and
	// x-max-wait-ms in hub mode (the gateway strips client copies).
	SLO, MaxWait time.Duration
	// Clock measures and paces retries.
	Clock clock.Clock
}

// Job is one request ready to send: the file's request, its salted
// session id, the conversation so far (on a first turn, its shared prefix
// if it has one) and this turn's message.
type Job struct {
	Request   *workload.Request
	Session   string
	RequestID string
	History   []Message
	User      string
}

// Result is what one request reported.
type Result struct {
	Status       int
	Err          string
	TTFT         time.Duration
	Latency      time.Duration
	Reply        string
	PromptTokens int
	CachedTokens int
	OutputTokens int
	// Usage reports whether the response carried a usage object.
	Usage   bool
	Retries int
	Cluster string
	Server  string
	// InputTokens is the estimate sent as x-input-tokens (bytes/4 of the
	// prompt as the mock engine renders it).
	InputTokens int
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Err == "" && r.Status >= 200 && r.Status < 300 }

// AffinityKey is the hub-facing cache-affinity key of a session id, as
// the gateway derives it from prompt_cache_key or a conversation id
// (docs/design/sessions.md#affinity-key).
func AffinityKey(session string) string {
	sum := sha256.Sum256([]byte(session))
	return "mt:v1:session:" + hex.EncodeToString(sum[:])
}

// PayloadAffinityKey is the key the gateway derives for a chat request
// without a session id: mt:v1:payload:<sha256 of the messages array as Go
// marshals it> (docs/design/sessions.md#affinity-key). It changes every
// turn, so only the first
// turn of a conversation can use it.
func PayloadAffinityKey(msgs []Message) string {
	b, _ := json.Marshal(msgs) // strings only: cannot fail
	sum := sha256.Sum256(b)
	return headers.PayloadKeyPrefix + hex.EncodeToString(sum[:])
}

// PromptPrefix is the x-stargate-prompt-prefix a gateway with prompt
// summaries on sends for msgs: the prefixhash summary of the prompt laid
// out as the mock engine caches it ("role:content\n" per message, the same
// for chat messages and Responses message items), in the default block
// geometry; "" when the prompt has no full block (the gateway then sends
// no header).
func PromptPrefix(msgs []Message) string {
	h := prefixhash.NewHasher(prefixhash.DefaultBlockTokens, prefixhash.DefaultCharsPerToken)
	for _, m := range msgs {
		prefixhash.WriteMessage(h, m.Role, m.Content)
	}
	return string(h.AppendHeader(nil))
}

// estimateTokens is the mock engine's count of a prompt: bytes of
// "role:content\n" per message over workload.CharsPerToken.
func estimateTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + 2
	}
	return max(n/workload.CharsPerToken, 1)
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatBody struct {
	Model          string         `json:"model"`
	Messages       []Message      `json:"messages"`
	Stream         bool           `json:"stream"`
	StreamOptions  *streamOptions `json:"stream_options,omitempty"`
	MaxTokens      int            `json:"max_tokens"`
	PromptCacheKey string         `json:"prompt_cache_key,omitempty"`
}

type inputItem struct {
	Type    string `json:"type"`
	Role    string `json:"role"`
	Content string `json:"content"`
}

type conversationRef struct {
	ID string `json:"id"`
}

type responsesBody struct {
	Model           string           `json:"model"`
	Input           []inputItem      `json:"input"`
	Stream          bool             `json:"stream"`
	MaxOutputTokens int              `json:"max_output_tokens"`
	PromptCacheKey  string           `json:"prompt_cache_key,omitempty"`
	Conversation    *conversationRef `json:"conversation,omitempty"`
}

// build returns the path, body and headers of j.
func (c *Client) build(j *Job) (string, []byte, http.Header, int) {
	r := j.Request
	msgs := append(append(make([]Message, 0, len(j.History)+1), j.History...), Message{Role: "user", Content: j.User})
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set(headers.RequestID, j.RequestID)
	hdr.Set(headers.OutputTokens, strconv.Itoa(r.OutputTokens))
	if c.APIKey != "" {
		hdr.Set("Authorization", "Bearer "+c.APIKey)
	}
	if r.Source == workload.SourceHeader {
		hdr.Set(headers.MultiTurnSessionID, j.Session)
	}
	tokens := estimateTokens(msgs)
	if c.Target == TargetHub {
		hdr.Set(headers.Model, c.Model)
		hdr.Set(headers.InputTokens, strconv.Itoa(tokens))
		switch {
		case j.Session != "" && r.Source != workload.SourceNone:
			hdr.Set(headers.CacheAffinityKey, AffinityKey(j.Session))
		case r.Endpoint == "chat":
			// No session id (a one-shot, or a keyless conversation whose
			// id only links its turns in the file): the gateway's
			// payload key.
			hdr.Set(headers.CacheAffinityKey, PayloadAffinityKey(msgs))
		}
		if v := PromptPrefix(msgs); v != "" {
			hdr.Set(headers.StargatePromptPrefix, v)
		}
		if c.SLO > 0 {
			hdr.Set(headers.RequestSLOMs, strconv.FormatInt(c.SLO.Milliseconds(), 10))
		}
		if c.MaxWait > 0 {
			hdr.Set(headers.MaxWaitMs, strconv.FormatInt(c.MaxWait.Milliseconds(), 10))
		}
	}
	var pck string
	if r.Source == workload.SourcePromptCacheKey {
		pck = j.Session
	}
	var v any
	path := "/v1/chat/completions"
	if r.Endpoint == "responses" {
		path = "/v1/responses"
		b := responsesBody{Model: c.Model, Stream: c.Stream, MaxOutputTokens: r.OutputTokens, PromptCacheKey: pck}
		for _, m := range msgs {
			b.Input = append(b.Input, inputItem{Type: "message", Role: m.Role, Content: m.Content})
		}
		if r.Source == workload.SourceConversation {
			b.Conversation = &conversationRef{ID: j.Session}
		}
		v = b
	} else {
		b := chatBody{Model: c.Model, Messages: msgs, Stream: c.Stream, MaxTokens: r.OutputTokens, PromptCacheKey: pck}
		if c.Stream {
			b.StreamOptions = &streamOptions{IncludeUsage: true}
		}
		v = b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain structs of strings and ints cannot fail
	return path, buf.Bytes(), hdr, tokens
}

// retryable reports whether an attempt may be sent again: refused before
// any byte of an answer.
func retryable(status int, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	return status == http.StatusTooManyRequests || status == http.StatusBadGateway || status == http.StatusServiceUnavailable
}

// Do sends j, retrying as configured, and measures it. TTFT and latency
// are from the start of the first attempt, so they include retry time.
func (c *Client) Do(ctx context.Context, j *Job) Result {
	path, body, hdr, tokens := c.build(j)
	start := c.Clock.Now()
	var res Result
	backoff := c.RetryBackoff
	for attempt := 0; ; attempt++ {
		ar := c.attempt(ctx, path, body, hdr, start)
		res = ar.Result
		res.Retries = attempt
		res.InputTokens = tokens
		if res.OK() || attempt >= c.Retries || !retryable(res.Status, ar.transportErr) {
			break
		}
		if !clock.Sleep(c.Clock, ctx.Done(), backoff) {
			break
		}
		backoff *= 2
	}
	res.Latency = c.Clock.Since(start)
	return res
}

// attemptResult carries the transport error of an attempt next to the
// Result, for the retry decision.
type attemptResult struct {
	Result
	transportErr error
}

func (c *Client) attempt(ctx context.Context, path string, body []byte, hdr http.Header, start time.Time) attemptResult {
	var out attemptResult
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		out.Err, out.transportErr = err.Error(), err
		return out
	}
	req.Header = hdr.Clone()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		out.Err, out.transportErr = transportError(ctx, err), err
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	out.Status = resp.StatusCode
	out.Cluster = resp.Header.Get(headers.StargateClusterID)
	if out.Cluster == "" {
		// Through the gateway the hub's header is hidden; a mock engine
		// started with --cluster-id names its cluster, one started with only
		// --engine-id (one engine per cluster) names itself.
		out.Cluster = resp.Header.Get(headers.MockClusterID)
	}
	if out.Cluster == "" {
		out.Cluster = resp.Header.Get(headers.MockEngineID)
	}
	out.Server = resp.Header.Get(headers.InferenceServerID)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		out.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, errorMessage(b))
		return out
	}
	var perr error
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		perr = c.readStream(resp.Body, &out.Result, start)
	} else {
		perr = c.readJSON(resp.Body, &out.Result, start)
	}
	if perr != nil {
		out.Err = transportError(ctx, perr)
	}
	// A reply without usage still counts its tokens; cached tokens fall
	// back to the engine's header when the usage object is missing.
	if !out.Usage {
		if n, err := strconv.Atoi(resp.Header.Get(headers.KVCacheHitTokens)); err == nil {
			out.CachedTokens = n
		}
	}
	return out
}

// transportError names a cancellation by its cause, so a run deadline and
// a request timeout read differently in the report.
func transportError(ctx context.Context, err error) string {
	if cause := context.Cause(ctx); cause != nil {
		return cause.Error()
	}
	return err.Error()
}

// errorMessage extracts the OpenAI error message of a body, or the body.
func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return strings.TrimSpace(string(b))
}

// usageFields is the usage object of either API.
type usageFields struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	InputTokens         int `json:"input_tokens"`
	OutputTokens        int `json:"output_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u *usageFields) apply(r *Result) {
	r.Usage = true
	r.PromptTokens = u.PromptTokens + u.InputTokens
	r.OutputTokens = u.CompletionTokens + u.OutputTokens
	switch {
	case u.PromptTokensDetails != nil:
		r.CachedTokens = u.PromptTokensDetails.CachedTokens
	case u.InputTokensDetails != nil:
		r.CachedTokens = u.InputTokensDetails.CachedTokens
	}
}

// streamEvent is the union of the chat chunk and Responses event fields
// loadgen reads.
type streamEvent struct {
	Type    string          `json:"type"`
	Delta   json.RawMessage `json:"delta"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage    *usageFields `json:"usage"`
	Response *struct {
		Usage *usageFields `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	} `json:"response"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
}

// errIncomplete is a stream that ended before its terminal event.
var errIncomplete = errors.New("stream ended before its final event")

// readStream reads an SSE body: TTFT is the first non-empty content delta;
// chat ends with data: [DONE], Responses with response.completed.
func (c *Client) readStream(body io.Reader, r *Result, start time.Time) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var reply strings.Builder
	var data []byte
	// hasData says the event has a data line, even an empty one: the SSE
	// rule joins data lines with LF, so "data:" then "data: x" is "\nx".
	hasData := false
	events, done := 0, false
	handle := func() error {
		if !hasData {
			return nil
		}
		defer func() { data, hasData = data[:0], false }()
		if len(data) == 0 {
			return nil // an empty data buffer dispatches nothing
		}
		if string(data) == "[DONE]" {
			done = true
			return nil
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("bad SSE data: %w", err)
		}
		var text string
		switch ev.Type {
		case "response.output_text.delta":
			_ = json.Unmarshal(ev.Delta, &text)
		case "": // a chat or completion chunk
			for _, ch := range ev.Choices {
				text += ch.Delta.Content + ch.Text
			}
		}
		if text != "" {
			if r.TTFT == 0 {
				r.TTFT = c.Clock.Since(start)
			}
			events++
			reply.WriteString(text)
		}
		if ev.Usage != nil {
			ev.Usage.apply(r)
		}
		switch ev.Type {
		case "response.completed":
			done = true
			if ev.Response != nil && ev.Response.Usage != nil {
				ev.Response.Usage.apply(r)
			}
		case "response.failed", "response.incomplete":
			msg := ev.Type
			if ev.Response != nil && ev.Response.Error != nil {
				msg += ": " + ev.Response.Error.Message
			}
			return errors.New(msg)
		case "error":
			return fmt.Errorf("error event: %s", ev.Message)
		}
		if ev.Error != nil {
			return fmt.Errorf("error event: %s", ev.Error.Message)
		}
		return nil
	}
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if herr := handle(); herr != nil {
				return herr
			}
		case strings.HasPrefix(line, "data:"):
			if hasData {
				data = append(data, '\n')
			}
			hasData = true
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
		if err != nil {
			if herr := handle(); herr != nil {
				return herr
			}
			r.Reply = reply.String()
			if !r.Usage {
				r.OutputTokens = events
			}
			if errors.Is(err, io.EOF) {
				if !done {
					return errIncomplete
				}
				return nil
			}
			return err
		}
	}
}

// readJSON reads a non-streaming answer; TTFT is the whole latency.
func (c *Client) readJSON(body io.Reader, r *Result, start time.Time) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	r.TTFT = c.Clock.Since(start)
	var v struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage *usageFields `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("bad JSON answer: %w", err)
	}
	var reply strings.Builder
	for _, ch := range v.Choices {
		reply.WriteString(ch.Message.Content)
	}
	for _, o := range v.Output {
		for _, p := range o.Content {
			reply.WriteString(p.Text)
		}
	}
	r.Reply = reply.String()
	if v.Usage != nil {
		v.Usage.apply(r)
	}
	return nil
}
