package mockengine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// timingConfig prefills 1000 uncached tokens per second and 10000 cached
// ones, then waits 100ms before the first token and 10ms between tokens.
func timingConfig() Config {
	c := fastConfig()
	c.ColdPrefillTPS = 1000
	c.CachedPrefillTPS = 10000
	c.TTFT = 100 * time.Millisecond
	c.TokenDelay = 10 * time.Millisecond
	c.NumTokens = 3
	return c
}

// prompt1000 renders to exactly 4000 bytes, 1000 tokens at 4 chars per token:
// 62 full blocks of 16 tokens plus a 32-byte tail.
func prompt1000(fill byte) string {
	return strings.Repeat(string(fill), 4000-len("user:\n"))
}

// serve runs one request against the engine's handler inside the bubble and
// returns its timeline.
func serve(ctx context.Context, e *Engine, body string, hdr map[string]string) *timedWriter {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := newTimedWriter()
	e.Handler(nil).ServeHTTP(w, req)
	return w
}

// advance moves a synctest bubble's fake clock forward by d and returns
// once every goroutine of the bubble is blocked again. It synchronises
// nothing with the wall clock: inside a bubble, time.Sleep returns when the
// fake clock reaches d, which it does only when every other goroutine is
// durably blocked.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func near(got, want time.Duration) bool {
	d := got - want
	return d > -time.Microsecond && d < time.Microsecond
}

func TestStreamTimelineFollowsTheModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, timingConfig(), clock.Real{})
		w := serve(t.Context(), e, chatBody(true, prompt1000('a')), nil)
		evs := w.snapshot()
		if evs[0].status != http.StatusOK || !near(evs[0].at, time.Second) {
			t.Fatalf("headers at %v status %d, want 200 after the 1s prefill", evs[0].at, evs[0].status)
		}
		if got := w.Header().Get("x-kv-cache-uncached-input-tokens"); got != "1000" {
			t.Fatalf("uncached tokens header = %q, want 1000", got)
		}
		data := sseData(evs[1:])
		// role, 3 tokens, stop, usage, [DONE]
		if len(data) != 7 || data[6] != "[DONE]" {
			t.Fatalf("events = %q", data)
		}
		wantAt := []time.Duration{1100 * time.Millisecond, 1100 * time.Millisecond, 1110 * time.Millisecond, 1120 * time.Millisecond}
		for i, want := range wantAt {
			if got := evs[1+i].at; !near(got, want) {
				t.Errorf("event %d (%s) at %v, want %v", i, evs[1+i].data, got, want)
			}
		}
		var usage struct {
			Usage usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data[5]), &usage); err != nil {
			t.Fatal(err)
		}
		if usage.Usage.PromptTokens != 1000 || usage.Usage.CompletionTokens != 3 || usage.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Fatalf("usage = %+v", usage.Usage)
		}
	})
}

func TestCachedPrefixShortensPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, timingConfig(), clock.Real{})
		body := chatBody(false, prompt1000('b'))
		first := serve(t.Context(), e, body, nil)
		second := serve(t.Context(), e, body, nil)
		// 62 cached blocks = 992 tokens at 10000/s, 8 uncached at 1000/s.
		want := 99200*time.Microsecond + 8*time.Millisecond
		if got := second.snapshot()[0].at - 110*time.Millisecond - 10*time.Millisecond; !near(got, want) {
			t.Fatalf("warm prefill took %v, want %v", got, want)
		}
		if got := first.Header().Get("x-kv-cache-hit"); got != "false" {
			t.Fatalf("first x-kv-cache-hit = %q", got)
		}
		if got := second.Header().Get("x-kv-cache-hit-tokens"); got != "992" {
			t.Fatalf("second x-kv-cache-hit-tokens = %q, want 992", got)
		}
	})
}

func TestConcurrentPrefillsShareCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, timingConfig(), clock.Real{})
		var wg sync.WaitGroup
		headersAt := make([]time.Duration, 4)
		for i := range 4 {
			wg.Go(func() {
				w := serve(t.Context(), e, chatBody(true, prompt1000(byte('c'+i))), nil)
				headersAt[i] = w.snapshot()[0].at
			})
		}
		wg.Wait()
		for i, at := range headersAt {
			if !near(at, 4*time.Second) {
				t.Errorf("request %d prefilled by %v, want 4s (4 equal jobs share the engine)", i, at)
			}
		}
	})
}

func TestDisconnectFreesSlotAndPrefillShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, timingConfig(), clock.Real{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan *timedWriter)
		go func() { done <- serve(ctx, e, chatBody(true, prompt1000('x')), nil) }()
		var survivor *timedWriter
		var wg sync.WaitGroup
		wg.Go(func() { survivor = serve(t.Context(), e, chatBody(true, prompt1000('y')), nil) })
		synctest.Wait() // both requests are in and blocked on their prefill
		if running, _ := e.slots.counts(); running != 2 || e.prefill.Active() != 2 {
			t.Fatalf("at 0s: running %d, prefilling %d; want 2 and 2", running, e.prefill.Active())
		}
		advance(500 * time.Millisecond)
		if running, _ := e.slots.counts(); running != 2 || e.prefill.Active() != 2 {
			t.Fatalf("before cancel: running %d, prefilling %d; want 2 and 2", running, e.prefill.Active())
		}
		cancel()
		gone := <-done
		if len(gone.snapshot()) != 0 {
			t.Fatalf("cancelled request wrote %d events", len(gone.snapshot()))
		}
		synctest.Wait()
		if running, _ := e.slots.counts(); running != 1 || e.prefill.Active() != 1 {
			t.Fatalf("after cancel: running %d, prefilling %d; want 1 and 1", running, e.prefill.Active())
		}
		wg.Wait()
		// 0.5s at half speed, then 0.75s alone.
		if at := survivor.snapshot()[0].at; !near(at, 1250*time.Millisecond) {
			t.Fatalf("survivor prefilled by %v, want 1.25s", at)
		}
		if got := e.kv.Stats().PinnedBlocks; got != 0 {
			t.Fatalf("%d blocks still pinned after every request ended", got)
		}
	})
}

func TestQueueBeyondLimitAnswers429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := timingConfig()
		cfg.MaxConcurrent = 1
		cfg.MaxWaiting = 1
		e, reg := newEngine(t, cfg, clock.Real{})
		var wg sync.WaitGroup
		results := make([]*timedWriter, 2)
		for i := range 2 {
			wg.Go(func() { results[i] = serve(t.Context(), e, chatBody(false, prompt1000(byte('p'+i))), nil) })
			synctest.Wait()
		}
		if running, waiting := e.slots.counts(); running != 1 || waiting != 1 {
			t.Fatalf("running %d waiting %d, want 1 and 1", running, waiting)
		}
		third := serve(t.Context(), e, chatBody(false, "one too many"), nil)
		if evs := third.snapshot(); evs[0].status != http.StatusTooManyRequests || evs[0].at != 0 {
			t.Fatalf("third request: status %d at %v, want an immediate 429", evs[0].status, evs[0].at)
		}
		if third.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		wg.Wait()
		// The queued request starts when the first ends: 1s prefill + 120ms decode.
		if at := results[1].snapshot()[0].at; !near(at, 2*1120*time.Millisecond) {
			t.Fatalf("queued request finished at %v, want 2.24s", at)
		}
		if got := counterValue(t, reg, "mock_engine_rejected_requests_total", "reason", "queue_full"); got != 1 {
			t.Fatalf("queue_full rejections = %v, want 1", got)
		}
	})
}
