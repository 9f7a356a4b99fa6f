package calibrate

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
)

func TestStepTable(t *testing.T) {
	cases := []struct {
		name                     string
		cfg                      Config
		n                        int
		units, requests, workers int
	}{
		{"defaults step 0", Config{Requests: 5, PromptUnits: 4096, MaxConcurrency: 4}, 0, 256, 5, 1},
		{"defaults step 1", Config{Requests: 5, PromptUnits: 4096, MaxConcurrency: 4}, 1, 512, 10, 2},
		{"defaults step 3", Config{Requests: 5, PromptUnits: 4096, MaxConcurrency: 4}, 3, 2048, 40, 4},
		{"defaults step 4", Config{Requests: 5, PromptUnits: 4096, MaxConcurrency: 4}, 4, 4096, 80, 4},
		{"defaults step 7", Config{Requests: 5, PromptUnits: 4096, MaxConcurrency: 4}, 7, 4096, 640, 4},
		{"prompt between powers", Config{Requests: 1, PromptUnits: 1500, MaxConcurrency: 4}, 3, 1500, 8, 4},
		{"prompt floor 256", Config{Requests: 1, PromptUnits: 100, MaxConcurrency: 4}, 0, 256, 1, 1},
		{"prompt floor 256 later", Config{Requests: 1, PromptUnits: 0, MaxConcurrency: 4}, 5, 256, 32, 4},
		{"concurrency floor 1", Config{Requests: 2, PromptUnits: 4096, MaxConcurrency: 0}, 3, 2048, 16, 1},
		{"concurrency negative", Config{Requests: 2, PromptUnits: 4096, MaxConcurrency: -3}, 2, 1024, 8, 1},
		{"deep step does not overflow the prompt", Config{Requests: 1, PromptUnits: 1 << 30, MaxConcurrency: 8}, 40, 1 << 30, 1 << 30, 8},
	}
	for _, tc := range cases {
		u, r, w := tc.cfg.step(tc.n)
		if u != tc.units || r != tc.requests || w != tc.workers {
			t.Errorf("%s: step(%d) = %d units, %d requests, %d workers; want %d, %d, %d",
				tc.name, tc.n, u, r, w, tc.units, tc.requests, tc.workers)
		}
	}
}

var idPattern = regexp.MustCompile(`^calibration-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-g1-[0-9]+$`)

// TestRampSequence checks every step's prompt size, request count and
// concurrency, and every request's shape, against a scripted engine that
// holds each request until the step's full concurrency has arrived.
func TestRampSequence(t *testing.T) {
	type plan struct{ units, count, conc int }
	// --calibration-requests 5, --calibration-prompt-units 1500,
	// --calibration-max-concurrency 3.
	plans := []plan{{256, 5, 1}, {512, 10, 2}, {1024, 20, 3}, {1500, 40, 3}}
	type seen struct {
		received, inflight, maxInflight int
		units                           map[int]int
	}
	steps := make([]seen, len(plans))
	for i := range steps {
		steps[i].units = map[int]int{}
	}
	collClk := clock.NewFake(epoch)
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		arrivals int
	)
	var e *engine
	e = newEngine(t, func(w http.ResponseWriter, r *http.Request, c calRequest, _ int) {
		stop := context.AfterFunc(r.Context(), func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		defer stop()
		mu.Lock()
		idx := arrivals
		arrivals++
		step, first := 0, 0
		for step < len(plans) && idx >= first+plans[step].count {
			first += plans[step].count
			step++
		}
		if step == len(plans) {
			mu.Unlock()
			if c.Units != 1500 {
				t.Errorf("step %d: %d units, want 1500", step, c.Units)
			}
			e.block(r)
			return
		}
		s, p := &steps[step], plans[step]
		s.received++
		s.inflight++
		s.maxInflight = max(s.maxInflight, s.inflight)
		s.units[c.Units]++
		cond.Broadcast()
		for s.inflight < p.conc && s.received < p.count && r.Context().Err() == nil {
			cond.Wait()
		}
		s.inflight--
		mu.Unlock()
		collClk.Advance(20 * time.Millisecond) // every request takes 20 ms of collector time
		completion(w)
	})
	rg := newRig(t, e.srv.URL, collClk)
	rg.cfg.PromptUnits = 1500
	rg.cfg.MaxConcurrency = 3
	o := rg.saturate(rg.start(context.Background()), e.blocked)

	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	if o.res.Steps != 5 || o.res.Completed != 75 || o.res.Outcome != "completed" {
		t.Errorf("result = %+v, want 5 steps, 75 completed, outcome completed", o.res)
	}
	st, _ := rg.coll.Stats(testModel)
	if !(o.res.InputTPS > 0) || o.res.InputTPS != st.LastMeanInputTPS {
		t.Errorf("InputTPS = %v, collector last_mean_input_tps = %v", o.res.InputTPS, st.LastMeanInputTPS)
	}
	if st.NumRunningQueries != 0 {
		t.Errorf("calibration requests left in the projection: %d", st.NumRunningQueries)
	}
	for i, p := range plans {
		s := steps[i]
		if s.received != p.count || s.units[p.units] != p.count || s.maxInflight != p.conc {
			t.Errorf("step %d: %d requests of sizes %v at most %d at once; want %d of %d units, %d at once",
				i, s.received, s.units, s.maxInflight, p.count, p.units, p.conc)
		}
	}

	reqs, _ := e.requests()
	ids := map[string]bool{}
	for _, c := range reqs {
		id := requestID(c)
		if !idPattern.MatchString(id) || ids[id] {
			t.Errorf("request id %q malformed or repeated", id)
		}
		ids[id] = true
		if c.Path != "/v1/chat/completions" {
			t.Errorf("path %q", c.Path)
		}
		if got := c.Header.Get(headers.Model); got != testModel {
			t.Errorf("x-model = %q", got)
		}
		if got := c.Header.Get(headers.InputTokens); got != strconv.Itoa(c.Units) {
			t.Errorf("x-input-tokens = %q for %d units", got, c.Units)
		}
		if got := c.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
		b := c.Body
		if b["model"] != testModel || b["max_tokens"] != 1.0 || b["seed"] != 33.0 || b["temperature"] != 0.7 ||
			b["top_p"] != 1.0 || b["stream"] != false {
			t.Errorf("body = %v", b)
		}
	}
}

