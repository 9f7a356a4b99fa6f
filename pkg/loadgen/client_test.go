package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/workload"
)

// seen is one request the engine received.
type seen struct {
	path   string
	header http.Header
	body   map[string]any
}

// startMock serves a real mock engine with zero modelled delays, behind a
// handler that records every request and, like the hub, names a cluster.
func startMock(t *testing.T) (string, func() []seen) {
	t.Helper()
	cfg := mockengine.DefaultConfig()
	cfg.TTFT, cfg.TokenDelay, cfg.ColdPrefillTPS, cfg.CachedPrefillTPS = 0, 0, 0, 0
	eng, err := mockengine.New(cfg, clock.Real{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Handler(nil)
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		got = append(got, seen{r.URL.Path, r.Header.Clone(), body})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		w.Header().Set("x-stargate-cluster-id", "cluster-a")
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		eng.Close()
		srv.Close()
	})
	return srv.URL, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

func testClient(url, target string) Client {
	return Client{HTTP: NewHTTPClient(), BaseURL: url, Target: target, APIKey: "k", Model: "m", Stream: true, Clock: clock.Real{}}
}

// TestRunAgainstMockEngine replays the smoke suite (chat and Responses,
// every session source) against a real in-process mock engine: every turn
// re-sends the conversation with the actual replies, so turns after the
// first hit the engine's prefix cache.
func TestRunAgainstMockEngine(t *testing.T) {
	for _, target := range []string{TargetHub, TargetGateway} {
		t.Run(target, func(t *testing.T) {
			url, requests := startMock(t)
			w, err := workload.Generate(workload.SuiteSmoke, workload.SuiteParams{Seed: 7, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			c := testClient(url, target)
			out, err := NewRunner(Config{Salt: "r1"}, c.Do).Run(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			bySession := map[string][]Record{}
			for _, r := range out.Records {
				if r.Outcome != OutcomeOK || r.Status != 200 || !r.Usage || r.Cluster != "cluster-a" {
					t.Fatalf("record %+v", r)
				}
				if r.OutputTokens != w.Requests[r.Index].OutputTokens {
					t.Fatalf("request %d: %d output tokens, asked %d", r.Index, r.OutputTokens, w.Requests[r.Index].OutputTokens)
				}
				// One engine with room for everything, sessions that share
				// nothing, turns one after another: the engine finds
				// exactly the ceiling, which proves the ceiling lays
				// prompts out and cuts blocks as the engine does.
				if r.CachedTokens != r.CacheableTokens {
					t.Fatalf("request %d (turn %d, %s): engine cached %d tokens, ceiling %d", r.Index, r.Turn, r.Endpoint, r.CachedTokens, r.CacheableTokens)
				}
				bySession[r.Session] = append(bySession[r.Session], r)
			}
			for s, turns := range bySession {
				if s == "" {
					continue
				}
				if turns[0].CachedTokens != 0 {
					t.Fatalf("session %s: turn 1 hit %d tokens", s, turns[0].CachedTokens)
				}
				for _, r := range turns[1:] {
					if r.CachedTokens == 0 || r.CachedTokens >= r.PromptTokens {
						t.Fatalf("session %s turn %d: %d of %d prompt tokens cached", s, r.Turn, r.CachedTokens, r.PromptTokens)
					}
				}
			}
			checkWire(t, target, w, requests())
		})
	}
}

// checkWire asserts what went over the wire: history re-sent with the
// replies, the session named as its source says, hub headers in hub mode.
func checkWire(t *testing.T, target string, w *workload.Workload, got []seen) {
	t.Helper()
	if len(got) != len(w.Requests) {
		t.Fatalf("engine saw %d requests, want %d", len(got), len(w.Requests))
	}
	byID := map[string]seen{}
	for _, s := range got {
		byID[s.header.Get("x-request-id")] = s
	}
	for i, r := range w.Requests {
		s, ok := byID["loadgen-smoke-r1-"+itoa(i)]
		if !ok {
			t.Fatalf("request %d not seen", i)
		}
		var msgs []any
		if r.Endpoint == "responses" {
			msgs, _ = s.body["input"].([]any)
			if s.path != "/v1/responses" {
				t.Fatalf("request %d went to %s", i, s.path)
			}
		} else {
			msgs, _ = s.body["messages"].([]any)
			if so, _ := s.body["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Fatalf("request %d: stream_options %v", i, s.body["stream_options"])
			}
		}
		// Turn n carries 2(n-1) earlier messages (user, assistant) plus
		// its own; the assistant ones are non-empty replies.
		if len(msgs) != 2*r.Turn-1 {
			t.Fatalf("request %d (turn %d) has %d messages", i, r.Turn, len(msgs))
		}
		for k := 1; k < len(msgs); k += 2 {
			m := msgs[k].(map[string]any)
			if m["role"] != "assistant" || m["content"] == "" {
				t.Fatalf("request %d message %d: %v", i, k, m)
			}
		}
		last := msgs[len(msgs)-1].(map[string]any)["content"].(string)
		name := "r1:" + r.Session
		if r.Session == "" {
			name = "r1:#" + itoa(i)
		}
		if last != workload.UserText(w.Header.Seed, name, r.Turn, r.NewInputTokens) {
			t.Fatalf("request %d: user text differs from workload.UserText", i)
		}
		if s.header.Get("x-output-tokens") != itoa(r.OutputTokens) {
			t.Fatalf("request %d: x-output-tokens %q", i, s.header.Get("x-output-tokens"))
		}
		switch r.Source {
		case workload.SourcePromptCacheKey:
			if s.body["prompt_cache_key"] != name {
				t.Fatalf("request %d: prompt_cache_key %v", i, s.body["prompt_cache_key"])
			}
		case workload.SourceConversation:
			if conv, _ := s.body["conversation"].(map[string]any); conv["id"] != name {
				t.Fatalf("request %d: conversation %v", i, s.body["conversation"])
			}
		case workload.SourceHeader:
			if s.header.Get("x-multi-turn-session-id") != name {
				t.Fatalf("request %d: x-multi-turn-session-id %q", i, s.header.Get("x-multi-turn-session-id"))
			}
		}
		hubHeaders := s.header.Get("x-model") != "" && s.header.Get("x-input-tokens") != ""
		if hubHeaders != (target == TargetHub) {
			t.Fatalf("request %d: hub headers present = %v with target %s", i, hubHeaders, target)
		}
		wantKey := ""
		switch {
		case target == TargetHub && r.Session != "":
			wantKey = AffinityKey(name)
		case target == TargetHub:
			wantKey = PayloadAffinityKey([]Message{{Role: "user", Content: last}})
		}
		if got := s.header.Get("x-cache-affinity-key"); got != wantKey {
			t.Fatalf("request %d: x-cache-affinity-key %q, want %q", i, got, wantKey)
		}
		if got := s.header.Get("Authorization"); got != "Bearer k" {
			t.Fatalf("request %d: Authorization %q", i, got)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestAffinityKeyVector(t *testing.T) {
	// The gateway's affinity-key test vectors
	// (docs/design/sessions.md#affinity-key).
	if got := AffinityKey("abc"); got != "mt:v1:session:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatal(got)
	}
	if got := PayloadAffinityKey([]Message{{Role: "user", Content: "hello"}}); got != "mt:v1:payload:e920b204bce6401c9e1a506f434853899fabada37ae5ad9033d8937eda0ba853" {
		t.Fatal(got)
	}
}

func TestNonStreamingAndRetry(t *testing.T) {
	url, _ := startMock(t)
	var mu sync.Mutex
	refusals := 1
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refuse := refusals > 0
		refusals--
		mu.Unlock()
		if refuse {
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
			return
		}
		resp, err := http.Post(url+r.URL.Path, "application/json", r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	c := testClient(proxy.URL, TargetGateway)
	c.Stream = false
	c.Retries = 1
	r := workload.Request{Turn: 1, Source: workload.SourceNone, Endpoint: "chat", NewInputTokens: 10, OutputTokens: 3}
	res := c.Do(context.Background(), &Job{Request: &r, RequestID: "x", User: strings.Repeat("word ", 8)})
	if !res.OK() || res.Retries != 1 || res.Reply == "" || !res.Usage || res.PromptTokens == 0 || res.TTFT <= 0 || res.Latency < res.TTFT {
		t.Fatalf("result %+v", res)
	}
	// Without retries the refusal is the answer, with its message.
	mu.Lock()
	refusals = 1
	mu.Unlock()
	c.Retries = 0
	res = c.Do(context.Background(), &Job{Request: &r, RequestID: "y", User: "hello"})
	if res.OK() || res.Status != 503 || !strings.Contains(res.Err, "busy") {
		t.Fatalf("result %+v", res)
	}
}

func TestReadStreamErrors(t *testing.T) {
	c := &Client{Clock: clock.Real{}}
	for name, body := range map[string]string{
		"no [DONE]":       "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
		"failed response": "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"message\":\"boom\"}}}\n\n",
		"bad json":        "data: {\n\n",
		// Data lines join with LF: this event's data is "\n[DONE]", not
		// the terminator.
		"empty first data line": "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata:\ndata: [DONE]\n\n",
	} {
		var r Result
		if err := c.readStream(strings.NewReader(body), &r, c.Clock.Now()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var joined Result
	body := "data:\n\ndata:\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"
	if err := c.readStream(strings.NewReader(body), &joined, c.Clock.Now()); err != nil || joined.Reply != "a" {
		t.Fatalf("an empty event, then a chunk after an empty data line: %v %+v", err, joined)
	}
	var r Result
	body = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1,\"input_tokens_details\":{\"cached_tokens\":4}}}}\n\n"
	if err := c.readStream(strings.NewReader(body), &r, c.Clock.Now()); err != nil || r.Reply != "hi" || r.PromptTokens != 9 || r.CachedTokens != 4 || r.OutputTokens != 1 {
		t.Fatalf("responses stream: %v %+v", err, r)
	}
}

// FuzzReadStream feeds arbitrary SSE bodies, in reads of a fuzzed size,
// to the stream reader: it may reject them but must not panic, must stop
// reading at the end of the body, must not report more output than it
// read, and may only accept a body that carries a terminal event.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\ndata: [DONE]\n\n", uint8(1))
	f.Add("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n", uint8(5))
	f.Add("data: {\"type\":\"response.output_text.delta\",\"delta\":{}}\n\n", uint8(0))
	f.Add(":comment\r\ndata:\r\n\r\n", uint8(2))
	f.Add("data: {\"type\":\ndata: \"response\\u002ecompleted\"}\r\r\n\n", uint8(4))
	f.Fuzz(func(t *testing.T, body string, chunk uint8) {
		c := &Client{Clock: clock.NewFake(time.Unix(0, 0))}
		var r Result
		rd := &pieceReader{t: t, data: []byte(body), n: max(int(chunk), 1)}
		err := c.readStream(rd, &r, c.Clock.Now())
		if len(r.Reply) > len(body) {
			t.Fatalf("reply of %d bytes from a %d-byte body", len(r.Reply), len(body))
		}
		if err == nil && !hasTerminalEvent(body) {
			t.Fatalf("accepted %q, which has no terminal event", body)
		}
	})
}

// hasTerminalEvent reports whether an SSE body holds an event whose data
// (its data lines joined by LF, trimmed) is [DONE] or a JSON object of
// type response.completed; events end at blank lines.
func hasTerminalEvent(body string) bool {
	var data []string
	terminal := func() bool {
		p := strings.TrimSpace(strings.Join(data, "\n"))
		data = nil
		var ev struct {
			Type string `json:"type"`
		}
		return p == "[DONE]" || (json.Unmarshal([]byte(p), &ev) == nil && ev.Type == "response.completed")
	}
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" {
			if terminal() {
				return true
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
	return terminal()
}

// FuzzReadStreamRelaysEveryDelta builds well-formed streams, chat or
// Responses, from fuzzed text (split into deltas at NUL bytes), with LF or
// CRLF line ends, and reads them in pieces of a fuzzed size: the reply must
// be exactly the deltas' text as encoding/json carries it, and the output
// count the number of non-empty deltas. A reader that dropped, duplicated
// or reordered bytes would break one of the two.
func FuzzReadStreamRelaysEveryDelta(f *testing.F) {
	f.Add("hello\x00 world", false, false, uint8(3))
	f.Add("a\x00\x00b\x00\u00e9\n\"x\"", true, true, uint8(1))
	f.Add("\xff\xfe", false, true, uint8(64))
	f.Add("", true, false, uint8(2))
	f.Fuzz(func(t *testing.T, text string, responses, crlf bool, chunk uint8) {
		eol := "\n"
		if crlf {
			eol = "\r\n"
		}
		var stream strings.Builder
		event := func(name string, payload any) {
			if name != "" {
				stream.WriteString("event: " + name + eol)
			}
			b, err := json.Marshal(payload)
			if err != nil {
				t.Fatal(err)
			}
			stream.WriteString("data: " + string(b) + eol + eol)
		}
		var want strings.Builder
		outputs := 0
		for _, d := range strings.Split(text, "\x00") {
			var carried string // what the receiver decodes
			b, _ := json.Marshal(d)
			if err := json.Unmarshal(b, &carried); err != nil {
				t.Fatal(err)
			}
			want.WriteString(carried)
			if carried != "" {
				outputs++
			}
			if responses {
				event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "delta": d})
			} else {
				event("", map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": d}}}})
			}
		}
		if responses {
			event("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{}})
		} else {
			stream.WriteString("data: [DONE]" + eol + eol)
		}
		c := &Client{Clock: clock.NewFake(time.Unix(0, 0))}
		var r Result
		rd := &pieceReader{t: t, data: []byte(stream.String()), n: max(int(chunk), 1)}
		if err := c.readStream(rd, &r, c.Clock.Now()); err != nil {
			t.Fatalf("readStream(%q): %v", stream.String(), err)
		}
		if r.Reply != want.String() || r.OutputTokens != outputs {
			t.Fatalf("readStream(%q): reply %q, %d outputs; want %q, %d", stream.String(), r.Reply, r.OutputTokens, want.String(), outputs)
		}
	})
}

// pieceReader hands out data at most n bytes per Read and fails the test
// when it is read again and again after EOF: a reader loop that ignores
// EOF would otherwise spin forever.
type pieceReader struct {
	t    *testing.T
	data []byte
	n    int
	eofs int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		if p.eofs++; p.eofs > 3 {
			p.t.Fatalf("read %d times after EOF", p.eofs)
		}
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), p.n)], p.data)
	p.data = p.data[k:]
	return k, nil
}

// The serving cluster comes from the hub's header when the client talks to
// the hub, else from the mock engine's cluster header (several engines per
// cluster), else from its engine id (one engine per cluster, named after
// it).
func TestClusterFromResponseHeaders(t *testing.T) {
	url, _ := startMock(t) // its cluster header stays behind the proxy below
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"hub", map[string]string{headers.StargateClusterID: "hub-view", headers.MockClusterID: "c", headers.MockEngineID: "c-p1-e2"}, "hub-view"},
		{"cluster header", map[string]string{headers.MockClusterID: "near-a", headers.MockEngineID: "near-a-p1-e2"}, "near-a"},
		{"engine id only", map[string]string{headers.MockEngineID: "near-b"}, "near-b"},
	} {
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			resp, err := http.Post(url+r.URL.Path, "application/json", r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, v := range tc.headers {
				w.Header().Set(k, v)
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
		}))
		c := testClient(proxy.URL, TargetGateway)
		c.Stream = false
		r := workload.Request{Turn: 1, Source: workload.SourceNone, Endpoint: "chat", NewInputTokens: 10, OutputTokens: 3}
		res := c.Do(context.Background(), &Job{Request: &r, RequestID: tc.name, User: "hello"})
		proxy.Close()
		if !res.OK() || res.Cluster != tc.want {
			t.Errorf("%s: cluster %q (ok %v), want %q", tc.name, res.Cluster, res.OK(), tc.want)
		}
	}
}
