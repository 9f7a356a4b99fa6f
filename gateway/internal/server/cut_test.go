package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

// cutMode is how a cutHub's answer ends.
type cutMode int

const (
	// cutAbort aborts the handler with http.ErrAbortHandler after the
	// first events, as the hub does when its pylon's stream breaks: on
	// HTTP/2 the stream is reset (RST_STREAM), on HTTP/1.1 the connection
	// closes in the middle of the chunked body.
	cutAbort cutMode = iota
	// cutEOF ends the body cleanly but before the terminating event.
	cutEOF
	// cutNone finishes the answer: the control case.
	cutNone
)

func (m cutMode) String() string { return [...]string{"abort", "eof", "none"}[m] }

// cutHub is a hub-like upstream whose SSE answer breaks after two events.
// proto is the HTTP major version of the last request it served.
type cutHub struct {
	srv   *httptest.Server
	mode  cutMode
	proto atomic.Int32
}

// newCutHub starts a cutHub speaking HTTP/2 over TLS when h2, else
// HTTP/1.1.
func newCutHub(t *testing.T, h2 bool, mode cutMode) *cutHub {
	t.Helper()
	c := &cutHub{mode: mode}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	if h2 {
		c.srv.EnableHTTP2 = true
		c.srv.StartTLS()
	} else {
		c.srv.Start()
	}
	t.Cleanup(c.srv.Close)
	return c
}

func (c *cutHub) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c.proto.Store(int32(r.ProtoMajor))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Stargate-Cluster-Id", "cluster-a")
	w.WriteHeader(http.StatusOK)
	var events []string
	var last string
	switch r.URL.Path {
	case "/v1/responses":
		events = []string{
			`event: response.created` + "\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"r1","object":"response","status":"in_progress","output":[]}}`,
			`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"m1","output_index":0,"content_index":0,"delta":"Hel"}`,
		}
		last = `event: response.completed` + "\n" + `data: {"type":"response.completed","sequence_number":2,"response":{"id":"r1","object":"response","status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}`
	case "/v1/completions":
		events = []string{
			`data: {"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Hel"}]}`,
			`data: {"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"lo"}]}`,
		}
		last = `data: [DONE]`
	default:
		events = []string{
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`,
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"}}]}`,
		}
		last = `data: [DONE]`
	}
	for _, ev := range events {
		fmt.Fprintf(w, "%s\n\n", ev)
	}
	w.(http.Flusher).Flush()
	switch c.mode {
	case cutAbort:
		panic(http.ErrAbortHandler)
	case cutNone:
		fmt.Fprintf(w, "%s\n\n", last)
	}
}

// teeTransport keeps a copy of every response body the client reads.
type teeTransport struct {
	rt  http.RoundTripper
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *teeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err == nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(resp.Body, t), resp.Body}
	}
	return resp, err
}

func (t *teeTransport) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.Write(p)
}

func (t *teeTransport) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// cutCases are the upstream transports and ways a stream can end early.
var cutCases = []struct {
	name string
	h2   bool
	mode cutMode
}{
	{"http2-reset", true, cutAbort},
	{"http1-closed", false, cutAbort},
	{"http1-eof-before-end", false, cutEOF},
	{"http2-eof-before-end", true, cutEOF},
}

// TestStreamCutShortSDK: when the hub's stream breaks after a few events
// (reset, connection closed, or ended before its terminating event), the
// official openai-go SDK's stream reports an error on chat, completions
// and Responses, and the bytes it read hold the gateway's error event and
// no [DONE]. The control case (a stream that ends properly) reads with no
// error, so the assertions can tell the two apart.
func TestStreamCutShortSDK(t *testing.T) {
	cases := append(cutCases[:len(cutCases):len(cutCases)], struct {
		name string
		h2   bool
		mode cutMode
	}{"http2-complete", true, cutNone})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hub := newCutHub(t, tc.h2, tc.mode)
			h := newHarness(t, opts{upstream: hub.srv})
			for _, ep := range []string{"chat", "completions", "responses"} {
				tee := &teeTransport{rt: h.ts.Client().Transport}
				client := openai.NewClient(option.WithBaseURL(h.ts.URL+"/v1/"), option.WithAPIKey("k"),
					option.WithHTTPClient(&http.Client{Transport: tee}), option.WithMaxRetries(0))
				events, err := sdkStream(t, client, ep)
				want := int32(1)
				if tc.h2 {
					want = 2
				}
				if got := hub.proto.Load(); got != want {
					t.Fatalf("%s: the upstream spoke HTTP/%d, want HTTP/%d", ep, got, want)
				}
				raw := tee.String()
				if tc.mode == cutNone {
					if err != nil || events < 2 {
						t.Fatalf("%s: complete stream: %d events, err %v; raw %q", ep, events, err, raw)
					}
					continue
				}
				var se *ssestream.StreamError
				if !errors.As(err, &se) || !strings.Contains(se.Message, "upstream_stream_interrupted") {
					t.Errorf("%s: stream error %v (%T), want an ssestream.StreamError naming upstream_stream_interrupted; raw %q", ep, err, err, raw)
				}
				if events < 1 {
					t.Errorf("%s: %d events before the cut reached the client; raw %q", ep, events, raw)
				}
				if strings.Contains(raw, "[DONE]") {
					t.Errorf("%s: a cut stream carries [DONE]: %q", ep, raw)
				}
			}
		})
	}
}