// TestRampAgainstMockEngine runs the ramp against the in-process mock
// engine: the steps complete, the step that the engine stops serving
// saturates, and the completed requests give the collector a TPS.
func TestRampAgainstMockEngine(t *testing.T) {
	cfg := mockengine.DefaultConfig()
	cfg.ModelName = testModel
	cfg.ColdPrefillTPS = 200000
	cfg.CachedPrefillTPS = 0
	cfg.TokenDelay = 0
	// 1.2 s of modelled time at time scale 100: every request takes at
	// least 12 ms, above the collector's 10 ms sample floor.
	cfg.TTFT = 1200 * time.Millisecond
	cfg.TimeScale = 100
	me, err := mockengine.New(cfg, clock.Real{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	inner := me.Handler(nil)
	blocked := make(chan struct{}, 1)
	var mu sync.Mutex
	chats := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			mu.Lock()
			chats++
			if chats == 16 {
				// Step 2 begins: hold the bring-up so this step never
				// finishes, through the mock's own test control.
				rec := httptest.NewRecorder()
				inner.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/test-control/models/"+testModel, strings.NewReader(`{"bringup_blocked":true}`)))
				if rec.Code != http.StatusOK {
					t.Errorf("test control: %d %s", rec.Code, rec.Body)
				}
				blocked <- struct{}{}
			}
			mu.Unlock()
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		me.Close()
		srv.Close()
	})

	rg := newRig(t, srv.URL, clock.Real{})
	o := rg.saturate(rg.start(context.Background()), blocked)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	if o.res.Steps != 3 || o.res.Completed != 15 || o.res.Outcome != "completed" {
		t.Errorf("result = %+v, want 3 steps, 15 completed", o.res)
	}
	// Every sample is units / (>= 12 ms): at most 512/0.012 tokens/s.
	if !(o.res.InputTPS > 0) || o.res.InputTPS > 512/0.012 {
		t.Errorf("InputTPS = %v, want in (0, %v]", o.res.InputTPS, 512/0.012)
	}
	if st, _ := rg.coll.Stats(testModel); st.LastMeanInputTPS != o.res.InputTPS || st.NumRunningQueries != 0 {
		t.Errorf("collector: %+v", st)
	}

	// The mock classed every request as the pylon's own traffic. Close
	// the server first: it waits for the held requests' handlers.
	srv.Close()
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/test-control", nil))
	var raw struct {
		Counters []map[string]any `json:"counters"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, c := range raw.Counters {
		if c["endpoint"] != "chat_completions" {
			continue
		}
		if c["request_class"] != "pylon_generated" {
			t.Errorf("mock counted calibration traffic as %v", c["request_class"])
		}
		total += c["count"].(float64)
	}
	if total < 15 || total > 18 {
		t.Errorf("mock counted %v calibration requests, want the 15 completed and at most 3 held", total)
	}
}

func TestInsufficientData(t *testing.T) {
	for _, tc := range []struct {
		completeFirst int
		wantErr       bool
		steps         int
	}{
		{4, true, 1},  // four samples: the mean never becomes valid
		{5, false, 2}, // five: step 0 completes, step 1 saturates
	} {
		t.Run(strconv.Itoa(tc.completeFirst), func(t *testing.T) {
			collClk := clock.NewFake(epoch)
			var e *engine
			e = newEngine(t, func(w http.ResponseWriter, r *http.Request, _ calRequest, n int) {
				if n >= tc.completeFirst {
					e.block(r)
					return
				}
				collClk.Advance(20 * time.Millisecond)
				completion(w)
			})
			rg := newRig(t, e.srv.URL, collClk)
			o := rg.saturate(rg.start(context.Background()), e.blocked)
			if o.res.Steps != tc.steps || o.res.Completed != tc.completeFirst {
				t.Errorf("result = %+v, want %d steps, %d completed", o.res, tc.steps, tc.completeFirst)
			}
			if tc.wantErr {
				if !errors.Is(o.err, ErrInsufficientData) || o.res.Outcome != "error" {
					t.Fatalf("Run = %+v, %v; want ErrInsufficientData", o.res, o.err)
				}
				return
			}
			// Each of the five samples is 256 units over 20 ms.
			if o.err != nil || o.res.InputTPS != 256/0.020 {
				t.Fatalf("Run = %+v, %v; want TPS %v", o.res, o.err, 256/0.020)
			}
		})
	}
}

// TestInsufficientDataMockBringupBlocked: a mock engine whose bring-up is
// blocked completes nothing; the first step saturates and calibration has
// no data.
func TestInsufficientDataMockBringupBlocked(t *testing.T) {
	cfg := mockengine.DefaultConfig()
	cfg.ModelName = testModel
	me, err := mockengine.New(cfg, clock.Real{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{}, 1)
	inner := me.Handler(nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			select {
			case blocked <- struct{}{}:
			default:
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		me.Close()
		srv.Close()
	})
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/test-control/models/"+testModel, strings.NewReader(`{"bringup_blocked":true}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("test control: %d", rec.Code)
	}
	rg := newRig(t, srv.URL, clock.Real{})
	o := rg.saturate(rg.start(context.Background()), blocked)
	if !errors.Is(o.err, ErrInsufficientData) || o.res.Completed != 0 || o.res.Steps != 1 || o.res.Outcome != "error" {
		t.Fatalf("Run = %+v, %v; want ErrInsufficientData after one step", o.res, o.err)
	}
}

