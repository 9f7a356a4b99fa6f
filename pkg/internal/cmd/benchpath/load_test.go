package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeHop answers every request after delay, inside a synctest bubble
// where that sleep is fake time: every failEvery-th answer is a 500, and
// with events > 0 the answer is that many events, gap apart, then [DONE].
type fakeHop struct {
	delay, gap        time.Duration
	failEvery, events int
	n                 atomic.Int64
}

func (f *fakeHop) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	time.Sleep(f.delay)
	if n := f.n.Add(1); f.failEvery > 0 && n%int64(f.failEvery) == 0 {
		return &http.Response{StatusCode: http.StatusInternalServerError, Body: io.NopCloser(strings.NewReader(`{"error":"boom"}`))}, nil
	}
	var body io.Reader = strings.NewReader(`{"ok":true}`)
	if f.events > 0 {
		body = &slowEvents{left: f.events, gap: f.gap}
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(body)}, nil
}

// slowEvents yields its events one per Read, sleeping gap before every
// event but the first, then [DONE].
type slowEvents struct {
	left, sent int
	gap        time.Duration
	done       bool
}

func (s *slowEvents) Read(p []byte) (int, error) {
	if s.done {
		return 0, io.EOF
	}
	if s.sent > 0 {
		time.Sleep(s.gap)
	}
	ev := "data: {\"x\":1}\n\n"
	if s.sent == s.left {
		ev, s.done = "data: [DONE]\n\n", true
	}
	s.sent++
	return copy(p, ev), nil
}

func fakeSpec(clients int, d time.Duration, sse bool) loadSpec {
	return loadSpec{clients: clients, duration: d, sse: sse,
		request: func(ctx context.Context, _, _ int) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, "http://hop/v1/chat/completions", strings.NewReader("{}"))
		}}
}

func TestRunLoadClosedLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two clients, 10 ms per request, 100 ms: ten requests each,
		// the last one started at 90 ms.
		hop := &fakeHop{delay: 10 * time.Millisecond}
		res := runLoad(t.Context(), &http.Client{Transport: hop}, fakeSpec(2, 100*time.Millisecond, false))
		if res.OK != 20 || res.Failed != 0 || len(res.Latencies) != 20 || res.Elapsed != 100*time.Millisecond {
			t.Fatalf("ok %d failed %d latencies %d elapsed %v", res.OK, res.Failed, len(res.Latencies), res.Elapsed)
		}
		for _, l := range res.Latencies {
			if l != 10*time.Millisecond {
				t.Fatalf("latency %v, want 10ms", l)
			}
		}
		if len(res.FirstEvents) != 0 {
			t.Errorf("first events in an unstreamed run: %v", res.FirstEvents)
		}
	})
}

func TestRunLoadCountsFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hop := &fakeHop{delay: 10 * time.Millisecond, failEvery: 4}
		res := runLoad(t.Context(), &http.Client{Transport: hop}, fakeSpec(2, 100*time.Millisecond, false))
		if res.OK != 15 || res.Failed != 5 || !strings.Contains(res.FirstError, "HTTP 500") {
			t.Errorf("ok %d failed %d first error %q; want 15, 5, an HTTP 500", res.OK, res.Failed, res.FirstError)
		}
	})
}

func TestRunLoadTimesEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Head after 10 ms, three events 1 ms apart, then [DONE] 1 ms
		// later: 13 ms a request, so two fit in 26 ms.
		hop := &fakeHop{delay: 10 * time.Millisecond, gap: time.Millisecond, events: 3}
		res := runLoad(t.Context(), &http.Client{Transport: hop}, fakeSpec(1, 26*time.Millisecond, true))
		if res.OK != 2 || len(res.FirstEvents) != 2 || len(res.Gaps) != 6 {
			t.Fatalf("ok %d, first events %v, gaps %v", res.OK, res.FirstEvents, res.Gaps)
		}
		for i := range 2 {
			if res.FirstEvents[i] != 10*time.Millisecond || res.Latencies[i] != 13*time.Millisecond {
				t.Errorf("request %d: first event %v, latency %v", i, res.FirstEvents[i], res.Latencies[i])
			}
		}
		for _, g := range res.Gaps {
			if g != time.Millisecond {
				t.Errorf("gap %v, want 1ms", g)
			}
		}
	})
}

// tick is a clock that moves by step on every reading.
func tick(start time.Time, step time.Duration) func() time.Time {
	now := start
	return func() time.Time { now = now.Add(step); return now }
}

func TestReadEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	long := strings.Repeat("x", 100<<10) // longer than the reader's buffer
	for _, tc := range []struct {
		name, stream string
		events       int
		err          error
	}{
		{"events", "data: a\n\ndata: b\n\ndata: [DONE]\n\n", 3, nil},
		{"crlf and multi-line", "event: x\r\ndata: a\r\ndata: b\r\n\r\ndata:[DONE]\r\n\r\n", 2, nil},
		{"a field longer than the buffer", "data: " + long + "\n\ndata: [DONE]\n\n", 2, nil},
		{"blank lines between events count once", "\n\ndata: a\n\n\n\ndata: [DONE]\n\n", 2, nil},
		{"cut short", "data: a\n\ndata: b\n\n", 2, errNoDone},
		{"[DONE] only in a text", "data: {\"t\":\"[DONE]\"}\n\n", 1, errNoDone},
	} {
		ev, err := readEvents(strings.NewReader(tc.stream), t0, tick(t0, time.Millisecond))
		if ev.count != tc.events || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d events, %v; want %d, %v", tc.name, ev.count, err, tc.events, tc.err)
			continue
		}
		// The clock is read once per event: the first at 1 ms, then a
		// gap of 1 ms each.
		if ev.first != time.Millisecond || len(ev.gaps) != tc.events-1 {
			t.Errorf("%s: first %v, gaps %v", tc.name, ev.first, ev.gaps)
		}
	}
}
