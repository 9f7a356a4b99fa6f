package mockengine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
)

// fastConfig is a config whose modelled delays are zero, for tests about
// behaviour rather than timing.
func fastConfig() Config {
	c := DefaultConfig()
	c.ModelName = "test-model"
	c.TTFT = 0
	c.TokenDelay = 0
	c.ColdPrefillTPS = 0
	c.CachedPrefillTPS = 0
	c.NumTokens = 8
	return c
}

// newEngine builds an engine with its own registry on the given clock.
func newEngine(t testing.TB, cfg Config, clk clock.Clock) (*Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := New(cfg, clk, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, reg
}

// startServer serves e over real HTTP on loopback.
func startServer(t testing.TB, cfg Config) (*Engine, string) {
	t.Helper()
	e, reg := newEngine(t, cfg, clock.Real{})
	srv := httptest.NewServer(e.Handler(obs.MetricsHandler(reg)))
	t.Cleanup(func() {
		e.Close()
		srv.Close()
	})
	return e, srv.URL
}

func postJSON(t testing.TB, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// apiError is the OpenAI error body.
type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   string `json:"param"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeError(t testing.TB, resp *http.Response) apiError {
	t.Helper()
	defer resp.Body.Close()
	var e apiError
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI error: %v", b, err)
	}
	return e
}

// event is one write the handler made, stamped with the (bubble) time since
// the request started.
type event struct {
	at     time.Duration
	status int // set for the header write
	data   string
}

// timedWriter is a streaming ResponseWriter that records when each write and
// the header happened, so synctest tests can assert the modelled timeline
// exactly.
type timedWriter struct {
	mu     sync.Mutex
	start  time.Time
	header http.Header
	wrote  bool
	events []event
}

func newTimedWriter() *timedWriter {
	return &timedWriter{start: time.Now(), header: make(http.Header)}
}

func (w *timedWriter) Header() http.Header { return w.header }

func (w *timedWriter) WriteHeader(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wrote {
		return
	}
	w.wrote = true
	w.events = append(w.events, event{at: time.Since(w.start), status: status})
}

func (w *timedWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, event{at: time.Since(w.start), data: string(b)})
	return len(b), nil
}

func (w *timedWriter) Flush() {}

func (w *timedWriter) snapshot() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event(nil), w.events...)
}

// sseData returns the data: payloads of every SSE event written.
func sseData(events []event) []string {
	var out []string
	for _, ev := range events {
		sc := bufio.NewScanner(strings.NewReader(ev.data))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				out = append(out, d)
			}
		}
	}
	return out
}

func chatBody(stream bool, msgs ...string) string {
	var b bytes.Buffer
	b.WriteString(`{"model":"test-model","stream":`)
	if stream {
		b.WriteString(`true,"stream_options":{"include_usage":true}`)
	} else {
		b.WriteString(`false`)
	}
	b.WriteString(`,"messages":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		mb, _ := json.Marshal(m)
		b.WriteString(`{"role":"` + role + `","content":` + string(mb) + `}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// counterValue reads one labelled series of a counter (or gauge) from reg.
func counterValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}