// TestPromptTooLong: a 4xx saying the prompt is too long caps the prompt
// at the largest completed size and the ramp goes on.
func TestPromptTooLong(t *testing.T) {
	for _, msg := range []string{
		"Prompt too long for this model",
		"This model's maximum context length is 600 tokens",
		"input exceeds the context length",
	} {
		t.Run(msg, func(t *testing.T) {
			collClk := clock.NewFake(epoch)
			var (
				mu       sync.Mutex
				refused  bool
				afterCap int
			)
			var e *engine
			e = newEngine(t, func(w http.ResponseWriter, r *http.Request, c calRequest, _ int) {
				if c.Units > 512 {
					mu.Lock()
					refused = true
					mu.Unlock()
					refuse(w, http.StatusBadRequest, msg)
					return
				}
				mu.Lock()
				if refused {
					afterCap++
				}
				n := afterCap
				mu.Unlock()
				if n > 40 { // step 3 (40 capped requests) is done: hold step 4
					e.block(r)
					return
				}
				collClk.Advance(20 * time.Millisecond)
				completion(w)
			})
			rg := newRig(t, e.srv.URL, collClk)
			o := rg.saturate(rg.start(context.Background()), e.blocked)
			if o.err != nil {
				t.Fatalf("Run: %v", o.err)
			}
			if o.res.Steps != 5 || o.res.Completed != 5+10+40 || !(o.res.InputTPS > 0) {
				t.Errorf("result = %+v, want 5 steps, 55 completed, a TPS", o.res)
			}
			// 256 x5 and 512 x10 completed; 1024 refused (1-3 sent before
			// step 2 was cancelled; a cancelled one may reach the engine
			// late); then 512 x40 completed in step 3 and step 4 (512, at
			// most 4 at once) held. Nothing larger than 1024 was ever sent.
			reqs, status := e.requests()
			count := map[string]int{}
			for i, c := range reqs {
				count[strconv.Itoa(c.Units)+"/"+strconv.Itoa(status[i])]++
			}
			// A held request that reached the engine as the ramp ended may
			// not have been marked held yet (-1: no status): it is held too.
			nRefused, nHeld := count["1024/400"], count["512/0"]+count["512/-1"]
			delete(count, "1024/400")
			delete(count, "512/0")
			delete(count, "512/-1")
			if nRefused < 1 || nRefused > 3 || nHeld < 1 || nHeld > 4 || len(count) != 2 || count["256/200"] != 5 || count["512/200"] != 50 {
				t.Errorf("engine saw %v plus %d refused 1024s and %d held 512s", count, nRefused, nHeld)
			}
			mu.Lock()
			defer mu.Unlock()
			if afterCap < 41 {
				t.Errorf("%d capped requests after the refusal, want 40 completed and 1 held", afterCap)
			}
		})
	}
}

