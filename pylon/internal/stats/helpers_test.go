package stats

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a Collector on a fake clock with its own registry.
type harness struct {
	t   testing.TB
	c   *Collector
	clk *clock.Fake
	reg *prometheus.Registry
}

// newHarness builds a Collector from cfg, filling in the fake clock, a
// registry, a placeholder upstream when cfg has none, and an HTTP client of
// its own: with the shared default transport, an idle connection left by
// another test's closed server could be reused for a new server that got
// the same port, and fail this test's first request.
func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(epoch), reg: prometheus.NewRegistry()}
	if cfg.UpstreamBaseURL == "" {
		cfg.UpstreamBaseURL = "http://127.0.0.1:1"
	}
	cfg.Clock = h.clk
	cfg.Registerer = h.reg
	if cfg.HTTPClient == nil {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.c = c
	return h
}

// line feeds one engine stats line as the stream consumer would.
func (h *harness) line(format string, args ...any) {
	var seen bool
	h.c.handleLine([]byte(fmt.Sprintf(format, args...)), &seen)
}

// stats returns the model's stats, failing when it has none.
func (h *harness) stats(model string) protocol.ModelStats {
	h.t.Helper()
	s, ok := h.c.Stats(model)
	if !ok {
		h.t.Fatalf("Stats(%q): no generation", model)
	}
	return s
}

// metric returns the value of the series name{labels} ("k=v,k=v"), or 0
// when it does not exist.
func (h *harness) metric(name, labels string) float64 {
	h.t.Helper()
	return gatherValue(h.t, h.reg, name, labels)
}

func gatherValue(t testing.TB, reg prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	want := map[string]string{}
	if labels != "" {
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, want) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				}
			}
		}
	}
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, lp := range m.GetLabel() {
		if want[lp.GetName()] != lp.GetValue() {
			return false
		}
	}
	return true
}

func approx(got, want, tolerance float64) bool {
	return math.Abs(got-want) <= tolerance*math.Abs(want)
}

// drain empties the Changed channel.
func drain(c *Collector) {
	select {
	case <-c.Changed():
	default:
	}
}

// signalled reports whether Changed holds a signal, consuming it.
func signalled(c *Collector) bool {
	select {
	case <-c.Changed():
		return true
	default:
		return false
	}
}

func posInf() float64 { return math.Inf(1) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
