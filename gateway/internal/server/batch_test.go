package server

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// burstHub streams n chat chunks and the start of one more written and
// flushed as one burst, then waits for gate (when set) before the rest
// of that chunk and its [DONE].
func burstHub(n int, gate chan struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Stargate-Cluster-Id", "cluster-a")
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		b.WriteString(`data: {"id":"c","choices":[`)
		_, _ = w.Write([]byte(b.String()))
		w.(http.Flusher).Flush()
		if gate != nil {
			<-gate
		}
		_, _ = w.Write([]byte("{\"index\":0,\"delta\":{\"content\":\"last\"}}]}\n\ndata: [DONE]\n\n"))
	}))
}

// flushCounter is a response recorder that counts flushes.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() {
	f.flushes++
	f.ResponseRecorder.Flush()
}

// TestStreamFlushesOncePerBurst: events that arrive from the hub
// together go to the client with one flush, not one each.
func TestStreamFlushesOncePerBurst(t *testing.T) {
	const n = 8
	up := burstHub(n, nil)
	defer up.Close()
	h := newHarness(t, opts{upstream: up})
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	h.srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || strings.Count(rec.Body.String(), "data: ") != n+2 {
		t.Fatalf("%d %q", rec.Code, rec.Body.String())
	}
	// The head's flush, the burst's, the last chunk and [DONE]'s; a read
	// that split the burst on the way adds one at most.
	if rec.flushes > 4 {
		t.Fatalf("%d flushes for a burst of %d events and [DONE]: flushed per event", rec.flushes, n)
	}
}

// TestStreamBurstNotHeldBack: every whole event of a burst reaches the
// client while the hub still holds the rest of the stream, even with the
// start of the next event already read: a relay that flushes per burst
// must not wait for an event that is not whole yet.
func TestStreamBurstNotHeldBack(t *testing.T) {
	const n = 5
	gate := make(chan struct{})
	up := burstHub(n, gate)
	defer up.Close()
	h := newHarness(t, opts{upstream: up})
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// Each read blocks until the gateway flushed the event; the hub sends
	// [DONE] only after the whole burst was read.
	for i := range n {
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, fmt.Sprintf(`"t%d"`, i)) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		_, _ = br.ReadString('\n')
	}
	close(gate)
	rest, _ := br.ReadString(0)
	if !strings.Contains(rest, `"last"`) || !strings.Contains(rest, "[DONE]") {
		t.Fatalf("rest of stream %q", rest)
	}
}