func TestPromptTooLongFailures(t *testing.T) {
	type answer func(w http.ResponseWriter, c calRequest)
	cases := []struct {
		name   string
		engine func() answer // a fresh engine per case
		steps  int
	}{
		{"the smallest prompt refused", func() answer {
			return func(w http.ResponseWriter, _ calRequest) {
				refuse(w, http.StatusBadRequest, "prompt too long")
			}
		}, 1},
		{"an unrelated 4xx is fatal, not a cap", func() answer {
			return func(w http.ResponseWriter, c calRequest) {
				if c.Units > 512 {
					refuse(w, http.StatusBadRequest, "unsupported parameter")
					return
				}
				completion(w)
			}
		}, 3},
		{"a 5xx mentioning the context is fatal, not a cap", func() answer {
			return func(w http.ResponseWriter, c calRequest) {
				if c.Units > 512 {
					refuse(w, http.StatusInternalServerError, "maximum context exceeded while scheduling")
					return
				}
				completion(w)
			}
		}, 3},
		{"a refusal at an already completed size is fatal", func() answer {
			// The engine takes 256 and 512, refuses 1024, then refuses 512
			// as well: capping at 512 again would repeat forever.
			var refused atomic.Bool
			return func(w http.ResponseWriter, c calRequest) {
				if c.Units > 512 || (c.Units > 256 && refused.Load()) {
					refused.Store(true)
					refuse(w, http.StatusBadRequest, "prompt too long")
					return
				}
				completion(w)
			}
		}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answer := tc.engine()
			e := newEngine(t, func(w http.ResponseWriter, _ *http.Request, c calRequest, _ int) { answer(w, c) })
			rg := newRig(t, e.srv.URL, clock.NewFake(epoch))
			o := rg.wait(rg.start(context.Background()))
			if o.err == nil || errors.Is(o.err, ErrInsufficientData) || o.res.Outcome != "error" || o.res.Steps != tc.steps {
				t.Fatalf("Run = %+v, %v; want a fatal error after %d steps", o.res, o.err, tc.steps)
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	var e *engine
	e = newEngine(t, func(w http.ResponseWriter, r *http.Request, _ calRequest, _ int) { e.block(r) })
	rg := newRig(t, e.srv.URL, clock.NewFake(epoch))
	ctx, cancel := context.WithCancel(context.Background())
	done := rg.start(ctx)
	select {
	case <-e.blocked:
	case <-time.After(hangGuard):
		t.Fatal("no request arrived")
	}
	cancel()
	o := rg.wait(done)
	if !errors.Is(o.err, context.Canceled) || o.res.Outcome != "cancelled" {
		t.Fatalf("Run = %+v, %v; want cancelled", o.res, o.err)
	}
	if st, _ := rg.coll.Stats(testModel); st.NumRunningQueries != 0 {
		t.Errorf("cancelled requests left in the projection: %d", st.NumRunningQueries)
	}
}

func TestRunConfigErrors(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ calRequest, _ int) {
		completion(w)
	})
	rg := newRig(t, e.srv.URL, clock.NewFake(epoch))
	rg.cfg.Requests = 0
	if _, err := Run(context.Background(), rg.cfg, tracker{rg.coll}); err == nil {
		t.Error("Requests 0 accepted")
	}
	rg = newRig(t, e.srv.URL, clock.NewFake(epoch))
	rg.cfg.NewID = func() (string, bool) { return "", false } // the model has no generation
	o := rg.wait(rg.start(context.Background()))
	if o.err == nil || o.res.Outcome != "error" {
		t.Errorf("Run without a generation = %+v, %v", o.res, o.err)
	}
	if reqs, _ := e.requests(); len(reqs) != 0 {
		t.Errorf("%d requests sent without ids", len(reqs))
	}
}
