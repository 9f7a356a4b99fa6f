package engineproxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// admissionRequest is a chat request with the given admission inputs;
// expected "" leaves x-stargate-expected-queue-ms out.
func admissionRequest(id, tokens, priority, expected string) http.Header {
	hd := validHeaders(id)
	hd.Set(headers.InputTokens, tokens)
	if priority != "" {
		hd.Set(headers.Priority, priority)
	}
	if expected != "" {
		hd.Set(headers.StargateExpectedQueueMs, expected)
	}
	return hd
}

func TestQueueAdmission(t *testing.T) {
	release := make(chan struct{})
	up := newScripted(t, func(w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.Header.Get(headers.RequestID) == "holder" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		okJSON(w, r, rec)
	})
	// A pinned 1000 tokens/s: 2000 queued tokens are 2000 ms of queue.
	h := newHarness(t, up.srv.URL, options{
		proxy: func(c *Config) { c.QueueMismatchRetryAfter = 150 * time.Millisecond },
		stats: func(c *stats.Config) { c.InitialInputTPS = 1000; c.PinInputTPS = true },
	})
	decisions := func(result string) float64 {
		return h.metric("pylon_queue_admission_decisions_total", "inference_server_id=pylon-test,model_id=test-model,result="+result)
	}

	// A request's own prompt work, already in the projection as Pending,
	// is not queue ahead of it.
	if resp, b := h.post("/v1/chat/completions", admissionRequest("alone", "1000000", "", "0"), chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a lone request was refused: %d %s", resp.StatusCode, b)
	}
	up.next(t)

	// The holder is Pending at priority 10 while the engine sits on it.
	holderDone := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header = admissionRequest("holder", "2000", "10", "")
		resp, err := h.client.Do(req)
		if err != nil {
			holderDone <- nil
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		holderDone <- resp
	}()
	if got := up.next(t).Header.Get(headers.RequestID); got != "holder" {
		t.Fatalf("engine got %q, want the holder", got)
	}
	if ms, ok := h.tr.LocalQueueMs(testModel, 10, nil); !ok || ms != 2000 {
		t.Fatalf("LocalQueueMs = %d, %v; want 2000", ms, ok)
	}

	resp, b := h.post("/v1/chat/completions", admissionRequest("rejected-1", "10", "10", "0"), chatBody)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 (%s)", resp.StatusCode, b)
	}
	p := problemBody(t, resp, b)
	if p["detail"] != "local queue estimate exceeded Stargate routing estimate" || p["reason"] != headers.ReasonQueueEstimateMismatch {
		t.Errorf("problem = %v", p)
	}
	if p["expected_queue_ms"] != 0.0 || p["actual_queue_ms"] != 2000.0 || p["threshold_ms"] != 25.0 {
		t.Errorf("expected/actual/threshold = %v/%v/%v, want 0/2000/25", p["expected_queue_ms"], p["actual_queue_ms"], p["threshold_ms"])
	}
	if resp.Header.Get(headers.StargateRetryable) != "true" ||
		resp.Header.Get(headers.StargateRetryReason) != headers.ReasonQueueEstimateMismatch ||
		resp.Header.Get(headers.StargateRetryAfterMs) != "150" {
		t.Errorf("retry headers = %q/%q/%q", resp.Header.Get(headers.StargateRetryable),
			resp.Header.Get(headers.StargateRetryReason), resp.Header.Get(headers.StargateRetryAfterMs))
	}

	cases := []struct {
		id, tokens, priority, expected string
		status                         int
	}{
		{"more-urgent", "10", "5", "0", http.StatusOK},            // the holder's priority-10 work is behind it
		{"absent-priority", "10", "", "0", http.StatusOK},         // absent = 0
		{"generous", "10", "10", "2000", http.StatusOK},           // threshold max(2025, 2500)
		{"tight", "10", "10", "1575", http.StatusTooManyRequests}, // threshold max(1600, 1969) < 2000
		{"at-threshold", "10", "10", "1600", http.StatusOK},       // threshold 2000 == actual
		{"missing", "10", "10", "", http.StatusOK},
		{"invalid", "10", "10", "soon", http.StatusOK},
	}
	for _, tc := range cases {
		resp, b := h.post("/v1/chat/completions", admissionRequest(tc.id, tc.tokens, tc.priority, tc.expected), chatBody)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.id, resp.StatusCode, tc.status, b)
		}
	}
	close(release)
	if r := <-holderDone; r == nil || r.StatusCode != http.StatusOK {
		t.Fatalf("holder failed: %v", r)
	}
	h.waitServed(2 + len(cases) + 1)

	for result, want := range map[string]float64{"accepted": 5, "rejected": 2, "missing_estimate": 3} {
		if got := decisions(result); got != want {
			t.Errorf("decisions{%s} = %v, want %v", result, got, want)
		}
	}
	if got := h.metric("pylon_retryable_responses_total", "inference_server_id=pylon-test,reason=queue_estimate_mismatch,status=429"); got != 2 {
		t.Errorf("retryable_responses_total = %v, want 2", got)
	}
	if got := h.metric("pylon_queue_admission_expected_ms", ""); got != 7 {
		t.Errorf("expected_ms samples = %v, want 7 (checked requests)", got)
	}
	// rejected-1, generous, tight and at-threshold saw 2000 ms; the rest 0.
	if got := histogramSum(t, h.reg, "pylon_queue_admission_actual_ms"); got != 4*2000 {
		t.Errorf("actual_ms sum = %v, want 8000", got)
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=failed"); got != 2 {
		t.Errorf("requests_total{failed} = %v, want 2", got)
	}
	// A rejected request never reaches the engine and its observer fails.
	for _, rec := range up.received() {
		if id := rec.Header.Get(headers.RequestID); strings.HasPrefix(id, "rejected") || id == "tight" {
			t.Errorf("rejected request %s reached the engine", id)
		}
	}
	for _, o := range h.tr.begun() {
		id := o.Info().ID
		want := stats.Complete
		if id == "rejected-1" || id == "tight" {
			want = stats.Failed
		}
		if o.State() != want {
			t.Errorf("observer %s: %v, want %v", id, o.State(), want)
		}
	}
	if st, _ := h.coll.Stats(testModel); st.NumRunningQueries != 0 {
		t.Errorf("num_running_queries = %d", st.NumRunningQueries)
	}
}