// sdkStream reads one stream of endpoint ep with the SDK and returns the
// events it yielded and the stream's error.
func sdkStream(t *testing.T, client openai.Client, ep string) (int, error) {
	t.Helper()
	ctx := context.Background()
	n := 0
	switch ep {
	case "chat":
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		for s.Next() {
			n++
		}
		return n, s.Err()
	case "completions":
		s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "m",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
		for s.Next() {
			n++
		}
		return n, s.Err()
	default:
		s := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		for s.Next() {
			n++
		}
		return n, s.Err()
	}
}

// TestStreamCutShortRaw: the whole body a streaming client gets from a
// cut stream holds the events that arrived, then the error event (in the
// Responses shape, numbered after the last event, on /v1/responses), no
// [DONE], and ends in a transport error: the gateway aborts the response
// rather than ending it cleanly. The stream is counted as status="error".
func TestStreamCutShortRaw(t *testing.T) {
	bodies := map[string]string{
		"/v1/chat/completions": `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`,
		"/v1/completions":      `{"model":"m","stream":true,"prompt":"x"}`,
		"/v1/responses":        `{"model":"m","stream":true,"input":"x"}`,
	}
	wantEvent := map[string]string{
		"/v1/chat/completions": `data: {"error":{"message":"the upstream stream ended before the answer was complete; the answer is cut short","type":"server_error","code":"upstream_stream_interrupted"}}` + "\n\n",
		"/v1/completions":      `data: {"error":{"message":"the upstream stream ended before the answer was complete; the answer is cut short","type":"server_error","code":"upstream_stream_interrupted"}}` + "\n\n",
		"/v1/responses": "event: error\n" + `data: {"type":"error","sequence_number":2,"code":"upstream_stream_interrupted","message":"the upstream stream ended before the answer was complete; the answer is cut short","param":null,` +
			`"error":{"message":"the upstream stream ended before the answer was complete; the answer is cut short","type":"server_error","code":"upstream_stream_interrupted"}}` + "\n\n",
	}
	endpoint := map[string]string{"/v1/chat/completions": "chat_completions", "/v1/completions": "completions", "/v1/responses": "responses"}
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			hub := newCutHub(t, tc.h2, tc.mode)
			h := newHarness(t, opts{upstream: hub.srv})
			for path, body := range bodies {
				req, _ := http.NewRequest(http.MethodPost, h.ts.URL+path, strings.NewReader(body))
				resp, err := h.ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				got := string(b)
				if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("%s: status %d, read error %v; want 200 and an aborted body (unexpected EOF)", path, resp.StatusCode, err)
				}
				if !strings.HasSuffix(got, wantEvent[path]) || strings.Count(got, "error") != strings.Count(wantEvent[path], "error") {
					t.Errorf("%s: body %q\nwant it to end with the error event %q", path, got, wantEvent[path])
				}
				if strings.Contains(got, "[DONE]") || !strings.Contains(got, "Hel") {
					t.Errorf("%s: body %q: want the first events and no [DONE]", path, got)
				}
				// The handler has returned (the body ended when it
				// aborted), so its stream metric is recorded.
				if n, _, _ := histogram(t, h.reg, "llm_api_gateway_stream_duration_seconds",
					map[string]string{"endpoint": endpoint[path], "status": "error"}); n != 1 {
					t.Errorf("%s: stream_duration_seconds{status=error} count %d, want 1", path, n)
				}
			}
		})
	}
}

// TestNonStreamingCutIs502: a client that did not ask to stream gets a
// 502 in the OpenAI shape, never a partial answer, when the hub's stream
// breaks or ends before [DONE] (chat) or its terminal event (Responses).
func TestNonStreamingCutIs502(t *testing.T) {
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			hub := newCutHub(t, tc.h2, tc.mode)
			h := newHarness(t, opts{upstream: hub.srv})
			client := openai.NewClient(option.WithBaseURL(h.ts.URL+"/v1/"), option.WithAPIKey("k"),
				option.WithHTTPClient(h.ts.Client()), option.WithMaxRetries(0))
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "bad_upstream_response" || apiErr.Type != "server_error" {
				t.Errorf("chat: err %v, want a 502 server_error bad_upstream_response", err)
			}
			_, err = client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "m",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Type != "server_error" {
				t.Errorf("responses: err %v, want a 502 server_error", err)
			}
		})
	}
}

// TestUpstreamErrorEventNotDoubled: when the hub relays an error event
// of its own and then breaks, the client gets that event and no second
// one from the gateway; a non-streaming chat gets a 502 carrying the
// upstream's message instead of a completion built from the chunks before
// the error.
func TestUpstreamErrorEventNotDoubled(t *testing.T) {
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"error":{"message":"engine died","type":"server_error","code":"engine_error"}}`+"\n\n")
	}))
	t.Cleanup(hub.Close)
	h := newHarness(t, opts{upstream: hub})
	resp, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != 200 || strings.Count(body, `"error"`) != 1 || !strings.Contains(body, "engine died") || strings.Contains(body, "[DONE]") {
		t.Fatalf("stream: %d %q: want the upstream's one error event and no [DONE]", resp.StatusCode, body)
	}
	resp, body = h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != 502 || !strings.Contains(body, "engine died") || strings.Contains(body, "Hel") {
		t.Fatalf("aggregated: %d %s: want a 502 with the upstream's message", resp.StatusCode, body)
	}
}