func TestQueueAdmissionDecisions(t *testing.T) {
	pending := func(h *harness) {
		// Work queued ahead of everything, as an observer the proxy would
		// have begun.
		obs := h.tr.Begin(RequestInfo{ID: "queued", Model: testModel, Endpoint: EndpointChat, InputTokens: 5000})
		h.t.Cleanup(obs.Cancel)
	}
	cases := []struct {
		name    string
		opts    options
		result  string
		status  int
		noAfter bool
	}{
		{"disabled", options{
			proxy: func(c *Config) { c.QueueMismatchEnabled = false },
			stats: func(c *stats.Config) { c.InitialInputTPS = 1000; c.PinInputTPS = true },
		}, "disabled", http.StatusOK, false},
		{"no local estimate without a TPS", options{}, "unknown_local_estimate", http.StatusOK, false},
		{"rejected without a retry-after hint", options{
			stats: func(c *stats.Config) { c.InitialInputTPS = 1000 },
		}, "rejected", http.StatusTooManyRequests, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newScripted(t, okJSON)
			h := newHarness(t, up.srv.URL, tc.opts)
			pending(h)
			resp, b := h.post("/v1/chat/completions", admissionRequest("r", "10", "", "0"), chatBody)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tc.status, b)
			}
			if tc.noAfter && resp.Header.Get(headers.StargateRetryAfterMs) != "" {
				t.Errorf("retry-after hint sent without --pylon-queue-mismatch-retry-after-ms")
			}
			if got := h.metric("pylon_queue_admission_decisions_total", "inference_server_id=pylon-test,model_id=test-model,result="+tc.result); got != 1 {
				t.Errorf("decisions{%s} = %v, want 1", tc.result, got)
			}
			checked := 0.0
			if tc.result == "rejected" {
				checked = 1
			}
			if got := h.metric("pylon_queue_admission_actual_ms", ""); got != checked {
				t.Errorf("actual_ms samples = %v, want %v", got, checked)
			}
		})
	}
}

// TestQueueAdmissionCountsInputProcessingFirst: a request whose engine
// sent headers but no output sits at priority 0, ahead of every queued
// request (the engine is already prefilling it), so even a priority-0
// newcomer is behind it.
func TestQueueAdmissionCountsInputProcessingFirst(t *testing.T) {
	release := make(chan struct{})
	up := newScripted(t, func(w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.Header.Get(headers.RequestID) != "prefilling" {
			okJSON(w, r, rec)
			return
		}
		sseStart(w, http.StatusOK)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	h := newHarness(t, up.srv.URL, options{stats: func(c *stats.Config) { c.InitialInputTPS = 1000; c.PinInputTPS = true }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.request(ctx, http.MethodPost, "/v1/chat/completions", admissionRequest("prefilling", "3000", "50", ""), chatBody)
	defer func() { _ = resp.Body.Close() }()
	// The client has the head, so the proxy has recorded it.
	resp2, b := h.post("/v1/chat/completions", admissionRequest("urgent", "1", "0", "0"), chatBody)
	if resp2.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 (%s)", resp2.StatusCode, b)
	}
	if p := problemBody(t, resp2, b); p["actual_queue_ms"] != 3000.0 {
		t.Errorf("actual_queue_ms = %v, want 3000", p["actual_queue_ms"])
	}
	close(release)
}
